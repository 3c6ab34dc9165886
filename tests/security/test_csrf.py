"""CSRF: every state-changing request (form or JSON) without the token is refused, on every route.

The routes and their methods come from the authorization matrix's table (every method that is not
405 to whoever can use the route), so a new form or endpoint is covered at once. The only exempt
routes are the ones below, each authenticated by something a cross-site page cannot send.
"""

from __future__ import annotations

import json

from tests.security.authz_world import build_world
from tests.security.matrix import JSON_PREFIX
from tests.security.routes import django_routes
from tests.security.test_request_limits import _acting, _path, body_routes

#: Routes without CSRF protection, and why that is safe.
CSRF_EXEMPT = {
    # An API key in the Authorization header, never a cookie (the matrix shows a session gets 401).
    "/v1/chat/completions": "authenticated by the bearer API key only",
    "/v1/completions": "authenticated by the bearer API key only",
    "/v1/embeddings": "authenticated by the bearer API key only",
    "/v1/responses": "authenticated by the bearer API key only",
    "/v1/responses/<str:response_id>": "authenticated by the bearer API key only (GET and DELETE)",
    # The API's other routes take only GET (a POST is OpenAI's JSON 405, not a CSRF refusal, since an API
    # client sends no cookie), and any other /v1 path is a JSON 404 whatever the method: none changes state.
    "/v1/models": "GET only, by the bearer API key",
    "/v1/models/<path:model_id>": "GET only, by the bearer API key",
    "/v1/openapi.json": "GET only, public",
    "/v1/^": "answers 404 to everything",
    "/v1": "answers 404 to everything",
    # Stripe signs each event; a bad or stale signature gets 400 (tests/billing/test_stripe.py).
    "/billing/stripe/webhook/": "authenticated by Stripe's signature",
}


def test_only_the_listed_routes_are_exempt_from_csrf():
    exempt = {r.route for r in django_routes() if getattr(r.callback, "csrf_exempt", False)}
    assert exempt == set(CSRF_EXEMPT), f"CSRF-exempt views: {sorted(exempt)}; write down why each is safe"


def test_every_state_changing_request_without_the_token_is_refused(db):
    world = build_world()
    routes = [(route, method) for route, method in body_routes() if route not in CSRF_EXEMPT]
    assert len(routes) > 100
    let_through = []
    for route, method in routes:
        client = world.client(_acting(route), enforce_csrf_checks=True)
        path = _path(route, world)
        if route.startswith(JSON_PREFIX):
            response = client.generic(method, path, json.dumps({"title": "x"}), content_type="application/json")
        else:
            response = client.generic(method, path, "name=x", content_type="application/x-www-form-urlencoded")
        if response.status_code != 403:
            let_through.append(f"{method} {route}: {response.status_code}")
        elif route.startswith(JSON_PREFIX):
            assert "CSRF" in response.json()["error"]["message"]  # a sentence, in the chat's JSON shape
    assert not let_through, "accepted without a CSRF token:\n  " + "\n  ".join(let_through)


def test_the_same_requests_with_the_token_get_past_the_check(db):
    """The refusal above is the CSRF check's, not something else's: with the token, the JSON endpoints
    answer as the matrix says."""
    world = build_world()
    client = world.client("owner", enforce_csrf_checks=True)
    client.get("/")  # the page sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/chat/api/conversations", json.dumps({"title": "x"}), content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert response.status_code == 201
