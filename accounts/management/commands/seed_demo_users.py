"""Create a demo user and a staff user for the embedded default once, and say how to sign in.

`make run` calls this on every start. The accounts are created the first time only, with the published
passwords README lists, and those are printed then. Afterwards an account is left as its owner (or
staff) made it: its password is never reset (that would hand a published password back to anyone who
can reach the server, and sign every session out), and only the emails are printed.

The demo user is put on Plus through the configured payment provider when that is the development
one (nothing is charged), so a newcomer can try every feature, the API included, straight away; if
they moved to Free, the next start puts them back on Plus.
"""

from allauth.account.models import EmailAddress
from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django.urls import reverse

from accounts.models import User
from billing.providers import ReturnUrls
from billing.services import default_plan, effective_plan
from billing.services.subscriptions import change_plan

DEMO = ("demo@example.com", "demo-password-123", False)
STAFF = ("staff@example.com", "staff-password-123", True)
DEMO_PLAN = "plus"


class Command(BaseCommand):
    help = (
        "Create the demo and staff users used by `make run` (once, with verified emails, printing their "
        "passwords); later runs change no password. The demo user gets Plus."
    )

    def handle(self, *args, **options) -> None:
        existing = []
        for email, password, is_staff in (DEMO, STAFF):
            user, created = self._create_once(email, password, is_staff=is_staff)
            if is_staff:
                role = "staff (asked to set up two-factor on first sign-in)" if created else "staff"
            else:
                role = f"user, on the {self._give_demo_plan(user)} plan"
            if created:
                self.stdout.write(f"  {role:<52} {email} / {password}")
            else:
                existing.append(f"  {role:<52} {email}")
        if existing:
            self.stdout.write("  These accounts already exist (password unchanged; sign in with yours):")
            self.stdout.write("\n".join(existing))

    def _create_once(self, email: str, password: str, *, is_staff: bool) -> tuple[User, bool]:
        """The account, created with the published password if it does not exist yet; never changed after."""
        user = User.objects.filter(email__iexact=email).first()
        if user is not None:
            return user, False
        with transaction.atomic():
            user = User.objects.create_user(
                email,
                password,
                is_staff=is_staff,
                is_superuser=is_staff,
                display_name="Staff" if is_staff else "Demo",
            )
            EmailAddress.objects.create(user=user, email=email, verified=True, primary=True)
        return user, True

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
