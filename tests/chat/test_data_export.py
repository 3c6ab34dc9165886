"""Export all my data: one .zip with every conversation (all branches), usage and API key names, and
nothing of anyone else."""

import csv
import io
import json
import zipfile

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiKey
from billing.models import UsageRecord
from chat.data_export.services import build_archive
from chat.models import Message
from chat.selectors import branch
from chat.sharing import services as sharing
from tests.chat.factories import conversation_for, exchange, say

pytestmark = pytest.mark.django_db

SITE = "https://chat.example.com/"


def usage(user, n, *, conversation=None, key=None, model="sim-small", tokens=100):
    return UsageRecord.objects.create(
        user=user,
        reservation_id=f"r-{user.pk}-{n}",
        generation_id=f"g-{user.pk}-{n}",
        conversation_id=conversation.pk if conversation else None,
        api_key_id=key.pk if key else None,
        plan_slug="plus",
        model=model,
        prompt_tokens=tokens,
        cached_tokens=tokens // 2,
        completion_tokens=tokens * 2,
        billable_tokens=tokens * 2 + tokens // 2,
    )


def api_key(user, name, prefix):
    return ApiKey.objects.create(user=user, name=name, prefix=prefix, hashed_key=f"{user.pk:064d}"[-64:])


def unzip(data: bytes) -> dict[str, str]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        return {name.split("/", 1)[1]: archive.read(name).decode() for name in archive.namelist()}


@pytest.fixture
def history(user, other_user):
    """A user with branches (an edit and a regeneration), an archived chat, usage and keys; and a
    stranger with their own of each."""
    rust = conversation_for(user, title="Rust lifetimes")
    q1, a1 = exchange(rust, "What is a lifetime?", "How long a borrow lives.")
    a1b = say(rust, "assistant", "A second take: the span a reference is valid.", parent=q1)
    q2, a2 = exchange(rust, "And 'static?", "For the whole program.", parent=a1b)
    edited = say(rust, "user", "What is a lifetime, briefly?")  # an edit of the first question
    a_edited = say(rust, "assistant", "A borrow's span.", parent=edited)
    blocked = say(rust, "assistant", "WITHHELD TEXT", parent=edited, status=Message.Status.BLOCKED)
    archived = conversation_for(user, title="Old trip plans", archived=True)
    exchange(archived, "Lisbon in May?", "Warm and sunny.")

    key = api_key(user, "laptop script", "sk-sgl-abc123")
    usage(user, 1, conversation=rust)
    usage(user, 2, key=key, model="sim-large", tokens=40)
    sharing.share_conversation(user, rust.pk, mode="live", show_passages=True)

    theirs = conversation_for(other_user, title="Grace's secret plans")
    exchange(theirs, "Stranger's question", "Stranger's answer")
    api_key(other_user, "grace's key", "sk-sgl-zzz999")
    usage(other_user, 1, conversation=theirs, model="their-model")
    return {
        "rust": rust,
        "archived": archived,
        "messages": [q1, a1, a1b, q2, a2, edited, a_edited, blocked],
        "blocked": blocked,
        "key": key,
    }


def test_the_archive_holds_every_conversation_with_all_its_branches(user, history):
    files = unzip(build_archive(user, site_url=SITE).file.read())
    rust = history["rust"]

    stem = f"conversations/{rust.pk}-rust-lifetimes"
    assert {f"{stem}.json", f"{stem}.md"} <= set(files)
    data = json.loads(files[f"{stem}.json"])
    assert data["conversation"]["title"] == "Rust lifetimes"
    assert {m["id"] for m in data["messages"]} == {m.pk for m in history["messages"]}
    parents = {m["id"]: m["parent_id"] for m in data["messages"]}
    assert all(parents[m.pk] == m.parent_id for m in history["messages"])
    assert data["active_branch"] == [m.pk for m in branch(rust)]

    markdown = files[f"{stem}.md"]
    for text in (
        "What is a lifetime?",
        "How long a borrow lives.",
        "A second take: the span a reference is valid.",
        "And 'static?",
        "For the whole program.",
        "What is a lifetime, briefly?",
        "A borrow's span.",
    ):
        assert markdown.count(f"\n\n{text}\n") == 1, text  # every branch, each message written once
    assert "# Other branches" in markdown

    # Archived conversations are there too.
    archived = history["archived"]
    assert "Lisbon in May?" in files[f"conversations/{archived.pk}-old-trip-plans.md"]


