"""Create (or reset) a demo user and a staff user for the embedded default, and print how to sign in.

The demo user is put on Plus through the configured payment provider when that is the development
one (nothing is charged), so a newcomer can try every feature, the API included, straight away.
"""

from allauth.account.models import EmailAddress
from django.conf import settings
from django.core.management.base import BaseCommand
from django.urls import reverse

from accounts.models import User
from billing.providers import ReturnUrls
from billing.services import default_plan, effective_plan
from billing.services.subscriptions import change_plan

DEMO = ("demo@example.com", "demo-password-123", False)
STAFF = ("staff@example.com", "staff-password-123", True)
DEMO_PLAN = "plus"


class Command(BaseCommand):
    help = "Create the demo and staff users used by `make run`, with verified emails; the demo user gets Plus."

    def handle(self, *args, **options) -> None:
        for email, password, is_staff in (DEMO, STAFF):
            user, _ = User.objects.get_or_create(email=email)
            user.is_staff = user.is_superuser = is_staff
            user.display_name = "Staff" if is_staff else "Demo"
            user.set_password(password)
            user.save()
            EmailAddress.objects.update_or_create(user=user, email=email, defaults={"verified": True, "primary": True})
            if is_staff:
                self.stdout.write(f"  {'staff (asked to set up two-factor on first sign-in)':<52} {email} / {password}")
            else:
                plan = self._give_demo_plan(user)
                self.stdout.write(f"  {f'user, on the {plan} plan':<52} {email} / {password}")

    def _give_demo_plan(self, user: User) -> str:
        """Plus for a demo user on the free plan; a paid plan chosen since is left alone. Returns the plan's name."""
        if effective_plan(user).pk == default_plan().pk:
            if settings.PAYMENT_PROVIDER != "dev":
                # A real provider would charge (or send to checkout): no subscription is made up here.
                self.stdout.write(
                    f"  (PAYMENT_PROVIDER={settings.PAYMENT_PROVIDER}: the demo user stays on "
                    "the free plan; subscribe on the Plans page for every model and the API)"
                )
            else:
                # The dev provider changes the plan at once; these pages only matter to a browser.
                urls = ReturnUrls(
                    success=reverse("billing:overview"),
                    cancel=reverse("billing:plans"),
                    billing=reverse("billing:overview"),
                )
                change_plan(user, DEMO_PLAN, urls=urls)
        return effective_plan(user).name
