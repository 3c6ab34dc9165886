import hashlib
import html
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from accounts.api_keys import authenticate_api_key, create_api_key, revoke_api_key
from accounts.models import ApiKey
from config.refusals import NotAllowed, RateLimited, Unauthenticated
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

    user_client.post(reverse("account_api_key_revoke", args=[key.pk]))

    with pytest.raises(Unauthenticated, match="revoked"):
        authenticate_api_key(raw)


# --- Revoking asks first (issue 25, item 6): a page of its own, so it needs no script and no dialog ------


def _text(response) -> str:
    """The page's words as a person reads them: tags dropped, entities read, white space folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", response.content.decode())).split())


def test_the_keys_page_revoke_leads_to_a_page_that_asks_first(user_client, user):
    put_on_plan(user, "pro")
    key, _ = create_api_key(user, "nightly export")

    page = user_client.get(reverse("account_api_keys")).content.decode()

    confirm_url = reverse("account_api_key_revoke", args=[key.pk])
    # A link (a GET): following it changes nothing.
    assert re.search(rf'<a [^>]*href="{confirm_url}"[^>]*aria-label="Revoke nightly export"[^>]*>Revoke</a>', page)
    assert 'name="revoke"' not in page  # no button on the list revokes at once
    asked = user_client.get(confirm_url)
    assert asked.status_code == 200
    key.refresh_from_db()
    assert key.revoked_at is None
    text = _text(asked)
    assert (
        f"Revoke the key “nightly export” ({key.prefix}…)? Programs using it stop working at once. "
        "This cannot be undone." in text
    )
    body = asked.content.decode()
    [form] = [f for f in re.findall(r"<form ([^>]*)>(.*?)</form>", body, re.S) if "Revoke key" in f[1]]
    assert 'method="post"' in form[0] and "action=" not in form[0]  # posted back to this page
    assert "csrfmiddlewaretoken" in form[1]
    assert re.search(r'<button type="submit"[^>]*>Revoke key</button>', form[1])
    assert re.search(rf'<a [^>]*href="{reverse("account_api_keys")}"[^>]*>Cancel</a>', body)
    # Under the CSP (script-src 'self' + nonce): no inline script, no inline handler; none needed.
    assert "<script" not in re.sub(r'<script[^>]*src="[^"]*"[^>]*></script>', "", body)
    assert not re.search(r"\son[a-z]+=", body)


def test_confirming_revokes_the_key_and_the_keys_page_names_it(user_client, user):
    put_on_plan(user, "pro")
    key, raw = create_api_key(user, "nightly export")

    response = user_client.post(reverse("account_api_key_revoke", args=[key.pk]))

    assert response.status_code == 303 and response.url == reverse("account_api_keys")
    with pytest.raises(Unauthenticated, match="revoked"):
        authenticate_api_key(raw)
    shown = _text(user_client.get(response.url))
    assert f"Revoked the key “nightly export” ({key.prefix}…). Programs using it no longer work." in shown


def test_a_revoke_posted_from_an_old_keys_page_is_asked_about_first(user_client, user):
    # A keys page loaded before the confirmation existed still posts `revoke` to the list: it is sent
    # to the question, not obeyed.
    put_on_plan(user, "pro")
    key, raw = create_api_key(user, "laptop")

    response = user_client.post(reverse("account_api_keys"), {"revoke": str(key.pk)})

    assert response.status_code == 303
    assert response.url == reverse("account_api_key_revoke", args=[key.pk])
    assert authenticate_api_key(raw) == key


def test_an_already_revoked_key_is_not_offered_again(user_client, user):
    put_on_plan(user, "pro")
    key, _ = create_api_key(user, "old laptop")
    revoke_api_key(user, key.pk)

    asked = user_client.get(reverse("account_api_key_revoke", args=[key.pk]))

    assert asked.status_code == 200
    assert f"The key “old laptop” ({key.prefix}…) is already revoked" in _text(asked)
    assert "Revoke key</button>" not in asked.content.decode()


def test_someone_elses_key_or_no_key_is_404_and_stays(client, user, other_user):
    put_on_plan(user, "pro")
    key, raw = create_api_key(user, "laptop")
    client.force_login(other_user)

    for key_id in (key.pk, 999_999, int("9" * 30)):
        url = reverse("account_api_key_revoke", args=[key_id])
        assert client.get(url).status_code == 404
        assert client.post(url).status_code == 404
    assert authenticate_api_key(raw) == key


def test_revoking_needs_the_forms_csrf_token(user):
    from django.test import Client

    put_on_plan(user, "pro")
    key, raw = create_api_key(user, "laptop")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)

    assert strict.post(reverse("account_api_key_revoke", args=[key.pk])).status_code == 403
    assert authenticate_api_key(raw) == key


def test_a_plan_without_api_keys_refuses_to_make_one(user_client, user):
    response = user_client.post(reverse("account_api_keys"), {"name": "nope"})
    assert response.status_code == 403
    assert "does not include API keys" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_one_active_key_more_than_the_plan_allows_is_refused_until_one_is_revoked(user_client, user):
    put_on_plan(user, "plus", max_api_keys=2)
    first, _ = create_api_key(user, "laptop")
    create_api_key(user, "ci")
    url = reverse("account_api_keys")

    refused = user_client.post(url, {"name": "one too many"})

    assert refused.status_code == 403
    body = html.unescape(refused.content.decode())
    assert (
        "You have 2 active API keys, the most the Plus plan allows. Revoke one you no longer use, "
        "or upgrade to Pro for 50."
    ) in body
    assert 'value="one too many"' in body  # what was typed stays
    assert ApiKey.objects.filter(user=user).count() == 2

    assert "The Plus plan allows 2 active keys at once" in body  # said before anyone meets it

    revoke_api_key(user, first.pk)
    assert user_client.post(url, {"name": "replacement"}).status_code == 303
    assert ApiKey.objects.filter(user=user, revoked_at__isnull=True).count() == 2


def test_expired_keys_do_not_count_as_active(user):
    put_on_plan(user, "pro", max_api_keys=1)
    key, _ = create_api_key(user, "short-lived", expires_at=timezone.now() + timedelta(days=1))
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    create_api_key(user, "next")  # the expired one no longer counts
    with pytest.raises(NotAllowed, match="You have 1 active API key, the most the Pro plan allows"):
        create_api_key(user, "and another")


def test_making_and_revoking_keys_over_and_over_is_capped_at_twice_the_plans_keys_a_day(user):
    # Enough to replace every key once in a day (after a leak), not to write rows without end.
    put_on_plan(user, "plus", max_api_keys=2)
    for n in range(4):
        key, _ = create_api_key(user, f"key {n}")
        revoke_api_key(user, key.pk)

    with pytest.raises(RateLimited) as refused:
        create_api_key(user, "fifth today")

    assert (refused.value.status, refused.value.code) == (429, "api_key_limit")
    assert 24 * 3600 - 60 <= refused.value.retry_after <= 24 * 3600
    assert refused.value.message == (
        "You made 4 API keys in the last 24 hours, twice the 2 active keys the Plus plan allows (enough to "
        "replace each once). You can make another in 24 hours."
    )
    assert ApiKey.objects.filter(user=user).count() == 4
    # Keys made more than a day ago have left the window.
    ApiKey.objects.filter(user=user).update(created=timezone.now() - timedelta(days=1, seconds=1))
    create_api_key(user, "tomorrow")


def test_operators_can_print_a_key_from_the_command_line(user, capsys):
    put_on_plan(user, "pro")
    call_command("create_api_key", user.email, "--name", "script")
    raw = capsys.readouterr().out.strip()
    assert authenticate_api_key(raw).name == "script"
    with pytest.raises(CommandError, match="No user"):
        call_command("create_api_key", "nobody@example.com")
