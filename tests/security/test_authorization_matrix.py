"""Who may use what: every route of the product, tried as each actor, against what is written down.

The routes are read from the URL conf (django.urls.get_resolver, the admin's included) and from the
ASGI application (the SSE route beside Django and the WebSocket routes of config/asgi.py), and the
WebSocket's commands from the consumer, so a new route or command cannot be forgotten: until someone
writes down what each actor must get (tests/security/expected_access.py, ASGI_EXPECTED and
WS_EXPECTED below), these tests fail and name it.
"""

from __future__ import annotations

import pytest
from asgiref.sync import iscoroutinefunction

from chat.consumers import ChatConsumer
from tests.security.authz_world import ACTORS, build_world
from tests.security.expected_access import EXPECTED
from tests.security.live_matrix import CLOSED_4401, sse_outcome, ws_commands, ws_outcome
from tests.security.matrix import methods_for, observe
from tests.security.routes import asgi_routes, django_routes

ROUTES = django_routes()
# Async views hop to another thread for the database, which only sees committed rows.
SYNC_ROUTES = [r for r in ROUTES if not iscoroutinefunction(r.callback)]
ASYNC_ROUTES = [r for r in ROUTES if iscoroutinefunction(r.callback)]

#: Routes the ASGI application serves itself, before Django: {route: {actor: status}} for a GET of
#: the owner's answer's stream (200 means the whole stream, to its `done` event).
ASGI_EXPECTED = {
    "/chat/api/messages/<int:message_id>/stream": {
        "anonymous": 401,
        "other": 404,
        "moderator": 404,
        "staff": 404,
        "owner": 200,
    },
}
#: WebSocket routes: what connecting gets each actor, then what each command naming the owner's
#: objects gets them (the status of the error frame, or 200 when the command was carried out; the
#: owner's send, regenerate and continue are refused by the action's own rule, 400, after the ownership check).
WS_EXPECTED = {
    "/ws/chat/": {
        "connect": {
            "anonymous": CLOSED_4401,
            "other": "hello",
            "moderator": "hello",
            "staff": "hello",
            "owner": "hello",
        },
        "send": {"other": 404, "moderator": 404, "staff": 404, "owner": 400},
        "regenerate": {"other": 404, "moderator": 404, "staff": 404, "owner": 400},
        "continue": {"other": 404, "moderator": 404, "staff": 404, "owner": 400},
        "attach": {"other": 404, "moderator": 404, "staff": 404, "owner": 200},
        "stop": {"other": 404, "moderator": 404, "staff": 404, "owner": 200},
        "detach": {},
    },
}


def _table(observed: dict, route: str) -> str:
    lines = [f"    {route!r}: {{"]
    for method, by_actor in observed.items():
        lines.append(f'        "{method}": "{" ".join(str(by_actor[a]) for a in ACTORS)}",')
    return "\n".join([*lines, "    },"])


def test_every_route_of_the_url_conf_has_its_expectations_written_down():
    routes = {r.route for r in ROUTES}
    missing = sorted(routes - EXPECTED.keys())
    assert not missing, (
        "These routes have no expected status per actor in tests/security/expected_access.py; add each, "
        "with what anonymous, another user, a moderator, staff and the owner must get:\n  " + "\n  ".join(missing)
    )
    stale = sorted(EXPECTED.keys() - routes)
    assert not stale, "tests/security/expected_access.py names routes that no longer exist:\n  " + "\n  ".join(stale)
    for route in ROUTES:
        assert set(EXPECTED[route.route]) == set(methods_for(route)), (
            f"{route.route}: write down every method the matrix tries: {methods_for(route)}"
        )


def _check(route) -> None:
    if route.route not in EXPECTED:
        pytest.fail(f"{route.route} has no expectations (see test_every_route_of_the_url_conf_has_…)")
    observed = observe(route, build_world())
    expected = {
        method: dict(zip(ACTORS, (int(s) if s.isdigit() else s for s in row.split()), strict=True))
        for method, row in EXPECTED[route.route].items()
    }
    assert observed == expected, (
        f"{route.route} ({route.name or 'unnamed'}) answers differently from what is written down.\n"
        f"Written (anonymous other moderator staff owner):\n{_table(expected, route.route)}\n"
        f"Observed:\n{_table(observed, route.route)}"
    )


@pytest.mark.parametrize("route", SYNC_ROUTES, ids=[r.route for r in SYNC_ROUTES])
def test_each_route_answers_each_actor_as_written_down(db, route):
    _check(route)


@pytest.mark.parametrize("route", ASYNC_ROUTES, ids=[r.route for r in ASYNC_ROUTES])
def test_each_async_route_answers_each_actor_as_written_down(transactional_db, route):
    _check(route)


def test_the_asgi_routes_and_websocket_commands_all_have_their_expectations_written_down():
    assert set(asgi_routes("http")) == set(ASGI_EXPECTED), "write down the new ASGI HTTP route in ASGI_EXPECTED"
    assert set(asgi_routes("websocket")) == set(WS_EXPECTED), "write down the new WebSocket route in WS_EXPECTED"
    commands = set(ChatConsumer.commands)
    assert commands == set(WS_EXPECTED["/ws/chat/"]) - {"connect"}, (
        f"the chat WebSocket's commands are {sorted(commands)}: write down what each actor gets for each"
    )


def test_the_answer_stream_and_the_websocket_answer_each_actor_as_written_down(transactional_db, server):
    world = build_world()

    for actor in ACTORS:
        status = sse_outcome(server, world, actor, world.answer.pk)
        assert status == ASGI_EXPECTED["/chat/api/messages/<int:message_id>/stream"][actor], (actor, status)

    expected = WS_EXPECTED["/ws/chat/"]
    for actor in ACTORS:
        assert ws_outcome(server, world, actor, None) == expected["connect"][actor], actor
    frames = ws_commands(world)
    assert set(frames) == set(expected) - {"connect"}
    for command, frame in frames.items():
        if frame is None:
            continue
        for actor in ("other", "moderator", "staff", "owner"):  # the owner last: stop changes nothing, but still
            got = ws_outcome(server, world, actor, frame)
            assert got == expected[command][actor], (command, actor, got)
