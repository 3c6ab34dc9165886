"""SGLang's OpenAI-compatible routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Chat applies the model's chat template (ChatML: ``simulator.chat_template``, the same bytes the product
renders for native mode). Streams follow the protocol note §3.1 exactly: a role chunk, content deltas (a step
that adds no text sends nothing), a separate finish chunk with an empty delta, the usage chunk when
``stream_options.include_usage`` is set, then ``[DONE]``. ``id`` is the SGLang rid.
``usage.prompt_tokens_details`` is ``{"cached_tokens": N}`` only with ``--enable-cache-report``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from simulator import tokenizer as tok
from simulator.chat_template import render_chatml
from simulator.engine import DISCONNECT_POLL_S, Engine, GenerateInput, Handle, RequestError, Snapshot
from simulator.sampling import SchemaError, parse_priority, parse_sampling_params, stop_list
from simulator.sse import DONE, SSE_HEADERS, event, openai_error, openai_stream_error

UNSUPPORTED_FIELDS = ("tools", "functions", "response_format", "logit_bias", "regex", "ebnf", "json_schema")


@dataclass
class OpenAICall:
    inp: GenerateInput
    model: str
    include_usage: bool
    continuous_usage: bool


def _content_type_ok(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json"


def _sampling(
    body: dict[str, Any], prompt_len: int, context_length: int, default_max: int | None, defaults: dict[str, float]
) -> dict[str, Any]:
    """OpenAI fields to SGLang sampling_params."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = default_max if default_max is not None else max(0, context_length - prompt_len)
    sp: dict[str, Any] = {"max_new_tokens": max_tokens, "stop": stop_list("stop", body.get("stop"))}
    for src, dst in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("seed", "sampling_seed"),
        ("min_tokens", "min_new_tokens"),
        ("ignore_eos", "ignore_eos"),
        ("no_stop_trim", "no_stop_trim"),
        ("skip_special_tokens", "skip_special_tokens"),
        ("stop_token_ids", "stop_token_ids"),
        ("top_k", "top_k"),
        ("min_p", "min_p"),
        ("repetition_penalty", "repetition_penalty"),
        ("frequency_penalty", "frequency_penalty"),
        ("presence_penalty", "presence_penalty"),
    ):
        if body.get(src) is not None:
            sp[dst] = body[src]
    return sp


