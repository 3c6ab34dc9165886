"""Structured logging: one JSON object per line in production, readable lines in development."""

import json
import logging
from datetime import UTC, datetime

# Attributes every LogRecord has; anything else was passed with `extra=` and is worth keeping.
_STANDARD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message"}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool | None) else repr(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def logging_config(json_lines: bool, level: str) -> dict:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": JSONFormatter},
            "plain": {"format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "json" if json_lines else "plain"},
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.server": {"level": "WARNING"},
            "daphne": {"level": "WARNING"},
            # A line per HTTP request the product makes (the engines' health and load polls every two
            # seconds): their failures are logged by the product, with what they mean. At DEBUG, all of it.
            "httpx": {"level": "DEBUG" if level.upper() == "DEBUG" else "WARNING"},
            "httpcore": {"level": "DEBUG" if level.upper() == "DEBUG" else "WARNING"},
        },
    }
