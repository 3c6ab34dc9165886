"""Plans, subscriptions, payment-provider customers and events, and the usage ledger.

The rules that read these (which plan a user has, what a request may use) live in selectors.py and
the services package; this module only says what is stored and which invariants the database keeps.
"""

from datetime import timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Plan(models.Model):
    """A tier: what a subscriber may use, and for how much."""

    class Priority(models.TextChoices):
        FREE = "free", "Free (shed first when busy)"
        PREMIUM = "premium", "Premium (admitted until the hard limit)"

    slug = models.SlugField(unique=True, help_text="Stable identifier; STRIPE_PRICE_<SLUG> names its Stripe price.")
    name = models.CharField(max_length=60)
    description = models.CharField(max_length=200, blank=True)
    monthly_price_cents = models.PositiveIntegerField(
        default=0, help_text="Shown on the Plans page; Stripe charges what its price says, so keep the two in step."
    )
    currency = models.CharField(max_length=3, default="usd")
    all_models = models.BooleanField(default=False, help_text="Every model the product offers, now and later.")
    model_ids = models.JSONField(
        default=list, blank=True, help_text='Model ids this plan may use, e.g. ["sim-small"] (ignored with all models).'
    )
    requests_per_minute = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    tokens_per_month = models.PositiveBigIntegerField(
        validators=[MinValueValidator(1)],
        help_text="Prompt + completion tokens per billing period; cached prompt tokens count at the plan's "
        "cached-token discount.",
    )
    cached_token_discount_percent = models.PositiveSmallIntegerField(
        "cached-token discount (%)",
        null=True,
        blank=True,
        validators=[MaxValueValidator(100)],
        help_text="How much less a prompt token served from the engine's prefix cache counts against the quota "
        "(it costs the GPU little). Empty: BILLING_CACHED_TOKEN_DISCOUNT_PERCENT.",
    )
    response_cache = models.BooleanField(
        "answer repeats from the response cache",
        default=True,
        help_text="A repeated request whose answer its input decides (temperature 0 or a fixed seed) is answered "
        "from the first answer, with no engine time (chat/generation/response_cache.py).",
    )
    cached_answer_percent = models.PositiveSmallIntegerField(
        "cached answers count (%)",
        default=0,
        validators=[MaxValueValidator(100)],
        help_text="The share of its tokens an answer served from the response cache counts against the quota "
        "(0: free).",
    )
    answers_at_once = models.PositiveSmallIntegerField(
        default=4,
        validators=[MinValueValidator(1)],
        help_text="Answers one person may have being written at once, web and API together; one more is "
        "refused (429, try again in a few seconds) until one ends.",
    )
    new_chats_per_day = models.PositiveIntegerField(
        "new chats a day",
        default=100,
        validators=[MinValueValidator(1)],
        help_text="Chats one person may start in any 24 hours (the page, the WebSocket and scripts together); "
        "one more is refused (429) until the oldest leaves the window. Chats already started are never limited. "
        "New shared links a day are capped at the same number.",
    )
    max_api_keys = models.PositiveSmallIntegerField(
        "active API keys at most",
        default=10,
        validators=[MinValueValidator(1)],
        help_text="API keys one person may hold at once (revoked and expired ones do not count); one more is "
        "refused (403) until one is revoked. Twice this many may be made in any 24 hours.",
    )
    max_choices = models.PositiveSmallIntegerField(
        "choices per API request at most",
        default=4,
        validators=[MinValueValidator(1)],
        help_text="The most answers one API request may ask for (OpenAI's n); each is billed for its tokens "
        "and reserved against the quota as a whole answer.",
    )
    # People's files (documents): each figure is checked when a file is uploaded (pages once it is read),
    # and a refusal (413) names it and the plan that allows more.
    max_file_bytes = models.PositiveBigIntegerField(
        "largest file (bytes)",
        default=10 * 1024 * 1024,
        validators=[MinValueValidator(1)],
        help_text="The largest file one person may upload, to a chat or a collection.",
    )
    files_per_collection = models.PositiveIntegerField(
        default=20,
        validators=[MinValueValidator(1)],
        help_text="Files one collection (knowledge base) may hold.",
    )
    storage_bytes = models.PositiveBigIntegerField(
        "file storage (bytes)",
        default=100 * 1024 * 1024,
        validators=[MinValueValidator(1)],
        help_text="The total size of one person's files, in chats and collections; deleting a file frees its room.",
    )
    pages_per_month = models.PositiveIntegerField(
        "pages read a month",
        default=300,
        validators=[MinValueValidator(1)],
        help_text="Pages of files read and indexed per billing period (a PDF's pages; other files count "
        "DOCUMENTS_CHARS_PER_PAGE characters as a page). Deleting a file gives none back.",
    )
    max_output_tokens = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    max_context_tokens = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    priority_class = models.CharField(max_length=10, choices=Priority.choices, default=Priority.FREE)
    fallback_model = models.CharField(
        max_length=100,
        blank=True,
        help_text="A model id that answers this plan's free-tier requests when the "
        "model asked for is busy and this one is not (instead of a 503). Empty: no fallback.",
    )
    allows_api_keys = models.BooleanField(default=False)
    allows_images = models.BooleanField(
        default=False,
        help_text="Images may be sent to vision models (image_url parts). Images are not screened by the text "
        "moderation backends, and each costs up to 16,386 prompt tokens.",
    )
    is_default = models.BooleanField(default=False, help_text="The plan of everyone without a paid subscription.")
    is_public = models.BooleanField(default=True, help_text="Listed on the Plans page.")
    sort_order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["sort_order", "monthly_price_cents", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="billing_one_default_plan"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_free(self) -> bool:
        return self.monthly_price_cents == 0

    @property
    def monthly_price(self) -> str:
        return f"{self.monthly_price_cents // 100}.{self.monthly_price_cents % 100:02d}"


class SubscriptionQuerySet(models.QuerySet):
    def granting(self, now=None) -> "SubscriptionQuerySet":
        """Subscriptions that give their plan at `now`: the one place this rule is decided.

        Active and trialing ones do; a past-due one does until its grace period has run out (then the
        beat task ends it); incomplete and canceled ones do not, nor one set to cancel whose period is over,
        nor a development one whose period is over once another provider takes payment (it is not renewed).
        """
        now = now or timezone.now()
        grace_start = now - timedelta(days=settings.BILLING_PAST_DUE_GRACE_DAYS)
        granting = self.filter(
            Q(status__in=[Subscription.Status.ACTIVE, Subscription.Status.TRIALING])
            | Q(status=Subscription.Status.PAST_DUE, past_due_since__gt=grace_start)
        ).exclude(cancel_at_period_end=True, current_period_end__lte=now)
        if settings.PAYMENT_PROVIDER != Subscription.Provider.DEV:
            granting = granting.exclude(provider=Subscription.Provider.DEV, current_period_end__lte=now)
        return granting


class Subscription(models.Model):
    """A user's subscription to a paid plan with one payment provider."""

    class Status(models.TextChoices):
        INCOMPLETE = "incomplete", _("Incomplete (first payment pending)")
        TRIALING = "trialing", _("Trialing")
        ACTIVE = "active", _("Active")
        PAST_DUE = "past_due", _("Past due")
        CANCELED = "canceled", _("Canceled")

    class Provider(models.TextChoices):
        DEV = "dev", "Development (no payment)"
        STRIPE = "stripe", "Stripe"
        #: A plan staff gave at no charge, for a fixed time (billing.services.subscriptions.give_plan).
        GIFT = "gift", "Given by staff (no charge)"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="subscriptions")
    plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="subscriptions")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.INCOMPLETE)
    provider = models.CharField(max_length=10, choices=Provider.choices)
    provider_customer_id = models.CharField(max_length=255, blank=True)
    provider_subscription_id = models.CharField(max_length=255)
    current_period_start = models.DateTimeField()
    current_period_end = models.DateTimeField()
    cancel_at_period_end = models.BooleanField(
        default=False,
        help_text="Ends when the period ends (a downgrade "
        'to the free plan or a cancellation); undone by "Keep my plan".',
    )
    scheduled_plan = models.ForeignKey(
        Plan,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The plan it moves to when the period ends (a downgrade between paid plans, dev provider).",
    )
    usage_period_start = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Where the usage of the period starting at current_period_start is "
        "counted from, when the user was already in a period as this subscription began: a plan change "
        "does not reset the usage. Cleared when the period rolls over.",
    )
    past_due_since = models.DateTimeField(null=True, blank=True)
    canceled_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When it stopped granting its plan; the Free plan's monthly periods count on from here.",
    )
    last_payment_status = models.CharField(max_length=10, blank=True, help_text='"paid" or "failed"')
    last_payment_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = SubscriptionQuerySet.as_manager()

    class Meta:
        ordering = ["-current_period_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "provider_subscription_id"], name="billing_one_row_per_provider_subscription"
            ),
            models.CheckConstraint(
                condition=Q(current_period_end__gt=models.F("current_period_start")),
                name="billing_period_ends_after_it_starts",
            ),
        ]
        indexes = [models.Index(fields=["status", "current_period_end"])]

    def __str__(self) -> str:
        return f"{self.user} · {self.plan} ({self.status})"

    @property
    def is_unpaid_leftover(self) -> bool:
        """Made with development payments (nothing charged) while another provider now takes payment: it
        ends at its period end and is neither renewed nor changed (billing.services.subscriptions)."""
        return self.provider == self.Provider.DEV and settings.PAYMENT_PROVIDER != self.Provider.DEV


