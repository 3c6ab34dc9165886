"""A simulated SGLang worker: an HTTP server that speaks SGLang's protocol, with no GPU.

Run it with ``python -m simulator --port N`` or ``python manage.py run_simulated_engine
--port N``; ``--help`` lists the options. See docs/inference.md for how it works inside.

This package must not import Django: it starts on its own, fast, in tests and in ``make run``.
"""

from simulator.config import SimulatorConfig, add_arguments, build_parser, config_from_args

__all__ = ["SimulatorConfig", "add_arguments", "build_parser", "config_from_args", "serve"]


def serve(config: SimulatorConfig) -> None:
    """Run the worker until interrupted (blocking)."""
    from simulator.main import run

    run(config)
