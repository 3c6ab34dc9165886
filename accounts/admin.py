from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm

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
    actions = ("reinstate",)

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
