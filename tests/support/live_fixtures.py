"""Session-wide live fixtures: one simulated SGLang worker and one Daphne server in front of it.

Registered for the whole suite in tests/conftest.py; tests that use `server` also need
`transactional_db` (the server is another process and sees only committed data).
"""

import pytest

from tests.support.servers import start_daphne

# Slow enough that a test can act mid-answer (attach, stop, kill) on a busy machine, fast enough to
# keep the suite short.
ENGINE_ARGS = ["--speed", "slow", "--accept-any-model"]
HEARTBEAT_TTL = "2"
#: The embedding model of `embed_server` (README's example names it too), and its context window there.
EMBED = "sim-embed"
WINDOW = 64
#: What a scraper sends to the live server's /metrics.
METRICS_TOKEN = "live-server-metrics-token"


@pytest.fixture(scope="session")
def engine():
    from harness.engines import start_simulator

    engine = start_simulator(*ENGINE_ARGS)
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def server(django_db_setup, django_db_blocker, engine):
    server = start_daphne(
        engine_url=engine.url, extra_env={"CHAT_HEARTBEAT_TTL_SECONDS": HEARTBEAT_TTL, "METRICS_TOKEN": METRICS_TOKEN}
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def echo_engine():
    """A simulated worker that answers with the user's last message (`--echo`), with its metrics on."""
    from harness.engines import start_simulator

    engine = start_simulator("--echo", "--enable-metrics", "--max-answer-tokens", "2000", speed="slow")
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def echo_server(django_db_setup, django_db_blocker, echo_engine):
    """Daphne in front of `echo_engine`, screening with the rules backend every 200 characters."""
    server = start_daphne(
        engine_url=echo_engine.url,
        extra_env={
            "MODERATION_BACKENDS": "rules",
            "MODERATION_WINDOW_CHARS": "200",
            "CHAT_HEARTBEAT_TTL_SECONDS": HEARTBEAT_TTL,
        },
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def embedder():
    """A simulated embedding worker (`--is-embedding`) serving EMBED."""
    from harness.engines import start_simulator

    with start_simulator("--is-embedding", "--served-model-name", EMBED, "--context-length", "256") as w:
        yield w


@pytest.fixture
def retrieval(settings, embedder):
    """In this process, the retrieval model (files' passages, questions) is `embedder`'s (window 256)."""
    settings.INFERENCE_EMBEDDING_MODELS = [f"{EMBED}=Simulated Embeddings"]
    settings.SGLANG_EMBEDDING_URL = embedder.url
    settings.INFERENCE_MODEL_CONTEXT_TOKENS = {EMBED: 256}
    settings.RETRIEVAL_EMBEDDING_MODEL = EMBED
    return EMBED


@pytest.fixture(scope="session")
def embed_server(django_db_setup, django_db_blocker, engine, embedder):
    """Daphne in front of the chat `engine`, with `embedder` serving EMBED for /v1/embeddings."""
    server = start_daphne(
        engine_url=engine.url,
        extra_env={
            "INFERENCE_EMBEDDING_MODELS": f"{EMBED}=Simulated Embeddings",
            "SGLANG_EMBEDDING_URL": embedder.url,
            "INFERENCE_MODEL_CONTEXT_TOKENS": f"{EMBED}={WINDOW}",
        },
    )
    yield server
    server.stop()
