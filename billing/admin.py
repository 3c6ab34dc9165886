"""Staff console for billing: plans are edited here; the ledger, events and reports are read-only."""

from django import forms
from django.contrib import admin, messages

from billing import selectors
from billing.models import BillingCustomer, CounterReconciliation, Plan, ProviderEvent, Subscription, UsageRecord
from billing.services import stripe_events
from inference.catalogue import AUTO, available_models, embedding_models


def _known_models() -> list[tuple[str, str]]:
    """Every model the product offers (INFERENCE_MODELS, INFERENCE_EMBEDDING_MODELS), as a choice."""
    # Not Auto: a plan offers it whenever it allows both of Auto's models (billing.selectors).
    chat = [(m.id, f"{m.name} ({m.id})") for m in available_models() if m.kind != AUTO]
    return chat + [(m.id, f"{m.name} ({m.id}, embeddings)") for m in embedding_models()]


class PlanForm(forms.ModelForm):
    """A plan's models are ticked from the models the product offers, not typed; one no longer offered
    stays listed (and kept) until staff untick it, so saving a plan never drops a model silently. The
    admin makes it a form of Plan with the fields its fieldsets name."""

    model_ids = forms.MultipleChoiceField(
        label="Models",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The models this plan may use (ignored with all models).",
    )
    fallback_model = forms.ChoiceField(
        required=False,
        help_text=Plan._meta.get_field("fallback_model").help_text,
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        known = _known_models()
        offered = {model_id for model_id, _ in known}
        gone = [(i, f"{i} (no longer offered)") for i in self.instance.model_ids or [] if i not in offered]
        self.fields["model_ids"].choices = known + gone
        fallback = self.instance.fallback_model
        chat = [(m.id, f"{m.name} ({m.id})") for m in available_models() if m.kind != AUTO]
        if fallback and fallback not in {model_id for model_id, _ in chat}:
            chat.append((fallback, f"{fallback} (no longer offered)"))
        self.fields["fallback_model"].choices = [("", "None: busy means 503"), *chat]


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    form = PlanForm
    list_display = (
        "name",
        "slug",
        "monthly_price_cents",
        "tokens_per_month",
        "requests_per_minute",
        "max_output_tokens",
        "max_context_tokens",
        "context_on_models",
        "priority_class",
        "allows_api_keys",
        "is_default",
        "is_public",
        "sort_order",
    )
    list_editable = ("sort_order", "is_public")
    prepopulated_fields = {"slug": ("name",)}
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "name",
                    "slug",
                    "description",
                    "monthly_price_cents",
                    "currency",
                    "is_public",
                    "is_default",
                    "sort_order",
                )
            },
        ),
        (
            "Limits",
            {
                "fields": (
                    "tokens_per_month",
                    "cached_token_discount_percent",
                    "response_cache",
                    "cached_answer_percent",
                    "requests_per_minute",
                    "answers_at_once",
                    "new_chats_per_day",
                    "max_api_keys",
                    "max_output_tokens",
                    "max_context_tokens",
                    "context_on_models",
                    "max_choices",
                )
            },
        ),
        ("Files", {"fields": ("max_file_bytes", "storage_bytes", "files_per_collection", "pages_per_month")}),
        (
            "Access",
            {
                "fields": (
                    "all_models",
                    "model_ids",
                    "priority_class",
                    "fallback_model",
                    "allows_api_keys",
                    "allows_images",
                )
            },
        ),
    )
    readonly_fields = ("context_on_models",)

    @admin.display(description="Context on its models")
    def context_on_models(self, plan: Plan) -> str:
        """What pages, refusals and the API state (billing.selectors.context_words), beside the plan's
        own figure when the models hold less."""
        if plan.pk is None:
            return "-"
        words = selectors.context_words(plan) or "no models"
        if any(window.tokens < plan.max_context_tokens for window in selectors.context_windows(plan)):
            return f"{words} (the plan allows {plan.max_context_tokens:,})"
        return words

    def save_model(self, request, obj: Plan, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        # Saved all the same (a bigger model may come), but staff see at once that no page will state it.
        warning = selectors.context_promise_warning(obj)
        if warning:
            messages.warning(request, warning)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records written by the billing services; changing them by hand would break the books."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = (
        "user",
        "plan",
        "status",
        "provider",
        "current_period_end",
        "cancel_at_period_end",
        "past_due_since",
        "updated",
    )
    list_filter = ("status", "provider", "plan")
    search_fields = ("user__email", "provider_subscription_id", "provider_customer_id")
    raw_id_fields = ("user",)
    readonly_fields = ("created", "updated")


@admin.register(BillingCustomer)
class BillingCustomerAdmin(ReadOnlyAdmin):
    list_display = ("user", "provider", "provider_customer_id", "created")
    search_fields = ("user__email", "provider_customer_id")


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "created",
        "user",
        "anonymous_id",
        "model",
        "node",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "billable_tokens",
        "plan_slug",
    )
    list_filter = ("model", "plan_slug")
    search_fields = ("user__email", "anonymous_id", "generation_id", "reservation_id")
    date_hierarchy = "created"


@admin.register(ProviderEvent)
class ProviderEventAdmin(ReadOnlyAdmin):
    list_display = (
        "occurred_at",
        "type",
        "event_id",
        "source",
        "subscription_ref",
        "processed_at",
        "attempts",
        "last_error",
    )
    list_filter = ("type", "source", ("processed_at", admin.EmptyFieldListFilter))
    search_fields = ("event_id", "subscription_ref")
    actions = ("process_again",)

    @admin.action(description="Process the selected events again")
    def process_again(self, request, queryset):
        event_ids = list(queryset.filter(processed_at__isnull=True).values_list("event_id", flat=True))
        for event_id in event_ids:
            stripe_events.process_event(event_id)
        left = ProviderEvent.objects.filter(event_id__in=event_ids, processed_at__isnull=True).count()
        level = messages.WARNING if left else messages.SUCCESS
        self.message_user(
            request, f"{len(event_ids) - left} processed, {left} still failing (see their errors).", level
        )

    def has_change_permission(self, request, obj=None):
        # The action needs it; the form itself stays read-only (every field is read-only below).
        return request.user.is_superuser

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.model._meta.fields]


@admin.register(CounterReconciliation)
class CounterReconciliationAdmin(ReadOnlyAdmin):
    list_display = ("ran_at", "checked", "rebuilt", "drifted", "drift_tokens")
