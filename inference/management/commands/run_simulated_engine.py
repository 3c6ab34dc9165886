"""``python manage.py run_simulated_engine --port N [options]``: the simulated SGLang worker.

The same options as ``python -m inference.simulator`` (both use
``inference.simulator.config.add_arguments``). The worker itself never touches Django; this command
only makes it reachable through manage.py.
"""

from django.core.management.base import BaseCommand

from inference.simulator.config import add_arguments, config_from_args


class Command(BaseCommand):
    help = "Run a simulated SGLang worker (SGLang's HTTP protocol, no GPU) on a port."

    def add_arguments(self, parser):
        add_arguments(parser)

    def handle(self, *args, **options):
        from argparse import Namespace

        from inference.simulator.main import run

        run(config_from_args(Namespace(**options)))
