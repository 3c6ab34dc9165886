from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ConsoleConfig(AppConfig):
    """The staff console: the admin site (below), the dashboard and the `moderator` role. It sits above
    every app and reads them all; nothing imports it (the audit log it shows is the `audit` app)."""

    default = True
    default_auto_field = "django.db.models.BigAutoField"
    name = "console"
    verbose_name = "Staff console"

    def ready(self) -> None:
        from console import signals  # noqa: F401  (the moderator role)


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """Django's admin, with the console's site (grouped navigation, dashboard, audited deletions)."""

    default = False
    default_site = "console.site.ConsoleSite"
