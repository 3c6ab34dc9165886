"""An async client for one SGLang endpoint: a server, an SGLang Model Gateway (``smg``), or the simulator.

Two modes, one event type (:class:`inference.events.GenerationEvent`: ``.text``, ``.usage``,
``.finish_reason``; usage rides on every event once known, the last event carries the finish):

- ``mode="native"`` streams ``POST /generate``. Chat messages are rendered with a chat template first
  (``chatml`` by default, the simulator's and Qwen's; see :mod:`inference.chat_templates`), because
  ``/generate`` applies none. Usage (prompt, cached, completion tokens) rides on every chunk.
- ``mode="openai"`` streams ``POST /v1/chat/completions`` (or ``/v1/completions`` for a raw prompt)
  with ``stream_options.include_usage``; the server applies its own template. Cached tokens are
  reported only by servers started with ``--enable-cache-report`` (0 otherwise).

Stopping a generation: straight to a server, ``cancel(rid)`` posts ``/abort_request`` and closes the
stream; behind the gateway (``behind_gateway=True``, which has no ``/abort_request``) it closes the
connection, which smg passes upstream and SGLang treats as an abort. Cancelling the task that consumes
:meth:`SGLangClient.generate_stream`, breaking out of it, or leaving ``async with client`` does the same.
A cancelled stream ends with an event whose finish_reason is "abort", carrying (natively) the counts
of the last chunk.

The routing key (a conversation's key, for the gateway's sticky ``manual`` policy) goes on the wire only
to the gateway, and only as a fixed-length digest (:func:`routing_key_header`): the key may be an API
caller's own text, and a header with a line break, a byte past ASCII or 10 KB in it cannot be sent.

Deadlines (:class:`Timeouts`) are per phase: connecting, the first token (counted from sending the
request, so it includes time queued on the engine), the gap between later tokens, and optionally
the whole generation. Failures are the typed errors of :mod:`inference.errors`.

The client takes everything as arguments and reads no settings, so it can be built from Django
settings, from a node row, or in a script.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import hashlib
import logging
import ssl
import struct
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from inference.chat_templates import ChatTemplate, get_template, render_continuing
from inference.errors import (
    EngineBadRequest,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    error_for_status,
    gettext_noop,
    parse_retry_after,
)
from inference.events import Finish, GenerationEvent, Usage
from inference.loads import EngineLoad, from_get_load, from_metrics, from_v1_loads
from inference.stream_decoders import DONE, EventReader, NativeStreamDecoder, OpenAIStreamDecoder, joined

__all__ = [
    "EmbeddingResult",
    "EngineLoad",
    "Finish",
    "GenerationEvent",
    "GenerationRequest",
    "GenerationResult",
    "SGLangClient",
    "Timeouts",
    "Usage",
]

log = logging.getLogger(__name__)

ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
#: Hex digits of the routing key's digest on the wire (128 bits).
ROUTING_KEY_DIGITS = 32
#: A non-streamed generation with no ``total`` deadline still gets this one.
NON_STREAMED_DEFAULT_TOTAL = 600.0


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed for each phase of a call."""

    #: Opening the TCP connection.
    connect: float = 5.0
    #: From sending a generation request to its first token (includes queueing on the engine).
    first_token: float = 120.0
    #: Between one streamed chunk and the next.
    between_tokens: float = 60.0
    #: A whole generation, streamed or not (None: no bound for streams, 600 s for non-streamed calls).
    total: float | None = None
    #: Control calls: health, load, info, abort.
    control: float = 10.0


