"""Fixtures of the documents tests: reading runs against the
simulated embedding worker; a PostgreSQL with pgvector for the retrieval cases."""

import pytest

from harness.pgvector_server import pgvector_server


@pytest.fixture(scope="session")
def pgvector_url(tmp_path_factory):
    """A PostgreSQL server with pgvector, started for this run (once, and only if a test asks)."""
    with pgvector_server(tmp_path_factory.mktemp("pgvector")) as url:
        yield url
