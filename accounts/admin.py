from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.core.exceptions import ValidationError
from django.template.response import TemplateResponse

from accounts import services
from accounts.models import ApiKey, User


class UserCreationForm(AdminUserCreationForm):
    class Meta:
        model = User
        fields = ("email",)


class UserEditForm(UserChangeForm):
    class Meta:
        model = User
        fields = "__all__"
        help_texts = {"suspended_reason": "Shown to the user, word for word, wherever they are refused."}

    def clean(self):
        data = super().clean()
        if data.get("is_suspended") and not (data.get("suspended_reason") or "").strip():
            self.add_error("suspended_reason", ValidationError(
                "Give a reason: the user is shown it on every page and in every refusal."))
        return data


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    form = UserEditForm
    add_form = UserCreationForm
    ordering = ("-date_joined",)
    list_display = ("email", "display_name", "is_staff", "is_suspended", "date_joined", "last_login")
    list_filter = ("is_staff", "is_suspended", "is_active")
    search_fields = ("email", "display_name")
    readonly_fields = ("date_joined", "last_login", "suspended_at")
    fieldsets = (
        (None, {"fields": ("email", "password", "display_name")}),
        ("Suspension", {"fields": ("is_suspended", "suspended_reason", "suspended_at")}),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")}),
        ("Dates", {"fields": ("date_joined", "last_login")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)
    actions = ("suspend", "reinstate")

    def save_model(self, request, obj, form, change):
        """Ticking or unticking "suspended" goes through the services (they stamp the time)."""
        super().save_model(request, obj, form, change)
        if change and "is_suspended" in form.changed_data:
            if obj.is_suspended:
                services.suspend_user(obj, obj.suspended_reason)
            else:
                services.reinstate_user(obj)

    @admin.action(description="Suspend the selected users…", permissions=["change"])
    def suspend(self, request, queryset):
        """First a page asking for the reason (each user is shown it), then the suspension."""
        reason, error = "", None
        if "apply" in request.POST:
            reason = request.POST.get("reason", "")
            if reason.strip():
                for user in queryset:
                    services.suspend_user(user, reason)
                count = queryset.count()
                self.message_user(request, f"Suspended {count} user{'s' if count != 1 else ''}. They are shown "
                                           "the reason on every page and in every refusal.", messages.SUCCESS)
                return None
            error = "Give a reason: the user is shown it on every page and in every refusal."
        return TemplateResponse(request, "admin/accounts/user/suspend.html", {
            **self.admin_site.each_context(request),
            "title": "Suspend users",
            "opts": self.model._meta,
            "queryset": queryset,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "reason": reason,
            "error": error,
        })

    @admin.action(description="Reinstate selected users")
    def reinstate(self, request, queryset):
        for user in queryset:
            services.reinstate_user(user)
        messages.success(request, f"Reinstated {queryset.count()} user(s).")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "user", "created", "last_used", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "name", "user__email")
    readonly_fields = ("prefix", "hashed_key", "created", "last_used")
