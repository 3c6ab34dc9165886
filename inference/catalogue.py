"""The models the product offers, and of which kind each is.

Chat models are configured by INFERENCE_MODELS, embedding models (SGLang servers started with
`--is-embedding`, reached at /v1/embeddings) by INFERENCE_EMBEDDING_MODELS (see README); both are
comma-separated lists of `id=Display name`, and an id is in one or the other, never both. Each model's
context window is INFERENCE_CONTEXT_TOKENS unless INFERENCE_MODEL_CONTEXT_TOKENS names it. Which plans
may use which model is billing's decision, not this module's.

`available_models` and `get_model` are the chat models: every chat path (the chat page's picker, a
chat turn, /v1/chat/completions, a default model setting) asks them, so an embedding model is never
offered for chat, and asking for one by name is refused with a sentence that points to /v1/embeddings
(`WrongKind`, a 400 naming `model`). `get_embedding_model` is the same the other way round.
"""

from dataclasses import dataclass

from django.conf import settings

from config.refusals import BadInput
from config.text import shown

CHAT, EMBEDDING = "chat", "embedding"
#: The model choice that picks, per turn, between INFERENCE_AUTO_MODEL's small and large models
#: (chat.generation.auto_route); its kind is AUTO, and no engine serves it by that name.
AUTO = "auto"


@dataclass(frozen=True)
class ModelInfo:
    id: str
    name: str
    context_tokens: int
    #: CHAT, EMBEDDING, or AUTO (the choice between two chat models).
    kind: str = CHAT


class WrongKind(BadInput):
    """A model of the other kind than the endpoint serves (400, `param` "model")."""


def _parse(items: list[str], kind: str) -> list[ModelInfo]:
    models = []
    windows = settings.INFERENCE_MODEL_CONTEXT_TOKENS
    for item in items:
        model_id, _, name = item.partition("=")
        model_id = model_id.strip()
        context_tokens = windows.get(model_id, settings.INFERENCE_CONTEXT_TOKENS)
        models.append(ModelInfo(id=model_id, name=(name or model_id).strip(), context_tokens=context_tokens, kind=kind))
    return models


def available_models() -> list[ModelInfo]:
    """The chat models, in the order INFERENCE_MODELS lists them, after Auto when it is offered."""
    models = _parse(settings.INFERENCE_MODELS, CHAT)
    pair = _auto_pair(models)
    if pair is None:
        return models
    return [ModelInfo(id=AUTO, name="Auto", context_tokens=max(m.context_tokens for m in pair), kind=AUTO), *models]


def _auto_pair(models: list[ModelInfo]) -> tuple[ModelInfo, ModelInfo] | None:
    if not settings.INFERENCE_AUTO_MODEL:
        return None
    by_id = {m.id: m for m in models}
    small, large = (by_id.get(i.strip()) for i in settings.INFERENCE_AUTO_MODEL)
    return (small, large) if small and large else None


def auto_models() -> tuple[ModelInfo, ModelInfo] | None:
    """The small and the large model Auto chooses between, or None when Auto is not offered."""
    return _auto_pair(_parse(settings.INFERENCE_MODELS, CHAT))


def embedding_models() -> list[ModelInfo]:
    """The embedding models, in the order INFERENCE_EMBEDDING_MODELS lists them."""
    return _parse(settings.INFERENCE_EMBEDDING_MODELS, EMBEDDING)


def embedding_model_ids() -> frozenset[str]:
    return frozenset(model.id for model in embedding_models())


def get_model(model_id: str) -> ModelInfo | None:
    """The chat model called `model_id`, or None; an embedding model's id is refused (WrongKind)."""
    found = next((m for m in available_models() if m.id == model_id), None)
    if found is None and model_id in embedding_model_ids():
        raise WrongKind(
            f"The model {shown(model_id)} is an embedding model; use /v1/embeddings.", model=model_id, param="model"
        )
    return found


def get_embedding_model(model_id: str) -> ModelInfo | None:
    """The embedding model called `model_id`, or None; a chat model's id is refused (WrongKind)."""
    found = next((m for m in embedding_models() if m.id == model_id), None)
    if found is None and any(m.id == model_id for m in available_models()):
        raise WrongKind(
            f"The model {shown(model_id)} is a chat model; use /v1/chat/completions.", model=model_id, param="model"
        )
    return found
