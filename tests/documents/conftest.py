"""Fixtures of the documents tests: reading runs against the
simulated embedding worker; a PostgreSQL with pgvector for the retrieval cases."""

import pytest

from harness.pgvector_server import pgvector_server
from tests.support.live_fixtures import EMBED


@pytest.fixture
def retrieval(settings, embedder):
    """The retrieval model is the simulated worker's (window 256, as `embedder` is started)."""
    settings.INFERENCE_EMBEDDING_MODELS = [f"{EMBED}=Simulated Embeddings"]
    settings.SGLANG_EMBEDDING_URL = embedder.url
    settings.INFERENCE_MODEL_CONTEXT_TOKENS = {EMBED: 256}
    settings.RETRIEVAL_EMBEDDING_MODEL = EMBED
    return EMBED


@pytest.fixture(scope="session")
def pgvector_url(tmp_path_factory):
    """A PostgreSQL server with pgvector, started for this run (once, and only if a test asks)."""
    with pgvector_server(tmp_path_factory.mktemp("pgvector")) as url:
        yield url
