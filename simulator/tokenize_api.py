"""SGLang's ``/v1/tokenize`` and ``/v1/detokenize`` (also served as ``/tokenize`` and ``/detokenize``).

Shapes as SGLang 0.5.x serves them (`entrypoints/openai/serving_tokenize.py`): a tokenize request is
``{"model"?, "prompt": str | [str], "add_special_tokens": true}`` and its answer
``{"tokens": [ids] | [[ids]], "count": n | [n], "max_model_len": n}``; a detokenize request is
``{"model"?, "tokens": [ids] | [[ids]], "skip_special_tokens": true}`` and its answer
``{"text": str | [str]}``. Errors are OpenAI-style 400s. The simulated tokenizer adds no special
tokens of its own (no BOS), so ``add_special_tokens`` changes nothing here.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from simulator import tokenizer as tok
from simulator.config import SimulatorConfig
from simulator.sse import openai_error


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


class TokenizeAPI:
    def __init__(self, config: SimulatorConfig) -> None:
        self.cfg = config

    async def _body(self, request: Request) -> dict[str, Any] | Response:
        try:
            body = await request.json()
        except ValueError:
            return openai_error(400, "The request body is not valid JSON.")
        if not isinstance(body, dict):
            return openai_error(400, "The request body must be a JSON object.")
        return body

    async def tokenize(self, request: Request) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            ids: Any = tok.encode(prompt)
            count: Any = len(ids)
        elif isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            ids = [tok.encode(p) for p in prompt]
            count = [len(i) for i in ids]
        else:
            return openai_error(400, f"Invalid prompt type: {type(prompt)}. Expected str or List[str].")
        return JSONResponse({"tokens": ids, "count": count, "max_model_len": self.cfg.context_length})

    async def detokenize(self, request: Request) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        tokens = body.get("tokens")
        skip = body.get("skip_special_tokens", True) is not False
        if _is_ids(tokens):
            return JSONResponse({"text": tok.decode(tokens, skip_special_tokens=skip)})
        if isinstance(tokens, list) and all(_is_ids(t) for t in tokens):
            return JSONResponse({"text": [tok.decode(t, skip_special_tokens=skip) for t in tokens]})
        return openai_error(400, f"Invalid tokens type: {type(tokens)}. Expected List[int] or List[List[int]].")
