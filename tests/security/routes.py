"""Every route of the product, read from the URL conf and the ASGI application, with its parameters
filled from the security tests' world (tests/security/authz_world.py).

The matrix tests walk these lists, so a route added to any urls.py, to the admin or to the Channels
routing is tried by them at once, and fails them until someone writes down who may use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver

NO_SUCH_OBJECT = "999999"


@dataclass(frozen=True)
class Route:
    route: str  # the pattern as written, prefixes joined: "/chat/api/messages/<int:message_id>/stop"
    name: str  # "chat:message-stop"; "" for an unnamed pattern
    callback: object

    @property
    def is_admin(self) -> bool:
        return self.route.startswith("/admin/")


def django_routes() -> list[Route]:
    """Every URL pattern Django resolves, the admin's included, in the order they are tried."""
    found: list[Route] = []

    def walk(patterns, prefix: str, namespaces: list[str]) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                inner = [*namespaces, entry.namespace] if entry.namespace else namespaces
                walk(entry.url_patterns, prefix + str(entry.pattern), inner)
            elif isinstance(entry, URLPattern):
                name = ":".join([*namespaces, entry.name]) if entry.name else ""
                found.append(Route(prefix + str(entry.pattern), name, entry.callback))

    walk(get_resolver().url_patterns, "/", [])
    return found


def _unwrap_router(app):
    """The URLRouter inside Channels middleware (origin validator, auth stack, the overload gate)."""
    from channels.routing import URLRouter

    seen = 0
    while not isinstance(app, URLRouter):
        seen += 1
        if seen > 20:
            raise AssertionError(f"no URLRouter found inside {app!r}")
        app = getattr(app, "inner", None) or getattr(app, "app", None) or getattr(app, "application", None)
        if app is None:
            raise AssertionError("no URLRouter found in the ASGI application")
    return app


def asgi_routes(protocol: str) -> list[str]:
    """Routes the ASGI application serves itself for `protocol` ("http" or "websocket"), Django's
    catch-all left out (its routes are django_routes())."""
    from config.asgi import application

    while not hasattr(application, "application_mapping"):
        application = application.app  # RunBeatSchedule, when the embedded beat is on
    router = _unwrap_router(application.application_mapping[protocol])
    from django.core.handlers.asgi import ASGIHandler

    routes = []
    for route in router.routes:
        text = str(route.pattern)
        if isinstance(route.callback, ASGIHandler):
            continue  # Django (the API's chain for /v1, the browser's for the rest): its routes are django_routes()
        routes.append("/" + text.lstrip("^/"))
    return routes


def admin_model(route: str):
    """The model a standard admin route belongs to (/admin/<app>/<model>/…), or None."""
    match = re.match(r"^/admin/(\w+)/(\w+)/", route)
    if not match:
        return None
    try:
        return apps.get_model(match.group(1), match.group(2))
    except LookupError:
        return None


def fill(route: str, values: dict[str, str]) -> str:
    """The route with its parameters (path converters and regex groups) replaced by `values`."""
    path = re.sub(r"\(\?P<(\w+)>(?:[^()]|\([^()]*\))*\)", lambda m: values[m.group(1)], route)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], path)
    path = path.replace("^", "").replace("$", "")
    assert not re.search(r"[<>()\\]", path), f"could not fill {route!r}: {path!r}"
    return path


def parameters(route: str) -> list[str]:
    return re.findall(r"<(?:\w+:)?(\w+)>", route) + re.findall(r"\(\?P<(\w+)>", route)
