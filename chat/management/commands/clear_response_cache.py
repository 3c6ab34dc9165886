"""`manage.py clear_response_cache`: no kept answer is served again (after replacing a model's weights in
place, for example; a new version deployed as a node group changes the keys by itself)."""

from django.core.management.base import BaseCommand

from chat.generation import response_cache


class Command(BaseCommand):
    help = "Clear the response cache: every answer kept so far is answered afresh next time."

    def handle(self, *args, **options) -> None:
        response_cache.clear("cleared by manage.py clear_response_cache")
        self.stdout.write("The response cache is cleared.")
