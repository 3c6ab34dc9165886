"""SGLang's OpenAI-compatible routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Chat applies the model's chat template (ChatML: ``simulator.chat_template``, the same bytes the product
renders for native mode). Streams follow the protocol note §3.1 exactly: a role chunk, content deltas (a step
that adds no text sends nothing), a separate finish chunk with an empty delta, the usage chunk when
``stream_options.include_usage`` is set, then ``[DONE]``. ``id`` is the SGLang rid.
``usage.prompt_tokens_details`` is ``{"cached_tokens": N}`` only with ``--enable-cache-report``.

Chat also takes SGLang's tools (``simulator.tools``, parsed with ``--tool-call-parser qwen``),
``response_format``/``regex``/``ebnf`` (compiled by the engine, ``simulator.grammar``), ``logprobs``
with ``top_logprobs``, and ``n`` (§10.1-§10.4): ``n`` requests with their own rids, streamed
interleaved with every finish chunk after the last choice ended.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from simulator import tokenizer as tok
from simulator.chat_template import final_assistant_message, render_chatml
from simulator.engine import DISCONNECT_POLL_S, Engine, GenerateInput, Handle, RequestError, Snapshot
from simulator.prose import Plan
from simulator.sampling import SchemaError, parse_priority, parse_sampling_params, stop_list
from simulator.sse import DONE, SSE_HEADERS, event, openai_error, openai_stream_error
from simulator.tools import (
    StreamParser,
    ToolRequestError,
    ToolSetup,
    normalize_history,
    parse_calls,
    parse_tools,
    plan_tool_array,
    plan_tool_turn,
    render_with_tools,
)
from simulator.vision import ImageError, check_media, splice_images, with_markers


@dataclass
class OpenAICall:
    inps: list[GenerateInput]
    model: str
    include_usage: bool
    continuous_usage: bool
    #: Parse qwen <tool_call> blocks into tool_calls (a parser is configured and tools are in play).
    tools: ToolSetup | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    #: The images' pad tokens (usage.prompt_tokens_details.image_tokens); the markers are not counted.
    image_tokens: int = 0

    @property
    def inp(self) -> GenerateInput:
        return self.inps[0]


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
        ("logit_bias", "logit_bias"),
        ("regex", "regex"),
        ("ebnf", "ebnf"),
    ):
        if body.get(src) is not None:
            sp[dst] = body[src]
    return sp


def _response_format_schema(body: dict[str, Any]) -> str | None:
    """`response_format` as SGLang turns it into a json_schema string (or None for text)."""
    rf = body.get("response_format")
    if rf is None:
        return None
    if not isinstance(rf, dict) or not isinstance(rf.get("type"), str):
        raise SchemaError("response_format must be an object with a `type`")
    kind = rf["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    if kind == "json_schema":
        spec = rf.get("json_schema")
        if spec is not None and not isinstance(spec, dict):
            raise SchemaError("response_format.json_schema must be an object")
        holder = spec if spec is not None else rf
        if "strict" in holder and not isinstance(holder["strict"], bool):
            raise SchemaError("response_format.json_schema.strict: Input should be a valid boolean")
        schema = holder.get("schema", holder.get("schema_"))
        if schema is None:
            raise SchemaError("schema_ is required for json_schema response format request.")
        return json.dumps(schema)
    if kind == "structural_tag":
        raise SchemaError("`response_format` of type structural_tag is not supported by the simulated engine")
    raise SchemaError(f"Invalid response_format type {json.dumps(kind)}: expected text, json_object or json_schema")


def _parse_common(body: Any, *, chat: bool) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise SchemaError("invalid request: expected a JSON object")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise SchemaError(f"n must be a positive integer, got {json.dumps(n)}.")
    if not chat:
        if n not in (None, 1):
            raise SchemaError("n > 1 is not supported on /v1/completions by the simulated engine")
        if body.get("logprobs") not in (None, False, 0):
            raise SchemaError("logprobs are not supported on /v1/completions by the simulated engine")
    for name in ("functions", "function_call") if chat else ("tools",):
        if body.get(name):
            raise SchemaError(f"`{name}` is not supported by the simulated engine")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise SchemaError("stream_options must be an object")
    return options


def logprob_entries(dists: list[list[tuple[int, float]]], ids: list[int], top: int) -> list[dict[str, Any]]:
    """OpenAI chat `logprobs.content` entries for output tokens (bytes from the token id)."""

    def one(token: int, logprob: float) -> dict[str, Any]:
        raw = tok.token_bytes(token, skip_special_tokens=False)
        return {"token": raw.decode("utf-8", errors="replace"), "bytes": list(raw), "logprob": logprob}

    out = []
    for token, dist in zip(ids, dists, strict=False):
        chosen = dict(dist).get(token, dist[-1][1] if dist else 0.0)
        out.append({**one(token, chosen), "top_logprobs": [one(t, lp) for t, lp in dist[:top]]})
    return out


class OpenAIAPI:
    def __init__(self, engine: Engine, defaults: dict[str, float]) -> None:
        self.engine = engine
        self.defaults = defaults
        self.cfg = engine.config

    # -- parsing ----------------------------------------------------------------------------------

    def _call(self, body: Any, *, chat: bool) -> OpenAICall:
        options = _parse_common(body, chat=chat)
        text: str | None
        setup: ToolSetup | None = None
        plan = None
        grammar_fields: dict[str, Any] = {}
        if chat:
            messages = body.get("messages")
            if (
                not isinstance(messages, list)
                or not messages
                or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
            ):
                raise SchemaError("`messages` must be a non-empty list of {role, content} objects")
            schema = _response_format_schema(body)
            if schema is not None:
                grammar_fields["json_schema"] = schema
            for name in ("regex", "ebnf"):
                if body.get(name) is not None:
                    grammar_fields[name] = body[name]
            described = ", ".join(("response_format" if k == "json_schema" else k) for k in grammar_fields)
            setup = parse_tools(body, bool(grammar_fields), described)
            images = check_media(messages, multimodal=self.cfg.enable_multimodal)
            messages = normalize_history(messages)
            continuing = body.get("continue_final_message", False)
            if not isinstance(continuing, bool):
                raise SchemaError("`continue_final_message` must be a boolean")
            with_tools = setup.rendered()
            shown = with_markers(messages) if images else messages
            shown, prefix = final_assistant_message(shown, continuing)
            if with_tools or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages):
                text = render_with_tools(shown, with_tools)
            else:
                text = render_chatml(shown)
            text += prefix or ""
            if setup.active:
                plan = self._tool_plan(setup, messages)
            text, prompt_ids = splice_images(text, images)
            image_tokens = sum(image.cells for image in images)
        else:
            image_tokens = 0
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                text, prompt_ids = prompt, tok.encode(prompt)
            elif isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
                text, prompt_ids = None, list(prompt)
            else:
                raise SchemaError("`prompt` must be a string or a list of token ids (batches are not supported)")
            if body.get("json_schema") is not None:
                grammar_fields["json_schema"] = body["json_schema"]
        sp = _sampling(body, len(prompt_ids), self.cfg.context_length, None if chat else 16, self.defaults)
        sp.update(grammar_fields)
        rid = body.get("rid")
        if rid is not None and not isinstance(rid, str):
            raise SchemaError("`rid` must be a string")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise SchemaError("`stream` must be a boolean")
        logprobs = body.get("logprobs") is True
        top = body.get("top_logprobs")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
            raise SchemaError(f"top_logprobs must be a non-negative integer, got {json.dumps(top)}.")
        n = body.get("n") or 1
        priority = parse_priority(body)
        inps = []
        for j in range(n):
            params = parse_sampling_params(sp, self.defaults)
            params.return_logprob = logprobs
            inps.append(
                GenerateInput(
                    prompt_ids=prompt_ids,
                    params=params,
                    rid=(rid if n == 1 else f"{rid}_{j}") if rid else None,
                    stream=stream,
                    prompt_text=text,
                    priority=priority,
                    plan=plan,
                    choice_index=j,
                )
            )
        return OpenAICall(
            inps=inps,
            model=str(body.get("model") or self.cfg.served_model_name),
            include_usage=bool(options.get("include_usage")),
            continuous_usage=bool(options.get("continuous_usage_stats")),
            tools=setup if setup is not None and setup.active and self.cfg.tool_call_parser else None,
            logprobs=logprobs,
            top_logprobs=(top or 0) if logprobs else 0,
            image_tokens=image_tokens,
        )

    def _tool_plan(self, setup: ToolSetup, messages: list[dict[str, Any]]) -> Plan:
        forced = setup.choice == "required" or setup.named is not None
        if self.cfg.tool_call_parser or not forced:
            return lambda rng: plan_tool_turn(setup, messages, rng)
        # No parser: SGLang constrains required/named output to a JSON array of calls, left in `content`.
        return lambda rng: plan_tool_array(setup, messages, rng)

    async def _parse(self, request: Request, *, chat: bool) -> OpenAICall | Response:
        origin = self.engine.trace_origin(request.headers)
        if not _content_type_ok(request):
            return openai_error(400, "Unsupported Media Type: Only 'application/json' is allowed")
        try:
            body = json.loads(await request.body())
            call = self._call(body, chat=chat)
        except (ValueError, SchemaError, ToolRequestError, ImageError) as exc:
            return openai_error(400, str(exc))
        if origin is not None:
            origin.sampling = self._traced_sampling(body, chat=chat)
            for inp in call.inps:
                inp.trace = origin
        return call

    def _traced_sampling(self, body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
        """The sampling_params SGLang's OpenAI layer hands its tokenizer manager (what traces report):
        chat fills temperature/top_p/top_k from the model's generation config or OpenAI's defaults,
        completions from the request's own field defaults."""

        def given(name: str, default: Any) -> Any:
            value = body.get(name)
            return default if value is None else value

        if chat:
            return {
                "max_new_tokens": body.get("max_completion_tokens") or body.get("max_tokens"),
                "temperature": given("temperature", self.defaults.get("temperature", 1.0)),
                "top_p": given("top_p", self.defaults.get("top_p", 1.0)),
                "top_k": given("top_k", -1),
                "n": given("n", 1),
            }
        return {
            "max_new_tokens": given("max_tokens", 16),
            "temperature": given("temperature", 1.0),
            "top_p": given("top_p", 1.0),
            "top_k": given("top_k", -1),
            "n": given("n", 1),
        }

    # -- shared pieces --------------------------------------------------------------------------------

    def usage(self, handle: Handle, completion_tokens: int, image_tokens: int = 0) -> dict[str, Any]:
        req = handle.req
        details = {"cached_tokens": req.cached_tokens or 0} if self.cfg.enable_cache_report else None
        if image_tokens:
            # SGLang reports image tokens whenever there are some, even without --enable-cache-report.
            details = {"cached_tokens": (details or {}).get("cached_tokens", 0), "image_tokens": image_tokens}
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

    async def _submit_all(self, call: OpenAICall) -> list[Handle]:
        handles: list[Handle] = []
        try:
            for inp in call.inps:
                handles.append(await self.engine.submit(inp))
        except RequestError:
            for handle in handles:
                self.engine.release(handle)
            raise
        return handles

    # -- chat -----------------------------------------------------------------------------------------

    def _chat_choice(self, call: OpenAICall, index: int, handle: Handle, snap: Snapshot) -> dict[str, Any]:
        reason, matched = self.finish_fields(handle)
        text = handle.text_at(snap)
        message: dict[str, Any] = {"role": "assistant", "content": text, "reasoning_content": None}
        if call.tools is not None:
            normal, calls = parse_calls(text, call.tools.names())
            message["content"] = normal
            if calls:
                message["tool_calls"] = calls
                if reason == "stop":
                    reason, matched = "tool_calls", None
        logprobs = None
        if call.logprobs:
            ids = handle.ids_at(snap)
            logprobs = {"content": logprob_entries(handle.req.token_dists, ids, call.top_logprobs)}
        return {
            "index": index,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": reason,
            "matched_stop": matched,
        }

    async def chat_completions(self, request: Request) -> Response:
        call = await self._parse(request, chat=True)
        if isinstance(call, Response):
            return call
        if call.inp.stream:
            return StreamingResponse(self._chat_stream(call), media_type="text/event-stream", headers=SSE_HEADERS)
        try:
            handles = await self._submit_all(call)
        except RequestError as exc:
            return openai_error(exc.status, exc.message)
        snaps: list[Snapshot] = []
        try:
            for handle in handles:
                snap = await self._await_final(handle, request)
                if snap is None:
                    return Response(status_code=499)
                snaps.append(snap)
        except RequestError as exc:
            return openai_error(exc.status, exc.message)
        finally:
            for handle in handles:
                self.engine.release(handle)
        usage = self.usage(handles[0], sum(s.n_ids for s in snaps), call.image_tokens)
        return JSONResponse(
            {
                "id": handles[0].req.rid,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": call.model,
                "choices": [
                    self._chat_choice(call, j, h, s) for j, (h, s) in enumerate(zip(handles, snaps, strict=True))
                ],
                "usage": usage,
                "metadata": {"weight_version": "default"},
            }
        )

    async def _chat_stream(self, call: OpenAICall) -> AsyncIterator[bytes]:
        handles: list[Handle] = []
        created = int(time.time())
        pumps: list[asyncio.Task[None]] = []
        try:
            handles = await self._submit_all(call)
            queue: asyncio.Queue[tuple[int, Snapshot | None, RequestError | None]] = asyncio.Queue()

            async def pump(j: int, handle: Handle) -> None:
                try:
                    while True:
                        snap = await handle.wait()
                        if snap is None:
                            continue
                        await queue.put((j, snap, None))
                        if snap.finished:
                            return
                except RequestError as exc:
                    await queue.put((j, None, exc))

            pumps = [asyncio.ensure_future(pump(j, h)) for j, h in enumerate(handles)]
            n = len(handles)
            sent_text, sent_ids = [0] * n, [0] * n
            started = [False] * n
            latest_ids = [0] * n
            parsers = [StreamParser(call.tools.names()) if call.tools is not None else None for _ in range(n)]
            finals: dict[int, Snapshot] = {}

            def chunk(
                j: int,
                delta: dict[str, Any],
                finish: str | None = None,
                matched: Any = None,
                logprobs: Any = None,
                *,
                parser_path: bool = False,
            ) -> bytes:
                body: dict[str, Any] = {
                    "id": handles[j].req.rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": call.model,
                    "choices": [
                        {
                            "index": j,
                            "delta": delta,
                            "logprobs": logprobs,
                            "finish_reason": finish,
                            "matched_stop": matched,
                        }
                    ],
                }
                if call.continuous_usage:
                    body["usage"] = self.usage(handles[0], sum(latest_ids), call.image_tokens)
                elif parser_path:
                    body["usage"] = None
                return event(body)

            def new_logprobs(j: int, upto: int) -> Any:
                if not call.logprobs or upto <= sent_ids[j]:
                    return None
                ids = handles[j].req.output_ids[sent_ids[j] : upto]
                dists = handles[j].req.token_dists[sent_ids[j] : upto]
                sent_ids[j] = upto
                return {"content": logprob_entries(dists, ids, call.top_logprobs)}

            while len(finals) < n:
                j, snap, error = await queue.get()
                if error is not None:
                    raise error
                assert snap is not None  # nosec B101  # pump puts a snapshot or an error
                handle = handles[j]
                latest_ids[j] = snap.n_ids
                if not started[j]:
                    started[j] = True
                    yield chunk(j, {"reasoning_content": None, "role": "assistant", "content": ""})
                text = handle.text_at(snap)
                new = text[sent_text[j] :] if len(text) > sent_text[j] else ""
                sent_text[j] = max(sent_text[j], len(text))
                parser = parsers[j]
                if parser is None:
                    if new:
                        yield chunk(
                            j, {"reasoning_content": None, "content": new}, logprobs=new_logprobs(j, snap.n_ids)
                        )
                else:
                    for delta in parser.feed(new, final=snap.finished):
                        full = {"role": None, "content": None, "reasoning_content": None, **delta}
                        if "tool_calls" not in delta:
                            full = {"role": None, "content": delta["content"], "reasoning_content": None}
                        yield chunk(j, full, logprobs=new_logprobs(j, snap.n_ids), parser_path=True)
                if snap.finished:
                    finals[j] = snap
            for j in range(n):
                reason, matched = self.finish_fields(handles[j])
                parser = parsers[j]
                if parser is not None and parser.calls and reason == "stop":
                    reason, matched = "tool_calls", None
                yield chunk(j, {"reasoning_content": None}, reason, matched, logprobs=new_logprobs(j, finals[j].n_ids))
            if call.include_usage:
                yield event(
                    {
                        "id": handles[0].req.rid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": call.model,
                        "choices": [],
                        "usage": self.usage(handles[0], sum(s.n_ids for s in finals.values()), call.image_tokens),
                    }
                )
        except RequestError as exc:
            yield openai_stream_error(exc.status, exc.message)
        finally:
            for task in pumps:
                task.cancel()
            for handle in handles:
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