@dataclass
class GenerationRequest:
    """What to generate. Give ``messages`` (chat) or ``prompt`` (raw text, no template)."""

    messages: list[Mapping[str, Any]] | None = None
    prompt: str | None = None
    #: Sent in OpenAI mode (a single-model SGLang server or gateway accepts any name).
    model: str = "default"
    max_new_tokens: int = 512
    #: None: the model's defaults (SGLang reads them from the model's generation_config.json).
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    #: The engine's request id; never a prefix of another live one (SGLang aborts by prefix).
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: Keeps a conversation on one worker: behind the gateway, its digest is sent as X-SMG-Routing-Key
    #: (the manual policy's sticky key); straight to a server, nothing is sent.
    routing_key: str | None = None
    #: SGLang's request priority (honoured by servers started with --enable-priority-scheduling;
    #: larger values first by default). None: not sent.
    priority: int | None = None
    #: Fields of SGLang's OpenAI-compatible request (tools, tool_choice, response_format, logprobs, n,
    #: penalties, SGLang's regex/ebnf/top_k...), sent as they are. A request with any of them, or with
    #: tool-call turns or content parts (images) in its messages, goes to ``/v1/chat/completions``
    #: whatever the client's mode: that route is where SGLang parses tool calls, applies the grammars
    #: and runs the model's image processor, and its events then
    #: carry every choice's deltas (:class:`inference.events.ChoiceDelta`).
    openai_fields: Mapping[str, Any] | None = None
    #: Streamed natively: after the first token, a chunk every this many tokens (SGLang's per-request
    #: ``stream_interval``; None: the server's ``--stream-interval``). The OpenAI route has no such field.
    stream_interval: int | None = None
    #: The last message is the assistant's unfinished answer, to be written on from where it stops
    #: (SGLang's ``continue_final_message``); the new text alone comes back.
    continue_final_message: bool = False

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("give exactly one of messages or prompt")

    @property
    def needs_openai_route(self) -> bool:
        # Content parts (images) too: only the chat route runs the model's image processor.
        return bool(self.openai_fields) or any(
            m.get("role") == "tool" or m.get("tool_calls") or isinstance(m.get("content"), list)
            for m in self.messages or ()
        )


@dataclass(frozen=True)
class GenerationResult:
    """A whole, non-streamed answer."""

    text: str
    finish: Finish
    usage: Usage | None
    rid: str

    @property
    def finish_reason(self) -> str:
        return self.finish.reason

    @property
    def matched_stop(self) -> str | int | None:
        return self.finish.matched


@dataclass(frozen=True)
class EmbeddingResult:
    """The vectors of one ``/v1/embeddings`` call, in the order of the inputs."""

    vectors: list[list[float]]
    #: The engine's count of the inputs' tokens (its usage.prompt_tokens).
    prompt_tokens: int
    #: What the engine calls the model (SGLang answers its model path, not the name asked for).
    model: str


class _Cancelled(Exception):
    """Internal: cancel() was called for a stream; it ends with finish_reason "abort"."""


@dataclass(eq=False)
class _LiveStream:
    """A generation in progress, so that cancel() and aclose() can reach it."""

    rid: str
    cancelled: bool = False
    #: The deadline the consumer is waiting under; cancel() moves it to now to wake the consumer.
    timer: asyncio.Timeout | None = None

    def interrupt(self) -> None:
        self.cancelled = True
        if self.timer is not None and not self.timer.expired():
            self.timer.reschedule(asyncio.get_running_loop().time())


class _ReadFailed(EngineError):
    """Reading a stream failed in this client, not on the engine: no node is blamed, nothing retried."""

    node_at_fault = False


class _Relay:
    """Reads one engine stream on a task of its own, so the answer's reader takes at once whatever
    arrived while it was busy: the network hands over one chunk per token (the HTTP response's
    chunks), and a reader that relayed each on its own would pay the whole path per token.

    What is read and not yet taken is bounded: past ``MAX_UNREAD_BYTES`` the task stops reading (and
    the engine is held back by the connection, as it would be by a slow reader) until it is taken."""

    MAX_UNREAD_BYTES = 4 * 2**20

    def __init__(self, response: httpx.Response) -> None:
        self.payloads: list[dict[str, Any] | None] = []
        self.unread_bytes = 0
        #: Set when there are payloads to take, or the stream has ended.
        self.ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.ended = False
        self.error: EngineError | None = None
        self.task = asyncio.get_running_loop().create_task(self._read(response))

    async def _read(self, response: httpx.Response) -> None:
        reader = EventReader()
        try:
            async for chunk in response.aiter_bytes():
                self.unread_bytes += len(chunk)
                if self._add(reader.feed(chunk)):
                    return
                if self.payloads and self.unread_bytes > self.MAX_UNREAD_BYTES:
                    self._room.clear()
                    await self._room.wait()
            self._add(reader.close())  # a last line the engine did not end
        except httpx.HTTPError as exc:
            self.error = EngineUnavailable(f"the stream broke: {exc!r}")
        except EngineError as exc:
            self.error = exc
        except Exception as exc:  # this client's own failure: the reader is told, the node is not blamed
            log.exception("reading an engine stream failed")
            self.error = _ReadFailed(f"reading the stream failed: {exc!r}")
            self.error.__cause__ = exc
        finally:
            self.ended = True
            self.ready.set()

    def _add(self, payloads: list[dict[str, Any] | None]) -> bool:
        """Keep payloads for the reader; True once the stream's end ([DONE]) is among them."""
        if not payloads:
            return False
        self.payloads += payloads
        self.ready.set()
        return payloads[-1] is DONE

    def take(self) -> list[dict[str, Any] | None]:
        payloads, self.payloads = self.payloads, []
        self.unread_bytes = 0
        self._room.set()
        return payloads

    async def close(self) -> None:
        if not self.task.done():
            self.task.cancel()
            await asyncio.wait([self.task])


class SGLangClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        mode: Literal["native", "openai"] = "native",
        behind_gateway: bool = False,
        timeouts: Timeouts | None = None,
        chat_template: str | ChatTemplate = "chatml",
        transport: httpx.AsyncBaseTransport | None = None,
        keepalive_connections: int = 20,
    ) -> None:
        if mode not in ("native", "openai"):
            raise ValueError(f"mode must be 'native' or 'openai', not {mode!r}")
        self.base_url = base_url.rstrip("/")
        self.mode = mode
        self.behind_gateway = behind_gateway
        self.timeouts = timeouts or Timeouts()
        self.template = get_template(chat_template)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        t = self.timeouts
        # Reads have no httpx deadline: the phase deadlines below bound them (a slow answer is not an error).
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            transport=transport,
            verify=_tls_context(),
            timeout=httpx.Timeout(connect=t.connect, read=None, write=t.control, pool=t.connect),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=keepalive_connections),
        )
        self._live: dict[str, _LiveStream] = {}
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> SGLangClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Abort every generation still streaming, then close the connections."""
        if self._closed:
            return
        for live in list(self._live.values()):
            await self._abort_on_engine(live.rid)
            live.interrupt()
        self._closed = True
        await self._http.aclose()

    # -- generation -------------------------------------------------------------------------------

    async def generate_stream(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Yield the answer's events; the last one has the finish reason and the final usage."""
        if self._closed:
            raise EngineError("the client is closed")
        if request.rid in self._live:
            raise EngineBadRequest(f"Duplicate request ID detected: {request.rid}")
        path, body = self._build(request, stream=True)
        live = self._live[request.rid] = _LiveStream(request.rid)
        decoder: NativeStreamDecoder | OpenAIStreamDecoder
        if request.needs_openai_route:
            decoder = OpenAIStreamDecoder(choices=True)
        else:
            decoder = NativeStreamDecoder() if self.mode == "native" else OpenAIStreamDecoder()
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = start + self.timeouts.total if self.timeouts.total is not None else None
        response: httpx.Response | None = None
        relay: _Relay | None = None
        done = False
        try:
            try:
                response = await self._open_stream(path, body, request, live, start + self.timeouts.first_token, end)
                relay = _Relay(response)
                first_deadline: float | None = start + self.timeouts.first_token
                while (payloads := await self._next_payloads(relay, live, first_deadline, end)) is not None:
                    first_deadline = None  # a payload came: from now on, the gap between tokens
                    # Everything that arrived while the reader was busy is one event: under load the
                    # engine's chunks queue up, and each is then relayed for a share of one event's cost.
                    events, error = _decoded(decoder, payloads)
                    if events:  # what came before an error was written too, and is the reader's
                        yield joined(events)
                    if error is not None:
                        raise error
                    if DONE in payloads or _ended(decoder):
                        break
                if not decoder.finished:
                    raise EngineUnavailable("the engine ended the stream before the answer was finished")
                done = True
            except _Cancelled:
                done = True
                # What the engine sent before the stop took effect is the reader's, and its last chunk
                # may be the engine's own end of the request, with the final counts.
                events, _ = _decoded(decoder, relay.take() if relay is not None else [])
                if events:
                    yield joined(events)
                if not decoder.finished:
                    yield decoder.cancelled()
        finally:
            self._live.pop(request.rid, None)
            try:
                if relay is not None:
                    await relay.close()  # before the response: it may be mid-read
                if not done and not live.cancelled:
                    # The consumer left early (break, task cancelled) or the stream failed: stop the engine too.
                    await self._abort_on_engine(request.rid)
            finally:
                if response is not None:
                    await response.aclose()

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """The whole answer in one response (``stream: false``)."""
        path, body = self._build(request, stream=False)
        live = self._live.setdefault(request.rid, _LiveStream(request.rid))
        total = self.timeouts.total or NON_STREAMED_DEFAULT_TOTAL
        try:
            async with asyncio.timeout(total) as timer:
                live.timer = timer
                response = await self._http.post(path, json=body, headers=self.headers_for(request))
        except TimeoutError:
            if live.cancelled:
                return GenerationResult("", Finish("abort", raw="cancelled", rid=request.rid), None, request.rid)
            await self._abort_on_engine(request.rid)
            raise EngineTimeout("no answer within the total deadline", phase="total") from None
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        finally:
            self._live.pop(request.rid, None)
        if response.status_code != 200:
            raise _status_error(response)
        data = response.json()
        if self.mode == "native":
            events = NativeStreamDecoder().decode(data)
            text = data.get("text") or ""
            rid = str((data.get("meta_info") or {}).get("id") or request.rid)
        else:
            choice = (data.get("choices") or [{}])[0]
            text = ((choice.get("message") or {}).get("content") if "message" in choice else choice.get("text")) or ""
            decoder = OpenAIStreamDecoder()
            events = decoder.decode({"id": data.get("id"), "choices": [{**choice, "delta": {}}]})
            events += decoder.decode({"id": data.get("id"), "choices": [], "usage": data.get("usage")})
            rid = str(data.get("id") or request.rid)
            events += decoder.end()
        last = events[-1] if events else None
        finish = last.finish if last is not None and last.finish is not None else Finish("stop", rid=rid)
        usage = last.usage if last is not None else None
        return GenerationResult(text, finish, usage, rid)

    async def embed(
        self,
        inputs: list[str] | list[list[int]],
        *,
        model: str = "default",
        dimensions: int | None = None,
        priority: int | None = None,
    ) -> EmbeddingResult:
        """Embed `inputs` (texts, or token-id lists) on an embedding server (``--is-embedding``) with
        SGLang's ``/v1/embeddings``. The vectors travel as base64 float32 (exact, a third of the JSON).
        Bounded by the first-token deadline (queueing included). Failures are the typed errors; a
        generation server's refusal is an EngineBadRequest."""
        body: dict[str, Any] = {"model": model, "input": inputs, "encoding_format": "base64"}
        if dimensions is not None:
            body["dimensions"] = dimensions
        if priority is not None:
            body["priority"] = priority
        try:
            async with asyncio.timeout(self.timeouts.total or self.timeouts.first_token):
                response = await self._http.post("/v1/embeddings", json=body)
        except TimeoutError:
            raise EngineTimeout("no embeddings before the deadline", phase="first_token") from None
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        if response.status_code != 200:
            raise _status_error(response)
        try:
            data = response.json()
            items = sorted(data["data"], key=lambda item: item["index"])
            vectors = [_vector(item["embedding"]) for item in items]
            prompt_tokens = int(data["usage"]["prompt_tokens"])
        except (ValueError, KeyError, TypeError, binascii.Error, struct.error) as exc:
            raise EngineError(f"/v1/embeddings answered in an unknown shape: {exc!r}") from exc
        if len(vectors) != len(inputs):
            raise EngineError(f"/v1/embeddings answered {len(vectors)} vectors for {len(inputs)} inputs")
        return EmbeddingResult(vectors=vectors, prompt_tokens=prompt_tokens, model=str(data.get("model") or model))

    async def cancel(self, rid: str) -> None:
        """Stop a generation on the engine. Its stream (if this client has it) ends with "abort"."""
        await self._abort_on_engine(rid)
        live = self._live.get(rid)
        if live is not None:
            live.interrupt()

    # -- introspection ----------------------------------------------------------------------------

    async def health(self) -> bool:
        """True when the engine is ready to generate: SGLang's ``/health`` (which runs a 1-token probe)
        answers 2xx, or, behind the gateway, ``/readiness`` reports healthy workers. False otherwise,
        including when nothing answers."""
        path = "/readiness" if self.behind_gateway else "/health"
        try:
            response = await self._http.get(path, timeout=self._control_timeout(max(self.timeouts.control, 25)))
        except httpx.HTTPError:
            return False
        return response.is_success

    async def load(self) -> EngineLoad:
        """Running and waiting requests and KV tokens: /v1/loads, else legacy /get_load, else /metrics.
        Behind the gateway: its workers' merged metrics (/engine_metrics)."""
        if self.behind_gateway:
            response = await self._get("/engine_metrics")
            if response.status_code != 200:
                raise _status_error(response)
            return self._parse_metrics(response.text, source="engine_metrics")
        response = await self._get("/v1/loads")
        if response.status_code == 200:
            return from_v1_loads(response.json())
        response = await self._get("/get_load")
        if response.status_code == 200 and isinstance(response.json(), list):
            return from_get_load(response.json())
        response = await self._get("/metrics")
        if response.status_code == 200:
            return self._parse_metrics(response.text, source="metrics")
        raise _status_error(response)

    async def server_info(self) -> dict[str, Any]:
        """The server's resolved arguments and state (/server_info, or /get_server_info on older SGLang)."""
        response = await self._get("/server_info")
        if response.status_code == 404:
            response = await self._get("/get_server_info")
        if response.status_code != 200:
            raise _status_error(response)
        return response.json()

    async def count_tokens(self, text: str, model: str = "default") -> int:
        """How many tokens the engine's own tokenizer makes of `text` (SGLang's ``/v1/tokenize``,
        without special tokens: the count of the text itself)."""
        try:
            response = await self._http.post(
                "/v1/tokenize",
                json={"model": model, "prompt": text, "add_special_tokens": False},
                timeout=self._control_timeout(),
            )
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        if response.status_code != 200:
            raise _status_error(response)
        count = response.json().get("count")
        if isinstance(count, bool) or not isinstance(count, int):
            raise EngineError(f"/v1/tokenize answered without a count: {response.text[:200]}")
        return count

    async def models(self) -> list[str]:
        """The ids of the models served (/v1/models)."""
        response = await self._get("/v1/models")
        if response.status_code != 200:
            raise _status_error(response)
        return [str(card.get("id")) for card in response.json().get("data") or []]

    # -- internals --------------------------------------------------------------------------------

    @staticmethod
    def _parse_metrics(text: str, *, source: str) -> EngineLoad:
        try:
            return from_metrics(text, source=source)
        except ValueError as exc:
            raise EngineError(str(exc)) from exc

    def _control_timeout(self, seconds: float | None = None) -> httpx.Timeout:
        return httpx.Timeout(seconds or self.timeouts.control, connect=self.timeouts.connect)

    async def _get(self, path: str) -> httpx.Response:
        try:
            return await self._http.get(path, timeout=self._control_timeout())
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc

    def headers_for(self, request: GenerationRequest) -> dict[str, str]:
        """The headers of `request` beyond the client's own: its routing key's digest, behind the gateway
        (smg's manual policy reads it; a server would ignore it, so it is not sent there)."""
        if request.routing_key and self.behind_gateway:
            return {ROUTING_KEY_HEADER: routing_key_header(request.routing_key)}
        return {}

    def _build(self, request: GenerationRequest, *, stream: bool) -> tuple[str, dict[str, Any]]:
        if self.mode == "native" and not request.needs_openai_route:
            if request.prompt is not None:
                text = request.prompt
            elif request.continue_final_message:
                text = render_continuing(self.template, list(request.messages or []))
            else:
                text = self.template(list(request.messages or []))
            params: dict[str, Any] = {"max_new_tokens": request.max_new_tokens}
            if request.temperature is not None:
                params["temperature"] = request.temperature
            if request.top_p is not None:
                params["top_p"] = request.top_p
            if request.stop:
                params["stop"] = list(request.stop)
            if request.seed is not None:
                params["sampling_seed"] = request.seed
            if stream and request.stream_interval is not None:
                params["stream_interval"] = request.stream_interval
            native: dict[str, Any] = {"text": text, "sampling_params": params, "stream": stream, "rid": request.rid}
            if request.priority is not None:
                native["priority"] = request.priority
            return "/generate", native
        body: dict[str, Any] = {"model": request.model, "max_tokens": request.max_new_tokens, "stream": stream}
        if stream:
            # Usage on every chunk, as /generate gives it: an answer cut off mid-stream still knows
            # the prompt the engine processed.
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.stop:
            body["stop"] = list(request.stop)
        if request.seed is not None:
            body["seed"] = request.seed
        if request.priority is not None:
            body["priority"] = request.priority
        if request.continue_final_message:
            body["continue_final_message"] = True
        if request.openai_fields:
            body.update(request.openai_fields)
        if not self.behind_gateway and body.get("n", 1) == 1:
            # SGLang's extension: lets /abort_request reach it (smg drops it). With n > 1 the engine
            # gives each choice a fresh rid; closing the stream is then the abort.
            body["rid"] = request.rid
        if request.prompt is not None:
            return "/v1/completions", {**body, "prompt": request.prompt}
        return "/v1/chat/completions", {**body, "messages": [dict(m) for m in request.messages or []]}

    async def _open_stream(
        self,
        path: str,
        body: dict[str, Any],
        request: GenerationRequest,
        live: _LiveStream,
        first_deadline: float,
        end: float | None,
    ) -> httpx.Response:
        http_request = self._http.build_request("POST", path, json=body, headers=self.headers_for(request))
        deadline, phase = _earliest(first_deadline, "first_token", end)
        try:
            async with asyncio.timeout_at(deadline) as timer:
                live.timer = timer
                response = await self._http.send(http_request, stream=True)
        except TimeoutError:
            if live.cancelled:
                raise _Cancelled from None
            raise EngineTimeout("no response headers before the first-token deadline", phase=phase) from None
        except httpx.HTTPError as exc:
            if live.cancelled:
                raise _Cancelled from None
            raise _transport_error(exc) from exc
        finally:
            live.timer = None
        if response.status_code != 200:
            try:
                async with asyncio.timeout(self.timeouts.control):
                    await response.aread()
            except (TimeoutError, httpx.HTTPError):
                pass
            finally:
                await response.aclose()
            raise _status_error(response)
        return response

    async def _next_payloads(
        self, relay: _Relay, live: _LiveStream, first_deadline: float | None, end: float | None
    ) -> list[dict[str, Any] | None] | None:
        """Every payload that arrived since the last call, waiting for one if none has (under the
        first token's deadline until one came, then the gap allowed between tokens); None once the
        stream has ended. One deadline per wait, however many tokens the wait brings."""
        if live.cancelled:
            raise _Cancelled
        if end is not None and asyncio.get_running_loop().time() >= end:
            raise EngineTimeout("no end of the answer before the total deadline", phase="total")
        if not relay.payloads and not relay.ended:
            if first_deadline is not None:
                deadline, phase = _earliest(first_deadline, "first_token", end)
            else:
                now = asyncio.get_running_loop().time()
                deadline, phase = _earliest(now + self.timeouts.between_tokens, "between_tokens", end)
            relay.ready.clear()
            try:
                async with asyncio.timeout_at(deadline) as timer:
                    live.timer = timer
                    await relay.ready.wait()
            except TimeoutError:
                if live.cancelled:
                    raise _Cancelled from None
                raise EngineTimeout(f"no answer before the {phase.replace('_', ' ')} deadline", phase=phase) from None
            finally:
                live.timer = None
        payloads = relay.take()
        if payloads:
            return payloads
        if relay.error is not None:
            if live.cancelled:
                raise _Cancelled
            raise relay.error
        return None

    async def _abort_on_engine(self, rid: str) -> None:
        """POST /abort_request straight to SGLang; behind the gateway there is none (closing is the abort)."""
        if self.behind_gateway or self._closed:
            return
        try:
            await self._http.post("/abort_request", json={"rid": rid}, timeout=self._control_timeout(2.0))
        except (httpx.HTTPError, RuntimeError) as exc:
            log.info("abort of %s not delivered: %r", rid, exc)