class BillingCustomer(models.Model):
    """The payment provider's customer for a user (made before the first checkout)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="billing_customer")
    provider = models.CharField(max_length=10, choices=Subscription.Provider.choices)
    provider_customer_id = models.CharField(max_length=255, unique=True)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.user} = {self.provider_customer_id}"


class ProviderEvent(models.Model):
    """Everything learned about a provider subscription: webhook events, API reads and local decisions.

    A webhook event is stored here (keyed by its id, so a redelivery is recognised) before it is
    processed; the subscription's state is then recomputed from all its stored events in time order
    (see services/stripe_events.py), which makes duplicates and arrival order irrelevant.
    """

    class Source(models.TextChoices):
        WEBHOOK = "webhook", "Webhook"
        API = "api", "Read from the provider's API"
        LOCAL = "local", "Decided here"

    event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=100)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.WEBHOOK)
    occurred_at = models.DateTimeField(help_text="When the provider says it happened (the event's created).")
    subscription_ref = models.CharField(max_length=255, blank=True, db_index=True)
    payload = models.JSONField(help_text="The event's data.object.")
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["occurred_at", "pk"]
        indexes = [models.Index(fields=["processed_at", "received_at"])]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


class UsageRecord(models.Model):
    """The ledger: one row per generation, written exactly once (both unique keys enforce it)."""

    # Kept when the account is deleted (accounting needs the figures): the user is set to null and the
    # rows keep one anonymous id instead (accounts.services.delete_account).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="usage_records"
    )
    anonymous_id = models.CharField(
        max_length=40,
        blank=True,
        db_index=True,
        help_text="Set when the account was deleted: the same for all its rows.",
    )
    reservation_id = models.CharField(max_length=64, unique=True)
    generation_id = models.CharField(max_length=64, unique=True)
    # Plain ids, not foreign keys: chat and the API link them without billing depending on them.
    conversation_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    api_key_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    plan_slug = models.SlugField()
    model = models.CharField(max_length=200)
    node = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField()
    cached_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField()
    billable_tokens = models.PositiveBigIntegerField(
        help_text="What counted against the quota, fixed when written (the cached-token discount of that moment)."
    )
    from_cache = models.BooleanField(
        default=False, help_text="Answered from the response cache: no engine time; billed by the plan's rule."
    )
    auto_route = models.CharField(
        max_length=12,
        blank=True,
        help_text="Why the Auto model choice sent it to this model ('easy': the small one, by difficulty); "
        "empty when the model was asked for by name.",
    )
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["user", "created"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(cached_tokens__lte=models.F("prompt_tokens")), name="billing_cached_within_prompt"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user or self.anonymous_id} · {self.model} · {self.billable_tokens} tokens"


class CounterReconciliation(models.Model):
    """One run of the nightly reconciliation: Redis counters compared with (and reset from) the ledger."""

    ran_at = models.DateTimeField(default=timezone.now)
    checked = models.PositiveIntegerField(default=0)
    rebuilt = models.PositiveIntegerField(default=0, help_text="Counters that were missing and were rebuilt.")
    drifted = models.PositiveIntegerField(default=0, help_text="Counters that disagreed with the ledger.")
    drift_tokens = models.BigIntegerField(default=0, help_text="Sum of |counter - ledger| over drifted counters.")
    details = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-ran_at"]

    def __str__(self) -> str:
        return f"Reconciliation {self.ran_at:%Y-%m-%d %H:%M}: {self.drifted} drifted of {self.checked}"
