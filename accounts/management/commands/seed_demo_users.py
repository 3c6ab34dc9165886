"""Create (or reset) a demo user and a staff user for the embedded default, and print how to sign in."""

from allauth.account.models import EmailAddress
from django.core.management.base import BaseCommand

from accounts.models import User

DEMO = ("demo@example.com", "demo-password-123", False)
STAFF = ("staff@example.com", "staff-password-123", True)


class Command(BaseCommand):
    help = "Create the demo and staff users used by `make run`, with verified emails."

    def handle(self, *args, **options) -> None:
        for email, password, is_staff in (DEMO, STAFF):
            user, _ = User.objects.get_or_create(email=email)
            user.is_staff = user.is_superuser = is_staff
            user.display_name = "Staff" if is_staff else "Demo"
            user.set_password(password)
            user.save()
            EmailAddress.objects.update_or_create(
                user=user, email=email, defaults={"verified": True, "primary": True}
            )
            role = "staff (asked to set up two-factor on first sign-in)" if is_staff else "user"
            self.stdout.write(f"  {role:<52} {email} / {password}")