def _decoded(
    decoder: NativeStreamDecoder | OpenAIStreamDecoder, payloads: list[dict[str, Any] | None]
) -> tuple[list[GenerationEvent], EngineError | None]:
    """The events of payloads read together, up to the stream's end, and the in-stream error that
    ended them, if one did (the events before it are still the reader's)."""
    events: list[GenerationEvent] = []
    try:
        for payload in payloads:
            if payload is DONE:
                if isinstance(decoder, OpenAIStreamDecoder):
                    events += decoder.end()
                break
            events += decoder.decode(payload)
            if _ended(decoder):
                break
    except EngineError as error:
        return events, error
    return events, None


def _ended(decoder: NativeStreamDecoder | OpenAIStreamDecoder) -> bool:
    """Whether the stream has told all: natively the finish chunk carries the usage; in OpenAI mode
    the usage follows the finish in its own chunk."""
    return decoder.finished and (isinstance(decoder, NativeStreamDecoder) or decoder.complete)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client of the process: making one reads the system's certificates,
    which costs more than a whole short generation."""
    return ssl.create_default_context()


def _vector(value: Any) -> list[float]:
    """One embedding as floats: SGLang's base64 (little-endian float32) or a list of numbers."""
    if isinstance(value, str):
        raw = base64.b64decode(value, validate=True)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    if isinstance(value, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        return [float(x) for x in value]
    raise TypeError("an embedding is a base64 string or a list of numbers")


def _earliest(deadline: float, phase: str, end: float | None) -> tuple[float, Any]:
    """The nearer of a phase deadline and the whole-generation deadline, with the phase to blame."""
    if end is not None and end < deadline:
        return end, "total"
    return deadline, phase


def routing_key_header(key: str) -> str:
    """The value of X-SMG-Routing-Key for a routing key: the first 32 hex digits of its SHA-256.

    Always 32 ASCII characters whatever the key holds (a line break, NUL, any script, lone surrogates,
    10 KB), so it can always be sent; the same key always gives the same value, which is all smg's
    manual policy needs to keep a conversation on one worker. 128 bits make two conversations sharing a
    value practically impossible, and if they did, they would only share a worker. Not a secret: it
    keeps the caller's text (an OpenAI `user` may be an email address) out of the gateway's headers
    and logs, but a guessable key can be guessed from it."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:ROUTING_KEY_DIGITS]


def _unsendable(exc: httpx.LocalProtocolError) -> EngineBadRequest:
    """A request the client could not put on the wire: nothing reached the engine, so it says nothing
    about the node (EngineBadRequest is never counted against a node's health, nor retried)."""
    return EngineBadRequest(
        f"the request could not be sent: {exc!r}",
        user_message=gettext_noop("This request could not be sent to the model server."),
    )


def _transport_error(exc: httpx.HTTPError) -> EngineError:
    if isinstance(exc, httpx.LocalProtocolError):
        return _unsendable(exc)
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return EngineTimeout(f"could not connect in time: {exc!r}", phase="connect")
    if isinstance(exc, httpx.TimeoutException):
        return EngineTimeout(f"timed out: {exc!r}", phase="request")
    if isinstance(exc, httpx.TransportError):
        return EngineUnavailable(f"could not reach the engine: {exc!r}")
    return EngineError(repr(exc))


def _status_error(response: httpx.Response) -> EngineError:
    """The typed error for a non-200 answer, with the engine's own message when it gave one."""
    status = response.status_code
    message = f"HTTP {status}"
    code = None
    body: Any = None
    with contextlib.suppress(Exception):
        body = response.json()
    if isinstance(body, dict):
        # SGLang's shapes: {"error": {"message"}}, {"error": "text"}, {"object": "error", "message"}.
        error = body.get("error", body)
        if isinstance(error, dict):
            message = str(error.get("message") or message)
            code = error.get("code")
        else:
            message = str(error)
    else:
        with contextlib.suppress(Exception):
            message = response.text.strip()[:500] or message
    if code == "no_available_workers":
        # The gateway is up but has no healthy worker behind it: not a busy engine, a missing one.
        return EngineUnavailable(message, status_code=status)
    return error_for_status(status, message, retry_after=parse_retry_after(response.headers.get("retry-after")))
