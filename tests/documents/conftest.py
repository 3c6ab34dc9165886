"""Files go to this test's own directory; reading runs against the simulated embedding worker."""

import pytest

from tests.support.live_fixtures import EMBED


@pytest.fixture(autouse=True)
def _media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


@pytest.fixture
def retrieval(settings, embedder):
    """The retrieval model is the simulated worker's (window 256, as `embedder` is started)."""
    settings.INFERENCE_EMBEDDING_MODELS = [f"{EMBED}=Simulated Embeddings"]
    settings.SGLANG_EMBEDDING_URL = embedder.url
    settings.INFERENCE_MODEL_CONTEXT_TOKENS = {EMBED: 256}
    settings.RETRIEVAL_EMBEDDING_MODEL = EMBED
    return EMBED
