"""Reading settings from environment variables, with typed helpers.

Every setting the product reads is named in README.md's configuration table.
"""

import os

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from exc


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from exc


def env_list(name: str, default: str = "") -> list[str]:
    """A comma-separated list; blanks are dropped."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int_map(name: str, default: str = "") -> dict[str, int]:
    """A comma-separated list of `name=whole number` pairs, e.g. `sim-large=32768,qwen=131072`."""
    pairs = {}
    for item in env_list(name, default):
        key, _, raw = item.rpartition("=")
        try:
            pairs[key.strip()] = int(raw)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name} must list name=whole number pairs, not {item!r}") from exc
        if not key.strip():
            raise ImproperlyConfigured(f"{name} must list name=whole number pairs, not {item!r}")
    return pairs
