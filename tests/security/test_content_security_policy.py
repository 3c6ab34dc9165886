"""Every page carries a Content-Security-Policy that allows only our own scripts and styles.

The browser tests prove the pages work under it: every one of them fails on a policy violation
(tests/e2e/conftest.py, `watch_policy`).
"""

import pytest
from django.urls import reverse

from tests.chat.factories import conversation_for, exchange


def _policy(response) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy")
    assert header, f"no Content-Security-Policy on {response.request['PATH_INFO']}"
    return {name: values for name, *values in (part.split() for part in header.split(";") if part.strip())}


def _is_strict(policy: dict[str, list[str]]) -> None:
    assert policy["default-src"] == ["'self'"]
    assert "'unsafe-inline'" not in policy["script-src"] and "'unsafe-eval'" not in policy["script-src"]
    assert policy["style-src"] == ["'self'"]  # no inline style at all
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'self'"]


@pytest.fixture
def share_token(user):
    from chat.sharing.services import share_conversation

    conversation = conversation_for(user)
    exchange(conversation, "Hello", "Hi")
    return share_conversation(user, conversation.pk)[0].token


@pytest.mark.parametrize(
    "name",
    ["home", "settings", "account_api_keys", "account_data", "account_shared_links", "billing:plans", "billing:usage"],
)
def test_every_page_of_a_signed_in_user_has_the_strict_policy(user_client, name):
    response = user_client.get(reverse(name))
    assert response.status_code == 200
    _is_strict(_policy(response))


def test_anonymous_pages_errors_and_shared_pages_have_it_too(client, share_token):
    for path in ("/", reverse("account_login"), reverse("account_signup"), "/no-such-page/", f"/s/{share_token}/"):
        _is_strict(_policy(client.get(path)))


def test_the_import_map_carries_the_nonce_of_its_own_response(user_client):
    response = user_client.get(reverse("home"))
    nonce = next(v for v in _policy(response)["script-src"] if v.startswith("'nonce-"))[len("'nonce-") : -1]
    assert f'<script type="importmap" nonce="{nonce}">' in response.content.decode()
    again = user_client.get(reverse("home"))
    assert nonce not in again.headers["Content-Security-Policy"]  # a fresh nonce for every response


def test_no_template_has_an_inline_script_or_style(settings):
    """What the policy would refuse is not in our templates: no <style>, no style="" attribute, no
    on…= handler, and no <script> without src other than the nonced import map and JSON data blocks."""
    import re

    offenders = []
    for path in (settings.BASE_DIR / "templates").rglob("*.html"):
        text = path.read_text()
        for match in re.finditer(r"<script\b[^>]*>", text):
            tag = match.group(0)
            if "src=" not in tag and "nonce=" not in tag and 'type="application/json"' not in tag:
                offenders.append(f"{path.name}: {tag}")
        for pattern in (r"<style\b", r'\sstyle="', r"\son[a-z]+="):
            offenders += [f"{path.name}: {m.group(0).strip()}" for m in re.finditer(pattern, text)]
    assert not offenders, offenders
