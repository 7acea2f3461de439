"""Logging: one line per record, as text or JSON (`agentrm serve --log-format text|json`).

Standard logging with a JSON formatter: no new dependency, and every library's records
(uvicorn's included) come out in the same shape. The ids that tie a line to the log of
events - request, agent, pool, turn - come from two places: `extra={...}` on the call,
and the context of the request being served (`bind`), which the gateway sets once per
request so that every line it causes carries them.
"""
from __future__ import annotations

import contextvars
import json
import logging
import logging.config
import time
from collections.abc import Mapping
from types import MappingProxyType

FIELDS = ("request_id", "agent_id", "pool", "turn_id", "run_id", "status", "format", "duration_s", "reason",
          "upstream_request_id", "idempotent_replay")
# Read-only default: the context is only ever replaced (bind sets a new dict), never mutated.
_context: contextvars.ContextVar[Mapping] = contextvars.ContextVar("agentrm_log_context",
                                                                   default=MappingProxyType({}))


def bind(**ids) -> contextvars.Token:
    """Add ids to every record logged from this task (and tasks it starts) on."""
    return _context.set({**_context.get(), **{k: v for k, v in ids.items() if v is not None}})


def reset(token: contextvars.Token) -> None:
    _context.reset(token)


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
               + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`LEVEL logger: message key=value ...`, the ids appended."""

    def format(self, record: logging.LogRecord) -> str:
        base = f"{record.levelname} {record.name}: {record.getMessage()}"
        ids = " ".join(f"{k}={getattr(record, k)}" for k in FIELDS if getattr(record, k, None) is not None)
        text = f"{base} {ids}" if ids else base
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def config(log_format: str = "text", level: str = "warning") -> dict:
    """A logging dictConfig: the root at `level`, AgentRM's own loggers at INFO (one line
    per gateway call and per notable decision), uvicorn's through the same formatter."""
    if log_format not in ("text", "json"):
        raise ValueError("log format must be text or json")
    formatter = "app.observability.logs.JsonFormatter" if log_format == "json" else \
        "app.observability.logs.TextFormatter"
    handler = {"class": "logging.StreamHandler", "formatter": "default", "filters": ["context"],
               "stream": "ext://sys.stderr"}
    return {
        "version": 1, "disable_existing_loggers": False,
        "filters": {"context": {"()": "app.observability.logs.ContextFilter"}},
        "formatters": {"default": {"()": formatter}},
        "handlers": {"default": handler},
        "root": {"handlers": ["default"], "level": level.upper()},
        "loggers": {
            "agentrm": {"level": "INFO"},
            "uvicorn": {"handlers": ["default"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["default"], "level": level.upper(), "propagate": False},
        },
    }


def configure(log_format: str = "text", level: str = "warning") -> dict:
    cfg = config(log_format, level)
    logging.config.dictConfig(cfg)
    return cfg
