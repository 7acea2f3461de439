"""The uvicorn factory: each worker process builds its own app from the settings
`agentrm serve` handed over (app/config.py, its internal variables)."""
from app import config

from .app import create_app


def app_from_env():
    settings = config.load()
    if not settings.resolved_database_url:
        raise config.ConfigError("AGENTRM_RESOLVED_DATABASE_URL is not set: this factory serves "
                                 "the workers of `agentrm serve`, which sets it")
    return create_app(settings.resolved_database_url, demo=settings.demo, tune_gc=True)
