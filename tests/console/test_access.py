"""Only staff reach the console: every console URL refuses a visitor and a signed-in non-staff user."""

import re

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import URLPattern, URLResolver

from chat.models import Conversation
from tests.conftest import make_user
from tests.support.accounts import signed_in

# Values for the URL parameters of the console's routes.
SAMPLE = {"object_id": "1", "user_id": "1", "id": "1", "content_type_id": "1", "app_label": "accounts"}


def console_paths() -> list[str]:
    """Every route of the admin site, its parameters filled in: /admin/<…>."""
    paths = []

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            route = str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + route)
            elif isinstance(entry, URLPattern):
                paths.append(fill(prefix + route))

    walk(admin.site.get_urls(), "/admin/")
    return sorted(set(paths))


def fill(route: str) -> str:
    route = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: SAMPLE.get(m.group(1), "1"), route)
    route = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: SAMPLE.get(m.group(1), "1"), route)
    return route.lstrip("^").replace("^", "").replace("$", "").replace("\\", "")


def test_the_console_has_the_expected_routes():
    paths = console_paths()
    assert len(paths) > 40
    for expected in (
        "/admin/",
        "/admin/dashboard.json",
        "/admin/accounts/user/",
        "/admin/accounts/user/1/suspend/",
        "/admin/audit/auditentry/",
        "/admin/chat/conversation/1/change/",
        "/admin/billing/plan/1/change/",
    ):
        assert expected in paths


@pytest.mark.parametrize("who", ["visitor", "member"])
def test_no_console_url_is_open_to_anyone_but_staff(db, who):
    member = make_user("member@example.com")
    Conversation.objects.create(owner=member, model="m", title="private")
    client = signed_in(member) if who == "member" else Client()

    for path in console_paths():
        if path.endswith("/logout/"):
            continue
        for method in ("get", "post"):
            response = getattr(client, method)(path)
            if path == "/admin/login/":
                # The console's sign-in is the product's: a visitor is sent there; a member is told
                # they are not staff (the page offers to sign in as someone else), never let in.
                assert response.status_code in (200, 302)
                if response.status_code == 200:
                    assert "not authorized" in response.content.decode()
                continue
            assert response.status_code in (302, 403), (method, path, response.status_code)
            if response.status_code == 302:
                assert "/login/" in response["Location"], (method, path, response["Location"])