def test_blocked_answers_are_not_in_the_archive(user, history):
    files = unzip(build_archive(user, site_url=SITE).file.read())
    assert not any("WITHHELD TEXT" in text for text in files.values())
    data = json.loads(files[f"conversations/{history['rust'].pk}-rust-lifetimes.json"])
    blocked = next(m for m in data["messages"] if m["id"] == history["blocked"].pk)
    assert blocked["status"] == "blocked" and blocked["content"] == ""


def test_the_archive_holds_usage_key_names_and_shared_links_but_no_secret(user, history):
    files = unzip(build_archive(user, site_url=SITE).file.read())

    rows = list(csv.DictReader(io.StringIO(files["usage.csv"])))
    assert [(r["model"], r["billable_tokens"], r["api_key"]) for r in rows] == [
        ("sim-small", "250", ""),
        ("sim-large", "100", "sk-sgl-abc123…"),
    ]
    assert rows[0]["conversation_id"] == str(history["rust"].pk)

    keys = json.loads(files["api_keys.json"])
    assert keys == [
        {
            "name": "laptop script",
            "prefix": "sk-sgl-abc123…",
            "created": keys[0]["created"],
            "last_used": None,
            "expires": None,
            "revoked": None,
        }
    ]
    assert not any(history["key"].hashed_key in text for text in files.values())

    links = json.loads(files["shared_links.json"])
    assert len(links) == 1 and links[0]["mode"] == "live"
    assert links[0]["shows_your_name"] is False and links[0]["shows_quoted_passages"] is True
    assert links[0]["url"].startswith("https://chat.example.com/s/")

    account = json.loads(files["account.json"])
    assert account["email"] == user.email
    assert "README.txt" in files


def test_nothing_of_another_user_is_in_the_archive(user, history, other_user):
    files = unzip(build_archive(user, site_url=SITE).file.read())
    everything = "\n".join(files.values())
    for theirs in (
        "Grace's secret plans",
        "Stranger's",
        "grace's key",
        "sk-sgl-zzz999",
        "their-model",
        other_user.email,
    ):
        assert theirs not in everything, theirs


def test_a_user_with_nothing_gets_a_valid_archive(other_user):
    files = unzip(build_archive(other_user, site_url=SITE).file.read())
    assert not any(name.startswith("conversations/") for name in files)
    assert files["usage.csv"].splitlines() == [
        "created,model,plan,conversation_id,api_key,prompt_tokens,cached_tokens,completion_tokens,billable_tokens"
    ]


# --- the page and the download ------------------------------------------------------------------------------------


def test_the_download_needs_a_signed_in_user(client):
    response = client.post(reverse("account_data"))
    assert response.status_code == 302 and reverse("account_login") in response.url


def test_the_page_offers_the_download_and_the_account_area_links_to_it(user_client):
    page = user_client.get(reverse("account_data")).content.decode()
    assert "Download my data" in page and "3 times an hour" in page
    assert reverse("account_data") in user_client.get(reverse("account_api_keys")).content.decode()


def test_the_download_is_a_zip_attachment(user_client, history):
    response = user_client.post(reverse("account_data"))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith('attachment; filename="sglchat-data-')
    body = b"".join(response.streaming_content)
    assert int(response["Content-Length"]) == len(body)
    files = unzip(body)
    assert f"conversations/{history['rust'].pk}-rust-lifetimes.json" in files
    # The shared links are made absolute from the request's own address.
    assert json.loads(files["shared_links.json"])[0]["url"].startswith("http://testserver/s/")


def test_downloads_are_limited_per_user_and_the_refusal_says_when_to_come_back(user_client, other_user, settings):
    settings.DATA_EXPORT_RATE_LIMIT = "2/hour"
    assert [user_client.post(reverse("account_data")).status_code for _ in range(2)] == [200, 200]

    refused = user_client.post(reverse("account_data"))

    assert refused.status_code == 429
    assert 3500 <= int(refused["Retry-After"]) <= 3600
    text = refused.content.decode()
    assert "You can download your data 2 times an hour" in text and "minutes" in text
    # Someone else's allowance is their own.
    stranger = Client()
    stranger.force_login(other_user)
    assert stranger.post(reverse("account_data")).status_code == 200
    # Looking at the page costs nothing.
    assert user_client.get(reverse("account_data")).status_code == 200
