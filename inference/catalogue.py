"""The models the product offers, and which engine serves each.

Configured by INFERENCE_MODELS (see README): a comma-separated list of `id=Display name`; each model's
context window is INFERENCE_CONTEXT_TOKENS unless INFERENCE_MODEL_CONTEXT_TOKENS names it.
Every model is served by the engine at SGLANG_URL (an SGLang server or an SGLang Model Gateway in
front of many). Which plans may use which model is billing's decision, not this module's.
"""

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class ModelInfo:
    id: str
    name: str
    context_tokens: int


def available_models() -> list[ModelInfo]:
    models = []
    windows = settings.INFERENCE_MODEL_CONTEXT_TOKENS
    for item in settings.INFERENCE_MODELS:
        model_id, _, name = item.partition("=")
        model_id = model_id.strip()
        context_tokens = windows.get(model_id, settings.INFERENCE_CONTEXT_TOKENS)
        models.append(ModelInfo(id=model_id, name=(name or model_id).strip(), context_tokens=context_tokens))
    return models


def get_model(model_id: str) -> ModelInfo | None:
    return next((m for m in available_models() if m.id == model_id), None)
