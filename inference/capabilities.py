"""What each model can do, as its engines say: tools, structured output, embeddings, images.

SGLang tells what a server can do in `/model_info` (its `--tool-call-parser`, whether it generates or
embeds, whether it understands images) and `/server_info` (its `--grammar-backend`). The poller
reads both when it first meets a node and whenever the node comes back up (a restart may change its
flags), and keeps the result on the node (`InferenceNode.capabilities`). A model can do something
when every node that serves it and has told us can; while none has told us (a new node, the gateway
mode, the single `SGLANG_URL` default), nothing is refused here and the engine decides.

A request that needs what its model cannot do is a 400 naming the parameter (`check`), before any
quota is held; `GET /v1/models` shows each model's capabilities.
"""

from __future__ import annotations

from typing import Any

from config.refusals import BadInput
from config.text import shown
from inference import catalogue, routing

#: What a model may be able to do, and how a refusal says it.
CAPABILITIES = {
    "tools": "call tools (its engine runs no --tool-call-parser)",
    "json_schema": "constrain its output to a format (its engine runs --grammar-backend none)",
    "embeddings": "embed text",
    "images": "read images",
}


def from_engine(model_info: dict[str, Any], server_info: dict[str, Any] | None) -> dict[str, bool | str]:
    """A node's capabilities from SGLang's `/model_info` and (when it answered) `/server_info`, and the
    version of the weights it runs (`weight_version`, which the response cache's keys name)."""
    generates = model_info.get("is_generation", True) is not False
    backend = (server_info or {}).get("grammar_backend", "xgrammar")
    return {
        "tools": generates and bool(model_info.get("tool_call_parser")),
        "json_schema": generates and backend not in (None, "none"),
        "embeddings": not generates,
        "images": bool(model_info.get("has_image_understanding")),
        "weight_version": str(model_info.get("weight_version") or ""),
    }


def of_model(model_id: str) -> dict[str, bool | None]:
    """For each capability: whether `model_id` has it, or None while no node serving it has said. Auto
    has what either of its models has (it sends a request that needs it to the one that does)."""
    if model_id == catalogue.AUTO and (pair := catalogue.auto_models()):
        return of_either([model.id for model in pair])
    known = [node.capabilities for node in routing.serving_nodes(model_id) if node.capabilities]
    can: dict[str, bool | None] = dict.fromkeys(CAPABILITIES)
    if known:
        can = {name: all(bool(said.get(name)) for said in known) for name in CAPABILITIES}
    # Which kind of model it is, the catalogue says (INFERENCE_EMBEDDING_MODELS): an embedding model
    # generates nothing, so it calls no tools and follows no format.
    if model_id in catalogue.embedding_model_ids():
        return {**can, "tools": False, "json_schema": False, "embeddings": True}
    return {**can, "embeddings": False}


def of_either(model_ids: list[str]) -> dict[str, bool | None]:
    """What at least one of `model_ids` can do (Auto's: it sends a request to the one that can)."""
    each = [of_model(model_id) for model_id in model_ids]
    return {
        name: True if any(c[name] for c in each) else None if any(c[name] is None for c in each) else False
        for name in CAPABILITIES
    }


def accepts_images(model_id: str) -> bool:
    """False once the model's engines said they do not understand images (/model_info's
    has_image_understanding); while none has said, True: the engine decides (SGLang's own 400 for a
    text-only model)."""
    return of_model(model_id).get("images") is not False


def check_images(model_id: str) -> None:
    """Refuse (400) images, to a program, for a model that does not accept them (accepts_images)."""
    if not accepts_images(model_id):
        raise BadInput(
            f"The model {shown(model_id)} does not accept images (its engines serve a text-only model); send "
            "the message without image_url parts, or choose a model GET /v1/models lists with the 'images' "
            "capability.",
            param="messages",
            model=model_id,
        )


def check(model_id: str, needs: dict[str, str]) -> None:
    """Refuse (400, naming the parameter) a request whose parameters need what the model cannot do.
    `needs` maps each parameter the request uses to the capability it needs."""
    if not needs:
        return
    can = of_model(model_id)
    for param, capability in needs.items():
        if can.get(capability) is False:
            raise BadInput(
                f"The model {shown(model_id)} cannot {CAPABILITIES[capability]}; leave out '{param}' "
                "or choose a model GET /v1/models lists with that capability.",
                param=param,
                model=model_id,
            )
