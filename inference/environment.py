"""The rows INFERENCE_NODES asks for, made when a process first reads the fleet (its start-up).

Each process syncs once per value of the variable (cheap: the rows are compared, not rewritten), so
whichever starts first, Daphne, a Celery worker or beat, creates them.
"""

from __future__ import annotations

import contextlib
import re
import threading
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction

from inference.models import InferenceNode

_synced: tuple[str, ...] | None = None
_lock = threading.Lock()


def parse_environment_nodes(entries: list[str]) -> list[tuple[str, str]]:
    """[(name, base URL)] from INFERENCE_NODES entries: `name=url`, or a bare URL (named after its
    host and port)."""
    nodes = []
    for entry in entries:
        name, sep, url = entry.partition("=")
        if not sep or "://" in name:
            name, url = "", entry
        url = url.strip().rstrip("/")
        try:
            URLValidator(schemes=["http", "https"])(url)
        except Exception as exc:
            raise ImproperlyConfigured(f"INFERENCE_NODES: {entry!r} is not a URL or name=URL") from exc
        if not name.strip():
            parts = urlsplit(url)
            name = f"{parts.hostname}-{parts.port or (443 if parts.scheme == 'https' else 80)}"
        nodes.append((re.sub(r"[^a-zA-Z0-9_-]+", "-", name.strip()).strip("-").lower(), url))
    return nodes


def sync_environment_nodes() -> None:
    """Create or update the rows INFERENCE_NODES names (once per process while it is unchanged).
    Rows staff added in the admin are left alone, as are environment rows since removed from it."""
    global _synced
    entries = tuple(settings.INFERENCE_NODES)
    with _lock:
        if entries == _synced:
            return
    for name, url in parse_environment_nodes(list(entries)):
        with contextlib.suppress(IntegrityError), transaction.atomic():  # another process made it first
            node = (
                InferenceNode.objects.select_for_update().filter(name=name).first()
                or InferenceNode.objects.select_for_update().filter(base_url=url).first()
            )
            if node is None:
                InferenceNode.objects.create(name=name, base_url=url, from_environment=True)
            elif (node.name, node.base_url) != (name, url):
                node.name, node.base_url = name, url
                node.save(update_fields=["name", "base_url"])
    with _lock:
        _synced = entries


def forget_sync() -> None:
    """Sync again on next use (tests that empty the database)."""
    global _synced
    with _lock:
        _synced = None
