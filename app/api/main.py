"""The uvicorn factory: each worker process builds its own app from the settings
`agentrm serve` handed over (app/config.py, its internal variables)."""
from app import config

from .app import create_app


def app_from_env():
    settings = config.load()
    if not settings.resolved_database_url:
        raise config.ConfigError("AGENTRM_RESOLVED_DATABASE_URL is not set: this factory serves "
                                 "the workers of `agentrm serve`, which sets it")
    # The demo echo model is served whenever `serve` handed its URL over: with the fleet, and
    # without it when no upstream is configured (app/bootstrap.py, use_demo_upstream).
    return create_app(settings.resolved_database_url, demo=settings.demo,
                      demo_upstream=bool(settings.demo_upstream_url), tune_gc=True)
