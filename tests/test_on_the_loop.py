"""Daphne runs the browser's middleware chain on the event loop (config/loop_handler.py). Each kind of
request a browser makes gets, from Daphne, what Django's own chain gives it in-process: the status, the
redirect, the cookies set, the security headers; and the hooks that sometimes do I/O (the session saved,
a message stored, a multipart form parsed) still do it."""

from __future__ import annotations

import re

import httpx
import pytest
from django.conf import settings
from django.test import Client

from accounts.services import suspend_user
from tests.conftest import make_user
from tests.support.sessions import CSRF, session_cookie_for

pytestmark = pytest.mark.django_db(transaction=True)

#: Compared by value (the rest by name: a page's nonce, tokens and dates differ from one answer to the next).
BY_VALUE = (
    "content-type",
    "location",
    "vary",
    "cache-control",
    "x-frame-options",
    "x-content-type-options",
    "referrer-policy",
    "cross-origin-opener-policy",
)
OF_THE_EXCHANGE = {"date", "server", "content-length", "transfer-encoding", "connection", "set-cookie"}


def _cookies_set(set_cookie_headers: list[str]) -> set[str]:
    return {header.split("=", 1)[0].strip() for header in set_cookie_headers}


def _csp_without_nonce(value: str) -> set[str]:
    return {re.sub(r"'nonce-[^']*'", "'nonce'", part.strip()) for part in value.split(";")}


def _compare(full, live) -> None:
    assert live.status_code == full.status_code
    full_headers = {k.lower(): v for k, v in full.headers.items() if k.lower() not in OF_THE_EXCHANGE}
    live_headers = {k.lower(): v for k, v in live.headers.items() if k.lower() not in OF_THE_EXCHANGE}
    missing = set(full_headers) - set(live_headers)
    assert not missing, f"Daphne's chain lost {missing}"
    for name in BY_VALUE:
        if name in full_headers:
            assert live_headers[name] == full_headers[name], name
    if "content-security-policy" in full_headers:
        assert _csp_without_nonce(live_headers["content-security-policy"]) == _csp_without_nonce(
            full_headers["content-security-policy"]
        )
    full_cookies = _cookies_set([c.output(header="").strip() for c in full.cookies.values()])
    assert _cookies_set(live.headers.get_list("set-cookie")) == full_cookies


def _both(server, method: str, path: str, *, cookies=None, headers=None, data=None, content_type=None):
    cookies = cookies or {}
    headers = {"Accept": "text/html,*/*", **(headers or {})}  # as a browser asks for a page
    full_client = Client(enforce_csrf_checks=True)
    for name, value in cookies.items():
        full_client.cookies[name] = value
    kwargs = {"headers": headers}
    if data is not None:
        kwargs["data"] = data
        kwargs["content_type"] = content_type
    full = full_client.generic(method, path, **kwargs)
    with httpx.Client(base_url=server.base_url, cookies=cookies, timeout=30) as live_client:
        live = live_client.request(
            method,
            path,
            headers={**headers, **({"Content-Type": content_type} if content_type else {})},
            content=data,
        )
    return full, live


@pytest.mark.parametrize(
    "path",
    [
        "/",  # the landing page
        "/accounts/login/",  # a form, with the CSRF cookie set
        "/settings",  # the appended slash
        "/accounts/",  # allauth's redirect from its 404
        "/chat/api/conversations",  # the chat's JSON 401
        "/static/chat/icons/icon-192.png",  # a static file
        "/?q=%00",  # a NUL in the query string
    ],
)
def test_a_visitor_gets_what_djangos_chain_gives(server, path):
    _compare(*_both(server, "GET", path))


def test_a_signed_in_person_gets_their_pages_and_the_csrf_check(server):
    user = make_user("ada.loop@example.com")
    cookies = session_cookie_for(user)
    _compare(*_both(server, "GET", "/settings/", cookies=cookies))
    _compare(*_both(server, "GET", "/chat/api/conversations", cookies=cookies))
    # No token: refused by the CSRF check in both.
    _compare(
        *_both(server, "POST", "/chat/api/conversations", cookies=cookies, data=b"{}", content_type="application/json")
    )


def test_a_form_that_changes_the_session_saves_it(server):
    """Signing in changes the session (a new key, saved on a thread): Daphne's answer sets the new session
    cookie, and the next page is the signed-in person's."""
    make_user("grace.loop@example.com", password="a-long-enough-password")
    cookies = {"csrftoken": CSRF}
    form = b"login=grace.loop%40example.com&password=a-long-enough-password&csrfmiddlewaretoken=" + CSRF.encode()
    with httpx.Client(base_url=server.base_url, cookies=cookies, timeout=30) as browser:
        signed_in = browser.post(
            "/accounts/login/",
            content=form,
            headers={"Content-Type": "application/x-www-form-urlencoded", "Referer": server.base_url + "/"},
        )
        assert signed_in.status_code == 302, signed_in.text[:300]
        assert settings.SESSION_COOKIE_NAME in _cookies_set(signed_in.headers.get_list("set-cookie"))
        page = browser.get("/settings/")
        assert page.status_code == 200 and "grace.loop@example.com" in page.text


def test_staff_without_two_factor_are_sent_to_enrol_with_the_message_stored(server):
    staff = make_user("staff.loop@example.com", staff=True)
    full, live = _both(server, "GET", "/chat/", cookies=session_cookie_for(staff))
    _compare(full, live)
    assert live.status_code == 302 and "messages" in _cookies_set(live.headers.get_list("set-cookie"))


def test_a_suspended_person_gets_the_suspension_page(server):
    user = make_user("mallory.loop@example.com")
    suspend_user(user, "Spam")
    full, live = _both(server, "GET", "/settings/", cookies=session_cookie_for(user))
    _compare(full, live)
    assert live.status_code == 403 and "Spam" in live.text


def test_a_multipart_upload_is_checked_and_read(server):
    """A multipart body is parsed on a thread by the CSRF check; without the token it is refused as in
    Django's chain."""
    user = make_user("uploader.loop@example.com")
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\nhello\r\n--b--\r\n"
    )
    _compare(
        *_both(
            server,
            "POST",
            "/chat/api/files",
            cookies=session_cookie_for(user),
            data=body,
            content_type="multipart/form-data; boundary=b",
        )
    )
