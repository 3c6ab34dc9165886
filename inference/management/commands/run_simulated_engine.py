"""``python manage.py run_simulated_engine --port N [options]``: the simulated SGLang worker.

The same options as ``python -m simulator`` (both use ``simulator.config.add_arguments``). The
worker is the top-level ``simulator`` package and never touches Django; this command only makes it
reachable through manage.py. Its server (Starlette, uvicorn) comes with the ``simulator`` extra.
"""

from django.core.management.base import BaseCommand, CommandError

from simulator.config import add_arguments, config_from_args


class Command(BaseCommand):
    help = "Run a simulated SGLang worker (SGLang's HTTP protocol, no GPU) on a port."

    def add_arguments(self, parser):
        add_arguments(parser)

    def handle(self, *args, **options):
        from argparse import Namespace

        try:
            from simulator.main import run
        except ModuleNotFoundError as missing:
            raise CommandError(
                f"The simulated worker's server is not installed ({missing.name} is missing): "
                "pip install 'sglchat[simulator]'."
            ) from missing
        try:
            config = config_from_args(Namespace(**options))
        except ValueError as invalid:
            raise CommandError(str(invalid)) from invalid
        run(config)
