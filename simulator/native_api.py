"""SGLang's native ``/generate`` (streaming and not) and ``/abort_request``.

Response shapes follow the protocol note §1 and §2: cumulative chunks by default (each carries all
text and ids so far), incremental with ``--incremental-streaming-output``; ``meta_info`` with
prompt/completion/cached tokens from the first chunk on; the finish reason on the last chunk; then
``data: [DONE]``. Errors after the stream opened arrive as one ``{"error": …}`` event and ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from simulator import tokenizer as tok
from simulator.engine import DISCONNECT_POLL_S, Engine, GenerateInput, Handle, RequestError, Snapshot
from simulator.sampling import SchemaError, parse_priority, parse_sampling_params
from simulator.sse import DONE, SSE_HEADERS, event, native_error, native_stream_error


def parse_generate(body: Any, defaults: dict[str, float]) -> GenerateInput:
    """Validate a /generate body. Unknown top-level keys are ignored, as in SGLang."""
    if not isinstance(body, dict):
        raise SchemaError("invalid type: expected a JSON object")
    given = [k for k in ("text", "input_ids", "input_embeds") if body.get(k) is not None]
    if len(given) != 1:
        raise SchemaError("Exactly one of `text`, `input_ids` or `input_embeds` must be given.")
    if given[0] == "input_embeds":
        raise SchemaError("`input_embeds` is not supported by the simulated engine")
    text: str | None = None
    if given[0] == "text":
        if not isinstance(body["text"], str):
            raise SchemaError("batch requests (a list of prompts) are not supported by the simulated engine")
        text = body["text"]
        prompt_ids = tok.encode(text)
    else:
        ids = body["input_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise SchemaError("`input_ids` must be a list of integers (batches are not supported)")
        prompt_ids = list(ids)
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise SchemaError("`rid` must be a string (batches are not supported)")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise SchemaError("invalid type for `stream`: expected a boolean")
    if body.get("return_logprob"):
        raise SchemaError("`return_logprob` is not supported by the simulated engine")
    namespace = body.get("extra_key") or body.get("cache_salt")
    log_metrics = body.get("log_metrics", True) is not False
    return GenerateInput(
        prompt_ids=prompt_ids,
        params=parse_sampling_params(body.get("sampling_params"), defaults),
        rid=rid or None,
        stream=stream,
        namespace=str(namespace) if namespace else None,
        log_metrics=log_metrics,
        prompt_text=text,
        priority=parse_priority(body),
    )


def meta_info(handle: Handle, snap: Snapshot, completion_tokens: int) -> dict[str, Any]:
    req = handle.req
    if req.finish and req.finish.get("message") == "Abort in waiting queue":
        return {
            "id": req.rid,
            "finish_reason": req.finish,
            "weight_version": "default",
            "e2e_latency": _e2e(handle),
            "completion_tokens": 0,
        }
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finish if snap.finished else None,
        "prompt_tokens": len(req.prompt_ids),
        "weight_version": "default",
        "num_retractions": req.retractions,
        "reasoning_tokens": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": req.cached_tokens or 0,
    }
    if snap.finished:
        meta["e2e_latency"] = _e2e(handle)
        meta["response_sent_to_client_ts"] = time.time()
    return meta


def _e2e(handle: Handle) -> float:
    req = handle.req
    return round((req.finished_at or time.monotonic()) - req.created, 6)


class NativeAPI:
    def __init__(self, engine: Engine, defaults: dict[str, float]) -> None:
        self.engine = engine
        self.defaults = defaults

    async def generate(self, request: Request) -> Response:
        origin = self.engine.trace_origin(request.headers)
        try:
            body = json.loads(await request.body())
            inp = parse_generate(body, self.defaults)
        except (ValueError, SchemaError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        if origin is not None:
            # SGLang's tokenizer manager holds sampling_params as the client sent them.
            sampling = body.get("sampling_params")
            origin.sampling = sampling if isinstance(sampling, dict) else {}
            inp.trace = origin
        if inp.stream:
            return StreamingResponse(self._stream(inp), media_type="text/event-stream", headers=SSE_HEADERS)
        return await self._complete(inp, request)

    async def _complete(self, inp: GenerateInput, request: Request) -> Response:
        try:
            handle = await self.engine.submit(inp)
        except RequestError as exc:
            return native_error(exc.status, exc.message)
        try:
            while True:
                snap = await handle.wait(timeout=DISCONNECT_POLL_S)
                if snap is not None and snap.finished:
                    break
                if snap is None and await request.is_disconnected():
                    return Response(status_code=499)  # nobody is listening; the finally aborts it
        except RequestError as exc:
            return native_error(exc.status, exc.message)
        finally:
            self.engine.release(handle)
        ids = handle.ids_at(snap)
        return JSONResponse(
            {"text": handle.text_at(snap), "output_ids": ids, "meta_info": meta_info(handle, snap, len(ids))}
        )

    async def _stream(self, inp: GenerateInput) -> AsyncIterator[bytes]:
        handle: Handle | None = None
        incremental = self.engine.config.incremental_streaming_output
        sent_ids = sent_text = 0
        try:
            handle = await self.engine.submit(inp)
            while True:
                snap = await handle.wait()
                if snap is None:
                    continue
                ids, text = handle.ids_at(snap), handle.text_at(snap)
                chunk = {
                    "text": text[sent_text:] if incremental else text,
                    "output_ids": ids[sent_ids:] if incremental else ids,
                    "meta_info": meta_info(handle, snap, len(ids)),
                }
                sent_ids, sent_text = len(ids), len(text)
                yield event(chunk)
                if snap.finished:
                    break
        except RequestError as exc:
            yield native_stream_error(exc.status, exc.message)
        finally:
            if handle is not None:
                self.engine.release(handle)
        yield DONE

    async def abort_request(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            return native_error(400, str(exc))
        rid = body.get("rid")
        self.engine.abort(rid if isinstance(rid, str) else None, abort_all=body.get("abort_all") is True)
        await asyncio.sleep(0)
        return Response(status_code=200)
