from asgiref.sync import async_to_sync
from django.core.management.base import BaseCommand

from chat.generation.reap import reap_stalled


class Command(BaseCommand):
    help = "Mark generations whose runner died as interrupted, keeping their partial text."

    def add_arguments(self, parser):
        parser.add_argument(
            "--grace",
            type=int,
            default=None,
            help="Only look at answers older than this many seconds (default: the heartbeat lifetime). "
            "Use 0 at start-up of a single-process server, where nothing can still be running.",
        )

    def handle(self, *args, grace=None, **options):
        reaped = async_to_sync(reap_stalled)(grace_seconds=grace)
        self.stdout.write(f"Interrupted {len(reaped)} stalled generation(s).")
