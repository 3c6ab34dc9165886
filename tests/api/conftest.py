import openai
import pytest

from accounts.api_keys import create_api_key
from harness.engines import start_simulator
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

#: The embedding model of `embed_server`, and its context window there.
EMBED = "sim-embed"
WINDOW = 64


@pytest.fixture
def pro_key(transactional_db, server, user):
    put_on_plan(user, "pro")
    key, raw = create_api_key(user, "tests")
    return key, raw


@pytest.fixture
def client(server, pro_key):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=pro_key[1], max_retries=0, timeout=60) as client:
        yield client


@pytest.fixture(scope="package")
def embedder():
    with start_simulator("--is-embedding", "--served-model-name", EMBED, "--context-length", "256") as w:
        yield w


@pytest.fixture(scope="package")
def embed_server(django_db_setup, django_db_blocker, engine, embedder):
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
