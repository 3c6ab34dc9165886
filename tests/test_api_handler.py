"""Daphne's middleware chains on the event loop (config/loop_handler.py), and the API's own
(config/api_handler.py): what MIDDLEWARE has that /v1 needs, and nothing a program's response carried
through the browser's chain lost."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string

from accounts.api_keys import create_api_key
from config.api_handler import NOT_FOR_PROGRAMS
from config.loop_handler import LoopHandler, on_the_loop
from tests.support.plans import put_on_plan

#: Headers that name the exchange rather than the answer (or that the server writes), not compared.
OF_THE_EXCHANGE = {"date", "server", "content-length", "transfer-encoding", "connection", "x-request-id"}


def _browser_entry(api_entry: str) -> str:
    """The MIDDLEWARE entry an API_MIDDLEWARE entry stands for: itself, or the class it runs on the loop."""
    if api_entry in settings.MIDDLEWARE:
        return api_entry
    cls = import_string(api_entry)
    for entry in settings.MIDDLEWARE:
        base = import_string(entry)
        if isinstance(base, type) and issubclass(cls, base):
            return entry
    raise AssertionError(f"{api_entry} stands for nothing in MIDDLEWARE")


def test_each_browser_middleware_is_in_the_api_chain_in_order_or_said_why_not():
    kept = [_browser_entry(entry) for entry in settings.API_MIDDLEWARE]
    assert kept == [entry for entry in settings.MIDDLEWARE if entry in kept], "the API's chain keeps MIDDLEWARE's order"
    assert set(kept).isdisjoint(NOT_FOR_PROGRAMS)
    assert set(settings.MIDDLEWARE) == set(kept) | set(NOT_FOR_PROGRAMS), (
        "a middleware added to MIDDLEWARE needs a decision for /v1: API_MIDDLEWARE, or NOT_FOR_PROGRAMS with why"
    )


@pytest.mark.parametrize("setting", ["MIDDLEWARE", "API_MIDDLEWARE"])
def test_every_layer_daphne_runs_is_async(setting):
    """Daphne's chains run on the event loop: each entry is async-capable or has a twin that is."""
    for entry in getattr(settings, setting):
        assert getattr(on_the_loop(entry), "async_capable", False), entry


@pytest.mark.parametrize("added", ["SyncOnly", "HopsEveryRequest"])
def test_a_middleware_that_would_take_every_request_to_a_thread_is_refused(settings, added):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"tests.test_api_handler.{added}"]
    with pytest.raises(ImproperlyConfigured, match=f"{added} would take every request to a thread"):
        LoopHandler()


class SyncOnly:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)


class HopsEveryRequest(MiddlewareMixin):
    """Async-capable by MiddlewareMixin's flag, but each of its hooks would go to a thread."""

    def process_request(self, request):
        return None


def _names_and_values(headers) -> dict[str, object]:
    found: dict[str, object] = {}
    for name, value in headers.items():
        name = name.lower()
        if name in OF_THE_EXCHANGE:
            continue
        if name == "content-security-policy":  # the same directives, in whatever order a process lists them
            found[name] = {directive.strip() for directive in value.split(";")}
        elif name == "vary":
            # Only what an API answer depends on: the browser's chain said Cookie because its suspension
            # check read the session, and Accept-Language because it picks the pages' language; no /v1
            # answer depends on either (the API answers in English, as OpenAI's does).
            found[name] = {part.strip() for part in value.split(",")} - {"Cookie", "Accept-Language"} or None
        elif name == "content-language":
            continue
        else:
            found[name] = value
    return {name: value for name, value in found.items() if value is not None}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/models", None),  # an answer
        ("POST", "/v1/chat/completions", b"{not json"),  # a refusal from the view
        ("GET", "/v1/no-such-endpoint", None),  # the API's own 404
        ("DELETE", "/v1/chat/completions", None),  # a wrong method, rewritten by api_headers
        ("GET", "/v1/models?q=%00", None),  # a NUL in the query string, refused by a middleware
    ],
)
def test_a_program_gets_every_header_the_browser_chain_gave(transactional_db, server, user, method, path, body):
    """Served by Daphne through the API's chain, each response carries every header (with its value)
    that Django's full chain gives the same request in-process, and the same status and body."""
    put_on_plan(user, "pro")
    _, raw = create_api_key(user, "headers")
    headers = {"Authorization": f"Bearer {raw}", "Content-Type": "application/json", "X-Client-Request-Id": "abc-1"}
    full = Client().generic(method, path, data=body or b"", headers=headers)
    live = httpx.request(method, server.base_url + path, content=body, headers=headers, timeout=30)

    assert live.status_code == full.status_code
    assert live.content == full.content
    expected, got = _names_and_values(full.headers), _names_and_values(live.headers)
    missing = {name: value for name, value in expected.items() if got.get(name) != value}
    assert not missing, f"the API's chain lost or changed {missing} (it gave {got})"
    assert live.headers["x-request-id"].startswith("req_")
