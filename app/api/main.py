"""The uvicorn factory: each worker process builds its own app from the environment."""
import os

from .app import create_app


def app_from_env():
    demo = os.environ.get("AGENTRM_DEMO", "1") == "1"
    return create_app(os.environ["AGENTRM_RESOLVED_DATABASE_URL"], demo=demo)
