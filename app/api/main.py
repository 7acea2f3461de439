"""The uvicorn factory: each worker process builds its own app from the settings
`agentrm serve` handed over (app/bootstrap.py)."""
from app.bootstrap import ServeSettings

from .app import create_app


def app_from_env():
    settings = ServeSettings.from_env()
    return create_app(settings.database_url, demo=settings.demo, tune_gc=True)
