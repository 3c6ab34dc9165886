"""`manage.py clear_response_cache`: no kept answer is served again (after replacing a model's weights in
place, for example; a new version deployed as a node group changes the keys by itself)."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from chat.generation import response_cache


class Command(BaseCommand):
    help = "Clear the response cache: every answer kept so far is answered afresh next time."

    def handle(self, *args, **options) -> None:
        if not settings.REDIS_URL:
            raise CommandError(
                "Without Redis (the embedded default) the response cache lives in the server's own memory: "
                "restart the server to clear it."
            )
        try:
            response_cache.clear("cleared by manage.py clear_response_cache")
        except response_cache.NotCleared as exc:
            raise CommandError(f"The response cache could not be cleared: Redis did not answer ({exc}).") from exc
        self.stdout.write("The response cache is cleared.")
