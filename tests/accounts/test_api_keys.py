import hashlib
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from accounts.api_keys import authenticate_api_key, create_api_key
from accounts.models import ApiKey
from config.refusals import Unauthenticated
from tests.support.plans import put_on_plan


def test_a_new_key_is_shown_once_and_stored_only_as_a_hash(user_client, user):
    put_on_plan(user, "pro")
    response = user_client.post(reverse("account_api_keys"), {"name": "laptop"})
    # Post/redirect/get: reloading the page that shows the key cannot send the form again.
    assert response.status_code == 303 and response.url == reverse("account_api_keys")
    shown = user_client.get(response.url)
    raw = shown.context["new_key"]

    assert raw.startswith("sk-sgl-") and raw in shown.content.decode()
    key = ApiKey.objects.get(user=user)
    assert key.hashed_key == hashlib.sha256(raw.encode()).hexdigest() and raw not in key.hashed_key
    assert raw.startswith(key.prefix)
    assert authenticate_api_key(raw) == key
    page = user_client.get(reverse("account_api_keys")).content.decode()
    assert key.prefix in page and raw not in page
    assert ApiKey.objects.filter(user=user).count() == 1


def test_the_new_key_is_kept_in_the_session_only_until_it_is_shown(user_client, user):
    put_on_plan(user, "pro")
    user_client.post(reverse("account_api_keys"), {"name": "laptop"})
    raw = user_client.get(reverse("account_api_keys")).context["new_key"]
    assert raw not in str(dict(user_client.session))


def test_last_used_reads_just_now_then_minutes_ago(user_client, user):
    put_on_plan(user, "pro")
    key, raw = create_api_key(user, "script")
    authenticate_api_key(raw)
    assert "just now" in _last_used_cell(user_client)
    ApiKey.objects.filter(pk=key.pk).update(last_used=timezone.now() - timedelta(minutes=5, seconds=10))
    assert "5 minutes ago" in _last_used_cell(user_client)


def _last_used_cell(client) -> str:
    page = client.get(reverse("account_api_keys")).content.decode()
    return re.search(r'data-label="Last used">(.*?)</td>', page, re.S).group(1).replace("\xa0", " ")


def test_a_refused_key_keeps_what_was_typed(user_client, user):
    put_on_plan(user, "pro")
    response = user_client.post(reverse("account_api_keys"), {"name": "nightly job", "expires_in_days": "0"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "between 1 and 3650 days" in body and 'value="nightly job"' in body
    assert not ApiKey.objects.exists()


def test_a_revoked_key_stops_working(user_client, user):
    put_on_plan(user, "pro")
    user_client.post(reverse("account_api_keys"), {"name": "ci"})
    raw = user_client.get(reverse("account_api_keys")).context["new_key"]
    key = ApiKey.objects.get(user=user)

    user_client.post(reverse("account_api_keys"), {"revoke": key.pk})

    with pytest.raises(Unauthenticated, match="revoked"):
        authenticate_api_key(raw)


def test_a_plan_without_api_keys_refuses_to_make_one(user_client, user):
    response = user_client.post(reverse("account_api_keys"), {"name": "nope"})
    assert response.status_code == 403
    assert "does not include API keys" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_operators_can_print_a_key_from_the_command_line(user, capsys):
    put_on_plan(user, "pro")
    call_command("create_api_key", user.email, "--name", "script")
    raw = capsys.readouterr().out.strip()
    assert authenticate_api_key(raw).name == "script"
    with pytest.raises(CommandError, match="No user"):
        call_command("create_api_key", "nobody@example.com")
