"""Users and API keys in the staff console.

The list shows each user's plan and usage this period (from the billing selectors, in a fixed number of
queries per page). Suspension and reinstatement go through `accounts.services`, always with a reason,
and are audited: from the list (bulk actions) or from a user's page (the buttons at the top).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

from accounts import services
from accounts.models import ApiKey, User
from billing.models import Plan
from billing.selectors import current_period, plans_and_usage
from billing.services import subscriptions
from config.refusals import Refusal

SUSPENSION = {
    "suspend": {
        "title": "Suspend users",
        "verb": "Suspend",
        "label": "Reason (shown to each user, word for word)",
        "explanation": "These users will be refused everything from their next request on: every page, the "
        "chat and the API say their account is suspended and give the reason below.",
        "done": "Suspended {count} user{s}. They are shown the reason on every page and in every refusal.",
    },
    "reinstate": {
        "title": "Reinstate users",
        "verb": "Reinstate",
        "label": "Reason (kept in the audit log)",
        "explanation": "These users will be able to sign in and chat again at once.",
        "done": "Reinstated {count} user{s}.",
    },
}
REASON_REQUIRED = "Give a reason: it is kept in the audit log{shown}."


def _short(tokens: int) -> str:
    """200,000 -> "200k", 25,000,000 -> "25M": an allowance at a glance."""
    for size, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if tokens >= size and tokens % (size // 10) == 0:
            return f"{tokens / size:g}{unit}"
    return f"{tokens:,}"


class PlanChangeForm(forms.Form):
    """How staff change someone's plan: given at no charge for some months, or a smaller plan when their
    paid period ends (billing.services.subscriptions; never by editing the subscription's row)."""

    GIVE, SCHEDULE = "give", "schedule"
    plan = forms.ModelChoiceField(queryset=Plan.objects.order_by("sort_order", "monthly_price_cents"), empty_label=None)
    how = forms.ChoiceField(
        choices=[
            (GIVE, "Give it now, at no charge, for the months below (it then ends on its own)"),
            (SCHEDULE, "Move to it when the paid period ends (a smaller plan, through the payment provider)"),
        ],
        widget=forms.RadioSelect,
        initial=GIVE,
    )
    months = forms.IntegerField(min_value=1, max_value=24, initial=1, required=False)
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "maxlength": 500}),
        max_length=500,
        help_text="Kept in the audit log.",
    )


class UserCreationForm(AdminUserCreationForm):
    class Meta:
        model = User
        fields = ("email",)


