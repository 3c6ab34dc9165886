"""The plan admin: staff see what each plan's context window really is on its models, and are warned
when they save a plan that promises more than its models hold (saved all the same: a later, bigger
model may hold it)."""

import html

import pytest
from django.urls import reverse

from billing.models import Plan
from billing.seed import seed_plans
from tests.console.test_audit import plan_form


@pytest.fixture
def plans(db):
    seed_plans(Plan)


def warnings(response) -> list[str]:
    return [str(m) for m in response.context["messages"] if m.level_tag == "warning"]


def test_saving_a_plan_that_promises_more_context_than_its_models_hold_warns_but_saves(admin_client, plans, settings):
    settings.INFERENCE_CONTEXT_TOKENS = 8192
    plus = Plan.objects.get(slug="plus")

    response = admin_client.post(
        reverse("admin:billing_plan_change", args=[plus.pk]), plan_form(plus, max_context_tokens=16384), follow=True
    )

    assert response.status_code == 200
    plus.refresh_from_db()
    assert plus.max_context_tokens == 16384  # saved: a warning, not a refusal
    [warning] = warnings(response)
    assert warning == (
        "The Plus plan allows 16,384 tokens of context, but its models hold at most 8,192 "
        "(Simulated Small: 8,192; Simulated Large: 8,192). Pages, refusals and the API state 8,192 tokens: "
        "lower the plan's figure, or offer a model with a bigger window."
    )
    assert html.escape(warning) in response.content.decode()  # shown on the page staff land on


def test_a_plan_within_its_models_windows_saves_without_a_warning(admin_client, plans, settings):
    settings.INFERENCE_CONTEXT_TOKENS = 8192
    plus = Plan.objects.get(slug="plus")

    response = admin_client.post(
        reverse("admin:billing_plan_change", args=[plus.pk]), plan_form(plus, max_context_tokens=8192), follow=True
    )

    assert response.status_code == 200 and warnings(response) == []


def test_the_plan_form_shows_the_context_its_models_give(admin_client, plans, settings):
    settings.INFERENCE_CONTEXT_TOKENS = 8192
    pro = Plan.objects.get(slug="pro")

    page = admin_client.get(reverse("admin:billing_plan_change", args=[pro.pk])).content.decode()
    listing = admin_client.get(reverse("admin:billing_plan_changelist")).content.decode()

    assert "Context on its models" in page and "8,192 tokens (the plan allows 32,768)" in page
    assert "8,192 tokens (the plan allows 32,768)" in listing


def test_staff_edit_new_chats_a_day_and_api_keys_in_the_plan_form(admin_client, plans):
    plus = Plan.objects.get(slug="plus")
    url = reverse("admin:billing_plan_change", args=[plus.pk])
    page = admin_client.get(url).content.decode()
    assert "New chats a day" in page and "Active API keys at most" in page

    response = admin_client.post(url, plan_form(plus, new_chats_per_day=250, max_api_keys=3))

    assert response.status_code == 302
    plus.refresh_from_db()
    assert (plus.new_chats_per_day, plus.max_api_keys) == (250, 3)


def test_staff_can_set_every_limit_and_permission_of_a_plan_in_the_admin(admin_client, plans):
    """Every rule a plan decides (files, pictures, choices: added after the admin's form was written) is
    on its page: a plan limit staff cannot change from the console is a limit they cannot manage."""
    plus = Plan.objects.get(slug="plus")
    page = admin_client.get(reverse("admin:billing_plan_change", args=[plus.pk])).content.decode()
    editable = [f.name for f in Plan._meta.get_fields() if getattr(f, "editable", False) and not f.auto_created]
    missing = [name for name in editable if f'name="{name}"' not in page]
    assert missing == []

    changes = {
        "max_choices": 3,
        "max_file_bytes": 5 * 1024 * 1024,
        "files_per_collection": 7,
        "storage_bytes": 50 * 1024 * 1024,
        "pages_per_month": 900,
    }
    form = plan_form(plus, **changes)
    form["allows_images"] = ""  # unchecked
    response = admin_client.post(reverse("admin:billing_plan_change", args=[plus.pk]), form, follow=True)
    assert response.status_code == 200
    plus.refresh_from_db()
    assert {name: getattr(plus, name) for name in changes} == changes
    assert plus.allows_images is False


def test_a_plans_models_are_ticked_from_the_models_offered_and_one_no_longer_offered_is_kept(admin_client, plans):
    """They were typed as JSON, where a misspelt id saved silently and the plan lost that model (issue 24)."""
    plus = Plan.objects.get(slug="plus")
    Plan.objects.filter(pk=plus.pk).update(model_ids=["sim-small", "retired-7b"])
    url = reverse("admin:billing_plan_change", args=[plus.pk])

    page = admin_client.get(url).content.decode()
    for model_id in ("sim-small", "sim-large", "retired-7b"):
        assert f'type="checkbox" name="model_ids" value="{model_id}"' in page
    assert "Simulated Large (sim-large)" in page and "retired-7b (no longer offered)" in page

    plus.refresh_from_db()
    form = plan_form(plus, model_ids=["sim-large", "retired-7b"], fallback_model="sim-small")
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    plus.refresh_from_db()
    assert (plus.model_ids, plus.fallback_model) == (["sim-large", "retired-7b"], "sim-small")

    refused = admin_client.post(url, plan_form(plus, model_ids=["gpt-9"], fallback_model="gpt-9"))
    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert "Select a valid choice. gpt-9 is not one of the available choices." in errors["model_ids"][0]
    assert "fallback_model" in errors