def _parse_common(body: Any, defaults: dict[str, float]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise SchemaError("invalid request: expected a JSON object")
    if body.get("n") not in (None, 1):
        raise SchemaError("n > 1 is not supported by the simulated engine")
    if body.get("logprobs") is True:
        raise SchemaError("logprobs are not supported by the simulated engine")
    for name in UNSUPPORTED_FIELDS:
        value = body.get(name)
        if value and not (name == "response_format" and isinstance(value, dict) and value.get("type") == "text"):
            raise SchemaError(f"`{name}` is not supported by the simulated engine")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise SchemaError("stream_options must be an object")
    return options


class OpenAIAPI:
    def __init__(self, engine: Engine, defaults: dict[str, float]) -> None:
        self.engine = engine
        self.defaults = defaults
        self.cfg = engine.config

    # -- parsing ----------------------------------------------------------------------------------

    def _call(self, body: Any, *, chat: bool) -> OpenAICall:
        options = _parse_common(body, self.defaults)
        text: str | None
        if chat:
            messages = body.get("messages")
            if (
                not isinstance(messages, list)
                or not messages
                or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
            ):
                raise SchemaError("`messages` must be a non-empty list of {role, content} objects")
            text = render_chatml(messages)
            prompt_ids = tok.encode(text)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                text, prompt_ids = prompt, tok.encode(prompt)
            elif isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
                text, prompt_ids = None, list(prompt)
            else:
                raise SchemaError("`prompt` must be a string or a list of token ids (batches are not supported)")
        sp = _sampling(body, len(prompt_ids), self.cfg.context_length, None if chat else 16, self.defaults)
        rid = body.get("rid")
        if rid is not None and not isinstance(rid, str):
            raise SchemaError("`rid` must be a string")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise SchemaError("`stream` must be a boolean")
        inp = GenerateInput(
            prompt_ids=prompt_ids,
            params=parse_sampling_params(sp, self.defaults),
            rid=rid or None,
            stream=stream,
            prompt_text=text,
            priority=parse_priority(body),
        )
        include_usage = bool(options.get("include_usage"))
        return OpenAICall(
            inp=inp,
            model=str(body.get("model") or self.cfg.served_model_name),
            include_usage=include_usage,
            continuous_usage=bool(options.get("continuous_usage_stats")),
        )

    async def _parse(self, request: Request, *, chat: bool) -> OpenAICall | Response:
        if not _content_type_ok(request):
            return openai_error(400, "Unsupported Media Type: Only 'application/json' is allowed")
        try:
            return self._call(json.loads(await request.body()), chat=chat)
        except (ValueError, SchemaError) as exc:
            return openai_error(400, str(exc))

    # -- shared pieces --------------------------------------------------------------------------------

    def usage(self, handle: Handle, completion_tokens: int) -> dict[str, Any]:
        req = handle.req
        details = {"cached_tokens": req.cached_tokens or 0} if self.cfg.enable_cache_report else None
        prompt = len(req.prompt_ids)
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": details,
            "reasoning_tokens": 0,
            "completion_tokens_details": None,
        }

    @staticmethod
    def finish_fields(handle: Handle) -> tuple[str, Any]:
        finish = handle.req.finish or {}
        return finish.get("type", "stop"), finish.get("matched")

    async def _await_final(self, handle: Handle, request: Request) -> Snapshot | None:
        while True:
            snap = await handle.wait(timeout=DISCONNECT_POLL_S)
            if snap is not None and snap.finished:
                return snap
            if snap is None and await request.is_disconnected():
                return None

    # -- chat -----------------------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        call = await self._parse(request, chat=True)
        if isinstance(call, Response):
            return call
        if call.inp.stream:
            return StreamingResponse(self._chat_stream(call), media_type="text/event-stream", headers=SSE_HEADERS)
        try:
            handle = await self.engine.submit(call.inp)
        except RequestError as exc:
            return openai_error(exc.status, exc.message)
        try:
            snap = await self._await_final(handle, request)
        except RequestError as exc:
            return openai_error(exc.status, exc.message)
        finally:
            self.engine.release(handle)
        if snap is None:
            return Response(status_code=499)
        reason, matched = self.finish_fields(handle)
        return JSONResponse(
            {
                "id": handle.req.rid,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": call.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": handle.text_at(snap), "reasoning_content": None},
                        "logprobs": None,
                        "finish_reason": reason,
                        "matched_stop": matched,
                    }
                ],
                "usage": self.usage(handle, snap.n_ids),
                "metadata": {"weight_version": "default"},
            }
        )

    async def _chat_stream(self, call: OpenAICall) -> AsyncIterator[bytes]:
        handle: Handle | None = None
        created = int(time.time())
        sent = 0
        first = True
        try:
            handle = await self.engine.submit(call.inp)
            rid = handle.req.rid

            def chunk(
                delta: dict[str, Any], finish: str | None = None, matched: Any = None, n_ids: int | None = None
            ) -> bytes:
                body: dict[str, Any] = {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": call.model,
                    "choices": [
                        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
                    ],
                }
                if call.continuous_usage and n_ids is not None:
                    body["usage"] = self.usage(handle, n_ids)
                return event(body)

            while True:
                snap = await handle.wait()
                if snap is None:
                    continue
                if first:
                    first = False
                    yield chunk({"reasoning_content": None, "role": "assistant", "content": ""}, n_ids=snap.n_ids)
                text = handle.text_at(snap)
                if len(text) > sent:
                    yield chunk({"reasoning_content": None, "content": text[sent:]}, n_ids=snap.n_ids)
                    sent = len(text)
                if snap.finished:
                    reason, matched = self.finish_fields(handle)
                    yield chunk({"reasoning_content": None}, reason, matched, n_ids=snap.n_ids)
                    if call.include_usage:
                        yield event(
                            {
                                "id": rid,
                                "object": "chat.completion.chunk",
                                "created": created,
                                "model": call.model,
                                "choices": [],
                                "usage": self.usage(handle, snap.n_ids),
                            }
                        )
                    break
        except RequestError as exc:
            yield openai_stream_error(exc.status, exc.message)
        finally:
            if handle is not None:
                self.engine.release(handle)
        yield DONE

    # -- completions ----------------------------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        call = await self._parse(request, chat=False)
        if isinstance(call, Response):
            return call
        if call.inp.stream:
            return StreamingResponse(self._completion_stream(call), media_type="text/event-stream", headers=SSE_HEADERS)
        try:
            handle = await self.engine.submit(call.inp)
        except RequestError as exc:
            return openai_error(exc.status, exc.message)
        try:
            snap = await self._await_final(handle, request)
        except RequestError as exc:
            return openai_error(exc.status, exc.message)
        finally:
            self.engine.release(handle)
        if snap is None:
            return Response(status_code=499)
        reason, matched = self.finish_fields(handle)
        return JSONResponse(
            {
                "id": handle.req.rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": call.model,
                "choices": [
                    {
                        "index": 0,
                        "text": handle.text_at(snap),
                        "logprobs": None,
                        "finish_reason": reason,
                        "matched_stop": matched,
                    }
                ],
                "usage": self.usage(handle, snap.n_ids),
            }
        )

    async def _completion_stream(self, call: OpenAICall) -> AsyncIterator[bytes]:
        handle: Handle | None = None
        created = int(time.time())
        sent = 0
        try:
            handle = await self.engine.submit(call.inp)
            rid = handle.req.rid
            while True:
                snap = await handle.wait()
                if snap is None:
                    continue
                text = handle.text_at(snap)
                reason, matched = self.finish_fields(handle) if snap.finished else (None, None)
                if len(text) > sent or snap.finished:
                    yield event(
                        {
                            "id": rid,
                            "object": "text_completion",
                            "created": created,
                            "model": call.model,
                            "choices": [
                                {
                                    "index": 0,
                                    "text": text[sent:],
                                    "logprobs": None,
                                    "finish_reason": reason,
                                    "matched_stop": matched,
                                }
                            ],
                            "usage": None,
                        }
                    )
                    sent = len(text)
                if snap.finished:
                    if call.include_usage:
                        yield event(
                            {
                                "id": rid,
                                "object": "text_completion",
                                "created": created,
                                "model": call.model,
                                "choices": [],
                                "usage": self.usage(handle, snap.n_ids),
                            }
                        )
                    break
        except RequestError as exc:
            yield openai_stream_error(exc.status, exc.message)
        finally:
            if handle is not None:
                self.engine.release(handle)
        yield DONE

    # -- models ---------------------------------------------------------------------------------------

    def model_card(self) -> dict[str, Any]:
        name = self.cfg.served_model_name
        return {
            "id": name,
            "object": "model",
            "created": int(self.engine.startup_unix),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.cfg.context_length,
        }

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self.model_card()]})

    async def model(self, request: Request) -> Response:
        model_id = request.path_params["model_id"]
        if model_id != self.cfg.served_model_name:
            return JSONResponse(
                {
                    "error": {
                        "message": f"The model '{model_id}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
                status_code=404,
            )
        return JSONResponse(self.model_card())
