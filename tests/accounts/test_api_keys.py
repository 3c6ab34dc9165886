import hashlib

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from accounts.api_keys import authenticate_api_key
from accounts.models import ApiKey
from config.refusals import Unauthenticated
from tests.support.plans import put_on_plan


def test_a_new_key_is_shown_once_and_stored_only_as_a_hash(user_client, user):
    put_on_plan(user, "pro")
    response = user_client.post(reverse("account_api_keys"), {"name": "laptop"})
    raw = response.context["new_key"]

    assert response.status_code == 200 and raw.startswith("sk-sgl-")
    key = ApiKey.objects.get(user=user)
    assert key.hashed_key == hashlib.sha256(raw.encode()).hexdigest() and raw not in key.hashed_key
    assert raw.startswith(key.prefix)
    assert authenticate_api_key(raw) == key
    page = user_client.get(reverse("account_api_keys")).content.decode()
    assert key.prefix in page and raw not in page


def test_a_revoked_key_stops_working(user_client, user):
    put_on_plan(user, "pro")
    raw = user_client.post(reverse("account_api_keys"), {"name": "ci"}).context["new_key"]
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
