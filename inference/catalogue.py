"""The models the product offers, and which engine serves each.

Configured by INFERENCE_MODELS (see README): a comma-separated list of `id=Display name`.
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
    for item in settings.INFERENCE_MODELS:
        model_id, _, name = item.partition("=")
        models.append(
            ModelInfo(
                id=model_id.strip(), name=(name or model_id).strip(), context_tokens=settings.INFERENCE_CONTEXT_TOKENS
            )
        )
    return models


def get_model(model_id: str) -> ModelInfo | None:
    return next((m for m in available_models() if m.id == model_id), None)
