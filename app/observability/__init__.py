"""Operations: Prometheus metrics, health and readiness, structured logs."""
