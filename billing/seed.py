"""The three plans every installation starts with (Free, Plus, Pro); staff change them in the admin.

Used by the data migration that seeds them, and by `ensure_default_plan` when the table has lost its
default plan (an emptied database): every user must always have a plan, so the Free figures here are
the last word when nothing else is stored.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

MB = 1024 * 1024

# Figures: Free is a real taste of the product on the small model; Plus is for daily use; Pro is for
# heavy and programmatic use. Tokens are prompt + completion (cached prompt tokens at a discount).
# Files: Free holds a few papers; Plus a working library; Pro a team's worth of documents.
# The descriptions are stored as written (English) and are in the catalogue (gettext_noop), so a page can
# show a seeded one in the reader's language ({% translate plan.description %}); one staff rewrote shows as
# they wrote it.
SEED_PLANS: list[dict] = [
    {
        "slug": "free",
        "name": "Free",
        "description": gettext_noop("Try it out on the small model."),
        "monthly_price_cents": 0,
        "all_models": False,
        "model_ids": ["sim-small"],
        "requests_per_minute": 10,
        "answers_at_once": 2,
        "new_chats_per_day": 100,
        "max_api_keys": 2,
        "tokens_per_month": 200_000,
        "max_file_bytes": 10 * MB,
        "files_per_collection": 20,
        "storage_bytes": 100 * MB,
        "pages_per_month": 300,
        "max_output_tokens": 1024,
        "max_context_tokens": 4096,
        "priority_class": "free",
        "allows_api_keys": False,
        # No images on Free: moderation reads text only, so an image is unscreened, and Free accounts are the
        # cheapest to make for abuse; a paying subscriber is known to the payment provider.
        "allows_images": False,
        "is_default": True,
        "sort_order": 0,
    },
    {
        "slug": "plus",
        "name": "Plus",
        "description": gettext_noop("Every model, for everyday work."),
        "monthly_price_cents": 2000,
        "all_models": True,
        "model_ids": ["sim-small", "sim-large"],
        "requests_per_minute": 60,
        "answers_at_once": 4,
        "new_chats_per_day": 500,
        "max_api_keys": 10,
        "tokens_per_month": 5_000_000,
        "max_file_bytes": 25 * MB,
        "files_per_collection": 200,
        "storage_bytes": 2_048 * MB,
        "pages_per_month": 5_000,
        "max_output_tokens": 4096,
        "max_context_tokens": 16384,
        "priority_class": "premium",
        "allows_api_keys": True,
        "allows_images": True,
        "is_default": False,
        "sort_order": 1,
    },
    {
        "slug": "pro",
        "name": "Pro",
        "description": gettext_noop("Heavy use and the API, first in line when busy."),
        "monthly_price_cents": 5000,
        "all_models": True,
        "model_ids": ["sim-small", "sim-large"],
        "requests_per_minute": 240,
        "answers_at_once": 8,
        "new_chats_per_day": 2_000,
        "max_api_keys": 50,
        "tokens_per_month": 25_000_000,
        "max_file_bytes": 50 * MB,
        "files_per_collection": 1_000,
        "storage_bytes": 20_480 * MB,
        "pages_per_month": 50_000,
        "max_output_tokens": 8192,
        "max_context_tokens": 32768,
        "priority_class": "premium",
        "allows_api_keys": True,
        "allows_images": True,
        "is_default": False,
        "sort_order": 2,
    },
]


def seed_plans(plan_model) -> None:
    """Create the seed plans that do not exist yet (by slug); never overwrite a staff edit.

    Takes the model class so the data migration can pass its historical model; figures for fields that
    model does not have yet are left out (a later migration sets them).
    """
    has_default = plan_model.objects.filter(is_default=True).exists()
    fields = {field.name for field in plan_model._meta.get_fields()}
    for figures in SEED_PLANS:
        values = {name: value for name, value in figures.items() if name in fields}
        if has_default:
            values["is_default"] = False
        plan_model.objects.get_or_create(slug=values.pop("slug"), defaults=values)
