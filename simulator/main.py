"""Starting the worker: uvicorn around the Starlette app, with quick, clean shutdown."""

from __future__ import annotations

import logging
import sys

import uvicorn
from starlette.applications import Starlette

from simulator.config import SimulatorConfig, build_parser, config_from_args
from simulator.server import create_app


def run(config: SimulatorConfig) -> None:
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = _app(config)
    faults = ", ".join(config.faults.describe()) or "none"
    print(
        f"simulated SGLang worker{' (--is-embedding)' if config.is_embedding else ''}: "
        f"http://{config.host}:{config.port} "
        f"model={config.served_model_name} "
        f"speed={config.speed} max_running_requests={config.max_running_requests} "
        f"max_total_tokens={config.max_total_tokens} faults={faults}",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        access_log=config.log_level == "debug",
        # Streams in flight must not hold a shutdown for long: tests stop workers all the time.
        timeout_graceful_shutdown=1,
        # h11 only: an HTTP/2 (gRPC) probe, as smg sends while detecting the worker type, gets a
        # 400 and a closed connection, which smg reads as "not gRPC".
        http="h11",
        lifespan="on",
    )


def _app(config: SimulatorConfig) -> Starlette:
    if not config.enable_trace:
        return create_app(config)
    from simulator.tracing import TracingError  # only with --enable-trace

    try:
        return create_app(config)
    except TracingError as refused:
        sys.exit(f"simulated SGLang worker: {refused}")  # one line on stderr, exit status 1


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    try:
        config = config_from_args(parser.parse_args(argv))
    except ValueError as invalid:
        parser.error(str(invalid))  # a usage error (exit status 2), as SGLang's launcher refuses a bad option
    run(config)
