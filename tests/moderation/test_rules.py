"""The `rules` backend: categories staff edit, compiled once per process, and the admin's test box."""

from importlib import import_module

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from moderation import services
from moderation.backends import INPUT, OUTPUT
from moderation.backends.rules import RulesBackend
from moderation.models import Category, Flag


@pytest.fixture
def rules(db, settings):
    settings.MODERATION_BACKENDS = ["rules"]
    Category.objects.all().delete()  # the shipped defaults are tested on their own below
    return RulesBackend()


def screen(backend, text, stage=INPUT):
    backend.prepare(stage)
    return [(h.category, h.block) for h in backend.screen(text, stage)]


def test_words_match_whole_words_ignoring_case_and_spacing(rules, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        Category.objects.create(name="Spam", words="buy followers\nfree money")
    assert screen(rules, "Where can I BUY   followers cheaply?") == [("Spam", True)]
    assert screen(rules, "free\nmoney now") == [("Spam", True)]
    assert screen(rules, "I want to buy followership studies") == []  # not the whole word
    assert screen(rules, "freemoney") == []


def test_patterns_stages_actions_and_disabled_categories(rules, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        Category.objects.create(name="Codes", patterns=r"\bcode \d{6}\b", applies_to="output")
        Category.objects.create(name="Watch", words="lighthouse", action="flag")
        Category.objects.create(name="Off", words="harbour", enabled=False)
    assert screen(rules, "your code 123456", INPUT) == []  # only answers are screened for it
    assert screen(rules, "your code 123456", OUTPUT) == [("Codes", True)]
    assert screen(rules, "the lighthouse, code 654321", OUTPUT) == [("Codes", True), ("Watch", False)]
    assert screen(rules, "the harbour") == []


def test_compiled_once_and_recompiled_when_staff_edit(rules, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        category = Category.objects.create(name="Spam", words="buy followers")
    rules.prepare(OUTPUT)
    with CaptureQueriesContext(connection) as queries:
        for _ in range(50):  # the windows of a long answer
            rules.screen("nothing to see here " * 10, OUTPUT)
        rules.prepare(OUTPUT)  # no change: nothing reloaded
    assert len(queries) == 0

    with django_capture_on_commit_callbacks(execute=True):
        category.words = "cheap watches"
        category.save()
    assert screen(rules, "buy followers") == []
    assert screen(rules, "cheap watches") == [("Spam", True)]
    with django_capture_on_commit_callbacks(execute=True):
        category.delete()
    assert screen(rules, "cheap watches") == []


def test_the_shipped_defaults_refuse_phishing_and_spam_and_flag_self_harm(
    db, settings, django_capture_on_commit_callbacks
):
    settings.MODERATION_BACKENDS = ["rules"]
    # The data migration's categories, as a new installation has them (a flushed database may not).
    with django_capture_on_commit_callbacks(execute=True):
        Category.objects.all().delete()
        for fields in import_module("moderation.migrations.0002_default_categories").DEFAULTS:
            Category.objects.create(**fields)
    assert services.judge("Please send me your password so I can fix it", INPUT).category == "Credential phishing"
    assert services.judge("Click here to claim your prize!", OUTPUT).category == "Spam"
    verdict = services.judge("how to kill myself", INPUT)
    assert verdict.allowed and [h.category for h in verdict.flagged] == ["Self-harm"]
    assert services.judge("Tell me about tides and lighthouses.", INPUT) == services.ALLOW


def test_a_blocked_input_is_refused_with_the_category_and_flagged(rules, user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        Category.objects.create(name="Spam", words="buy followers")
        Category.objects.create(name="Watch", words="lighthouse", action="flag")
    with pytest.raises(services.ContentBlocked) as refused:
        services.check_input(user, "buy followers here")
    assert refused.value.status == 400 and refused.value.code == "content_policy_violation"
    assert "Spam" in refused.value.message
    services.check_input(user, "a lighthouse")  # flagged only: let through
    flags = {f.category: f for f in Flag.objects.all()}
    assert flags["Spam"].blocked and flags["Spam"].source == "input" and flags["Spam"].text == "buy followers here"
    assert not flags["Watch"].blocked and flags["Watch"].state == "open" and flags["Watch"].user == user


def test_an_invalid_pattern_is_refused_in_the_admin(rules, staff_client):
    response = staff_client.post(
        "/admin/moderation/category/add/",
        {
            "name": "Broken",
            "description": "",
            "action": "block",
            "applies_to": "both",
            "enabled": "on",
            "words": "",
            "patterns": "fine\n(unclosed",
        },
    )
    assert response.status_code == 200
    assert "Line 2 is not a valid regular expression" in response.content.decode()
    assert not Category.objects.filter(name="Broken").exists()


def test_the_admin_test_box_shows_what_matches_and_saves_nothing(
    rules, staff_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        Category.objects.create(name="Spam", words="buy followers")
        Category.objects.create(name="Answers only", words="followers", applies_to="output")
    listing = staff_client.get("/admin/moderation/category/")
    assert "/admin/moderation/category/test/" in listing.content.decode()
    page = staff_client.post("/admin/moderation/category/test/", {"text": "Buy followers today", "stage": "input"})
    body = page.content.decode()
    assert page.status_code == 200
    assert "Blocked (Spam, by rules)" in body and "<mark>Buy followers</mark>" in body
    assert "no (not for this stage)" in body
    assert not Flag.objects.exists()
    clean = staff_client.post("/admin/moderation/category/test/", {"text": "Tides", "stage": "output"})
    assert "Let through" in clean.content.decode()


def test_the_test_box_is_for_staff_only(client, user, rules):
    client.force_login(user)
    assert client.get("/admin/moderation/category/test/").status_code == 302
