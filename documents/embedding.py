"""Vectors for passages and questions, from the retrieval embedding model on the fleet.

The same path as `/v1/embeddings` (api.embedding_service), minus a program's admission: the model is
RETRIEVAL_EMBEDDING_MODEL, a node is chosen by inference.routing like any request's, and
inference.embeddings calls it (and tries once elsewhere if that node fails). Billing is the caller's:
ingestion charges the owner's ledger (documents.ingestion); the answer path decides for questions.

    embed_texts(texts) -> EmbeddedTexts           from a worker thread or a Celery task (sync)
    aembed_texts(texts) -> EmbeddedTexts          from async code (the answer path, embedding a question)

Both raise EmbeddingUnavailable (a Busy refusal: 503 with a sentence) when no model is configured or no
node can embed, and an inference EngineError the caller may turn into its own sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.conf import settings
from django.utils.translation import gettext_noop

from config.refusals import Busy
from inference import embeddings as engine_embeddings
from inference import routing
from inference.catalogue import ModelInfo, WrongKind, get_embedding_model


class EmbeddingUnavailable(Busy):
    code = "embedding_unavailable"


@dataclass(frozen=True)
class EmbeddedTexts:
    #: One vector per text, in order (RETRIEVAL_EMBEDDING_DIMENSIONS floats each).
    vectors: list[list[float]]
    #: The product's id of the model that made them (stored on the document: a query uses the same).
    model: str
    #: The engine's count of the inputs' tokens (what the ledger is charged).
    prompt_tokens: int
    #: The node that answered (recorded on the ledger row).
    node: str


def retrieval_model() -> ModelInfo:
    """The embedding model that indexes files and embeds questions. EmbeddingUnavailable when none is set."""
    model_id = settings.RETRIEVAL_EMBEDDING_MODEL
    try:
        model = get_embedding_model(model_id) if model_id else None
    except WrongKind:
        model = None
    if model is None:
        # Said where files are read (saved with the file, in English: documents.ingestion); a question's
        # search goes on without passages (documents.retrieval).
        raise EmbeddingUnavailable(
            gettext_noop(
                "Files cannot be indexed on this installation: no embedding model is configured "
                "(RETRIEVAL_EMBEDDING_MODEL, one of INFERENCE_EMBEDDING_MODELS)."
            ),
            retry_after=60,
        )
    return model


def _route(model_id: str) -> routing.Route:
    try:
        return routing.choose_node(model_id)
    except routing.NoNodeAvailable as exc:
        raise EmbeddingUnavailable(
            gettext_noop("No server can index files right now. Try again in a minute."),
            retry_after=exc.retry_after or 30,
        ) from exc


def _result(model: ModelInfo, embedded: engine_embeddings.Embedded) -> EmbeddedTexts:
    return EmbeddedTexts(
        vectors=embedded.result.vectors,
        model=model.id,
        prompt_tokens=embedded.result.prompt_tokens,
        node=embedded.node,
    )


def _nothing() -> EmbeddedTexts:
    return EmbeddedTexts(vectors=[], model=settings.RETRIEVAL_EMBEDDING_MODEL, prompt_tokens=0, node="")


async def aembed_texts(texts: list[str]) -> EmbeddedTexts:
    """Embed `texts` (non-empty strings, each within the model's window) on the fleet."""
    if not texts:
        return _nothing()
    model = await database_sync_to_async(retrieval_model)()
    route = await database_sync_to_async(_route)(model.id)
    return _result(model, await engine_embeddings.embed(route, texts, model_id=model.id))


def embed_texts(texts: list[str]) -> EmbeddedTexts:
    """`aembed_texts` for synchronous code (a Celery task, an ingestion thread); never from an event loop.
    The model and the node are looked up on the caller's own thread and connection (inside its
    transaction, if it has one); only the request to the engine runs in an event loop."""
    if not texts:
        return _nothing()
    model = retrieval_model()
    route = _route(model.id)
    return _result(model, async_to_sync(engine_embeddings.embed)(route, texts, model_id=model.id))
