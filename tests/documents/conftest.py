"""Fixtures of the documents tests: reading runs against the
simulated embedding worker; a PostgreSQL with pgvector for the retrieval cases."""

import tempfile
from pathlib import Path

import pytest

from harness.pgvector_server import pgvector_server


@pytest.fixture(scope="session")
def pgvector_url():
    """A PostgreSQL server with pgvector, started for this run (once, and only if a test asks).

    Its data directory is not under pytest's own temporary root: the server runs as another user, and any
    other pytest run of ours that starts meanwhile closes that root to everyone else again (0700), which
    stopped the server from starting. /tmp's own directory stays open."""
    with (
        tempfile.TemporaryDirectory(prefix="sglchat-pgvector-") as parent,
        pgvector_server(Path(parent) / "data") as url,
    ):
        yield url