class UserEditForm(UserChangeForm):
    class Meta:
        model = User
        fields = "__all__"


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    form = UserEditForm
    add_form = UserCreationForm
    ordering = ("-date_joined",)
    list_display = ("email", "plan", "usage_this_period", "standing", "joined")
    list_filter = ("is_suspended", "is_staff", "is_active", "groups")
    search_fields = ("email", "display_name")
    search_help_text = "Search by email or name."
    list_per_page = 50
    # Suspension is changed only through the buttons and actions (a reason, the service, the audit log).
    readonly_fields = ("date_joined", "last_login", "is_suspended", "suspended_reason", "suspended_at")
    fieldsets = (
        (None, {"fields": ("email", "password", "display_name")}),
        (
            "Suspension",
            {
                "fields": ("is_suspended", "suspended_reason", "suspended_at"),
                "description": "Use the Suspend… or Reinstate… button at the top of this page.",
            },
        ),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")}),
        ("Dates", {"fields": ("date_joined", "last_login")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)
    actions = ("suspend", "reinstate")

    # --- the list: plan and usage for the whole page at once --------------------------------------

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        changelist.result_list = list(changelist.result_list)
        lines = plans_and_usage(changelist.result_list)
        for user in changelist.result_list:
            user.usage_line = lines.get(user.pk)
        return changelist

    @admin.display(description="plan")
    def plan(self, user: User) -> str:
        line = getattr(user, "usage_line", None)
        return line.plan.name if line else "—"

    @admin.display(description="tokens this period")
    def usage_this_period(self, user: User) -> str:
        line = getattr(user, "usage_line", None)
        if line is None:
            return "—"
        return format_html(
            '<span class="console-usage" title="{} to {}"><meter min="0" max="100" value="{}"></meter> {} of {}</span>',
            line.period.start.date(),
            line.period.end.date(),
            line.percent_used,
            f"{line.billable_tokens:,}",
            _short(line.plan.tokens_per_month),
        )

    @admin.display(description="joined", ordering="date_joined")
    def joined(self, user: User) -> str:
        return date_format(timezone.localtime(user.date_joined), "j M Y")

    @admin.display(description="standing", ordering="is_suspended")
    def standing(self, user: User) -> str:
        if user.is_suspended:
            if user.banned_at is not None:
                label = "banned"
            elif user.suspended_until is not None:
                label = f"suspended until {date_format(timezone.localtime(user.suspended_until), 'j M')}"
            else:
                label = "suspended"
            return format_html(
                '<span class="console-badge console-badge-danger" title="{}">{}</span>', user.suspended_reason, label
            )
        if user.is_superuser:
            return format_html('<span class="console-badge console-badge-accent">{}</span>', "superuser")
        if user.is_staff:
            return format_html('<span class="console-badge console-badge-accent">{}</span>', "staff")
        return format_html('<span class="console-badge console-badge-ok">{}</span>', "active")

    # --- suspension: bulk actions and one user's buttons share one page ----------------------------

    def has_suspend_permission(self, request) -> bool:
        return request.user.has_perm("accounts.suspend_user")

    def get_urls(self):
        return [
            path("<int:user_id>/suspend/", self.admin_site.admin_view(self.suspend_one), name="accounts_user_suspend"),
            path(
                "<int:user_id>/reinstate/",
                self.admin_site.admin_view(self.reinstate_one),
                name="accounts_user_reinstate",
            ),
            path("<int:user_id>/plan/", self.admin_site.admin_view(self.change_plan), name="accounts_user_plan"),
            *super().get_urls(),
        ]

    @admin.action(description="Suspend the selected users…", permissions=["suspend"])
    def suspend(self, request, queryset):
        return self._suspension_page(request, queryset, "suspend", from_list=True)

    @admin.action(description="Reinstate the selected users…", permissions=["suspend"])
    def reinstate(self, request, queryset):
        return self._suspension_page(request, queryset, "reinstate", from_list=True)

    def suspend_one(self, request, user_id: int):
        return self._one(request, user_id, "suspend")

    def reinstate_one(self, request, user_id: int):
        return self._one(request, user_id, "reinstate")

    def _one(self, request, user_id: int, mode: str):
        if not self.has_suspend_permission(request):
            raise PermissionDenied
        get_object_or_404(User, pk=user_id)
        response = self._suspension_page(request, User.objects.filter(pk=user_id), mode, from_list=False)
        return response or redirect(reverse("admin:accounts_user_change", args=[user_id]))

    def _suspension_page(self, request, queryset, mode: str, *, from_list: bool):
        """First a page asking for the reason, then the service for each user (each one audited)."""
        words = SUSPENSION[mode]
        reason, error = "", None
        if request.method == "POST" and "apply" in request.POST:
            reason = request.POST.get("reason", "").strip()
            if reason:
                users = list(queryset)
                try:
                    if mode == "suspend":
                        # Staff only by a superuser: asked for the whole selection before the transaction,
                        # so a refusal changes nobody and its audit entry is kept.
                        services.check_may_suspend(request.user, users, reason=reason)
                    # All or none: a refusal for one user (a ban only a superuser lifts) changes nobody.
                    with transaction.atomic():
                        for user in users:
                            if mode == "suspend":
                                services.suspend_user(user, reason, actor=request.user)
                            else:
                                services.reinstate_user(user, reason=reason, actor=request.user)
                except Refusal as refusal:
                    self.message_user(request, refusal.message, messages.ERROR)
                    return None
                count = len(users)
                self.message_user(
                    request, words["done"].format(count=count, s="s" if count != 1 else ""), messages.SUCCESS
                )
                return None
            error = REASON_REQUIRED.format(shown=" and shown to each user" if mode == "suspend" else "")
        return TemplateResponse(
            request,
            "admin/accounts/user/suspend.html",
            {
                **self.admin_site.each_context(request),
                "title": words["title"],
                "words": words,
                "mode": mode,
                "from_list": from_list,
                "opts": self.model._meta,
                "queryset": queryset,
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
                "reason": reason,
                "error": error,
            },
        )

    # --- the plan: given, or changed at the period's end, through billing's services ---------------

    def has_change_plan_permission(self, request) -> bool:
        return request.user.has_perm("billing.change_subscription")

    def change_plan(self, request, user_id: int):
        if not self.has_change_plan_permission(request):
            raise PermissionDenied
        person = get_object_or_404(User, pk=user_id)
        form = PlanChangeForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                if data["how"] == PlanChangeForm.GIVE:
                    gift = subscriptions.give_plan(
                        person, data["plan"], months=data["months"] or 1, actor=request.user, reason=data["reason"]
                    )
                    until = date_format(timezone.localtime(gift.current_period_end), "j F Y")
                    done = f"{person.email} has the {gift.plan.name} plan at no charge until {until}."
                else:
                    done = subscriptions.schedule_plan_change(
                        person, data["plan"], actor=request.user, reason=data["reason"]
                    )
            except Refusal as refusal:
                form.add_error(None, refusal.message)
            else:
                self.message_user(request, done, messages.SUCCESS)
                return redirect(reverse("admin:accounts_user_change", args=[person.pk]))
        billing = current_period(person)
        return TemplateResponse(
            request,
            "admin/accounts/user/change_plan.html",
            {
                **self.admin_site.each_context(request),
                "title": f"Change the plan of {person.email}",
                "opts": self.model._meta,
                "person": person,
                "billing": billing,
                "form": form,
            },
        )

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["can_change_plan"] = obj is not None and self.has_change_plan_permission(request)
        context["can_suspend"] = obj is not None and self.has_suspend_permission(request)
        # The Suspend… button only for someone this staff member may suspend (a refusal would follow).
        context["may_suspend"] = obj is not None and services.may_suspend(request.user, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "user", "created", "last_used", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    list_select_related = ("user",)
    search_fields = ("prefix", "name", "user__email")
    readonly_fields = ("prefix", "hashed_key", "created", "last_used")
