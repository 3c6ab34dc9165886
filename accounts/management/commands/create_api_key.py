from django.core.management.base import BaseCommand, CommandError

from accounts.api_keys import create_api_key
from accounts.models import User
from config.refusals import Refusal


class Command(BaseCommand):
    help = "Print a new API key for a user (for operators and scripts). The key is shown only once."

    def add_arguments(self, parser):
        parser.add_argument("email")
        parser.add_argument("--name", default="command line")

    def handle(self, *args, email, name, **options):
        user = User.objects.filter(email__iexact=email).first()
        if user is None:
            raise CommandError(f"No user has the email {email}.")
        try:
            _, raw = create_api_key(user, name)
        except Refusal as refusal:
            raise CommandError(refusal.message) from refusal
        self.stdout.write(raw)
