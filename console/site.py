"""The staff console: Django's admin with the product's look, grouped navigation and a dashboard."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import actions as admin_actions
from django.contrib.auth.decorators import login_required
from django.urls import path
from django.utils import timezone
from django.utils.decorators import method_decorator

from audit import services
from audit.changes import ChangedValues

# The sidebar and the index show models in these sections, in this order; a model not listed keeps
# its app's own section (after these). Each entry: (section name, [(app_label, object_name), ...]).
SECTIONS = (
    (
        "People",
        [
            ("accounts", "User"),
            ("accounts", "ApiKey"),
            ("auth", "Group"),
            ("account", "EmailAddress"),
            ("mfa", "Authenticator"),
            ("socialaccount", "SocialAccount"),
            ("socialaccount", "SocialApp"),
            ("socialaccount", "SocialToken"),
        ],
    ),
    (
        "Billing",
        [
            ("billing", "Plan"),
            ("billing", "Subscription"),
            ("billing", "UsageRecord"),
            ("billing", "BillingCustomer"),
            ("billing", "ProviderEvent"),
            ("billing", "CounterReconciliation"),
        ],
    ),
    (
        "Chat",
        [
            ("chat", "Conversation"),
            ("chat", "SharedConversation"),
            ("chat", "AnswerFeedback"),
            ("chat", "SemanticCachePolicy"),
            ("chat", "AutoModelPolicy"),
        ],
    ),
    ("Moderation", [("moderation", "*")]),
    ("Inference", [("inference", "*")]),
    ("Evaluations", [("evals", "Rollout"), ("evals", "EvalSet"), ("evals", "EvalRun")]),
    ("Audit", [("audit", "AuditEntry")]),
)


def audited_delete_selected(modeladmin, request, queryset):
    """Django's "Delete selected" action, with each deleted object in the audit log."""
    confirmed = bool(request.POST.get("post"))
    objects = list(queryset) if confirmed else []
    response = admin_actions.delete_selected(modeladmin, request, queryset)
    if confirmed and response is None and len(objects) > 1:
        # A single object's log entry is saved one by one (the signal records it); several are
        # bulk-inserted without a signal, so they are recorded here.
        services.record_deletions(request.user, objects)
    return response


audited_delete_selected.allowed_permissions = admin_actions.delete_selected.allowed_permissions
audited_delete_selected.short_description = admin_actions.delete_selected.short_description


class ConsoleSite(admin.AdminSite):
    site_header = "Staff console"
    site_title = "SGLChat staff console"
    index_title = "Dashboard"
    index_template = "admin/console_index.html"

    def __init__(self, name: str = "admin"):
        super().__init__(name)
        self._actions["delete_selected"] = audited_delete_selected
        self._global_actions["delete_selected"] = audited_delete_selected

    # The console signs in through allauth, so staff get the same rate limits, suspension and 2FA.
    @method_decorator(login_required)
    def login(self, request, extra_context=None):
        return super().login(request, extra_context)

    def index(self, request, extra_context=None):
        from console import selectors

        figures = selectors.dashboard()
        extra_context = {**(extra_context or {}), "dashboard": figures, "dashboard_time": timezone.now()}
        return super().index(request, extra_context)

    def get_urls(self):
        from console import views

        return [
            path("dashboard.json", self.admin_view(views.dashboard_data), name="console-dashboard-data"),
            *super().get_urls(),
        ]

    def register(self, model_or_iterable, admin_class=None, **options):
        """Every model's admin also records, for an edit, each changed field's old and new value."""
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, ChangedValues):
            admin_class = type(
                admin_class.__name__, (ChangedValues, admin_class), {"__module__": admin_class.__module__}
            )
        return super().register(model_or_iterable, admin_class, **options)

    def get_app_list(self, request, app_label=None):
        app_list = super().get_app_list(request, app_label)
        if app_label is not None:
            return app_list
        return group_sections(app_list)


def group_sections(app_list: list[dict]) -> list[dict]:
    """Regroup Django's per-app list into the console's sections (models a user may not see are absent)."""
    models = {(app["app_label"], model["object_name"]): (app, model) for app in app_list for model in app["models"]}
    placed: set[tuple[str, str]] = set()
    sections = []
    for name, members in SECTIONS:
        entries = []
        for app_label, object_name in members:
            keys = [key for key in models if key[0] == app_label] if object_name == "*" else [(app_label, object_name)]
            for key in keys:
                if key in models and key not in placed:
                    entries.append(models[key][1])
                    placed.add(key)
        if entries:
            first_app = models[next(key for key in models if models[key][1] is entries[0])][0]
            sections.append(
                {
                    "name": name,
                    "app_label": name.lower(),
                    "app_url": first_app["app_url"],
                    "has_module_perms": True,
                    "models": entries,
                }
            )
    for app in app_list:
        rest = [model for model in app["models"] if (app["app_label"], model["object_name"]) not in placed]
        if rest:
            sections.append({**app, "models": rest})
    return sections
