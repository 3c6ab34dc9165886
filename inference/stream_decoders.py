"""Turn SGLang's streamed chunks into the client's events: one decoder per wire format.

Both decoders are pure (no I/O), so the rules about SGLang's formats live in one place:

- native ``/generate`` chunks carry ``text``, ``output_ids`` and ``meta_info``. By default every chunk
  is *cumulative* (the whole text so far); with the server flag ``--incremental-streaming-output``
  each chunk carries only the new text, and no request field tells which. The decoder tells them
  apart from the chunk itself: in a cumulative chunk ``len(output_ids) == meta_info.completion_tokens``,
  in an incremental one (after the first) it is smaller. Older releases' ``--stream-output`` made only
  ``output_ids`` incremental; a chunk whose ids look incremental but whose text extends the text so far
  is therefore read as cumulative text. Once decided, the mode is kept for the rest of the stream.
  A chunk whose text has not grown (an incomplete UTF-8 sequence, text held back while it may be
  the start of a stop string) yields nothing.
- OpenAI chat chunks always carry deltas; the finish comes in its own chunk, then usage in a final
  chunk with ``choices: []`` when ``stream_options.include_usage`` was asked for; cached tokens only
  when the server runs with ``--enable-cache-report`` (otherwise 0 is reported).

Errors inside a stream (an event with a top-level ``error`` key, or a native abort carrying an HTTP
status) become typed exceptions here.

The bytes come in as the network gives them: :class:`EventReader` turns each read into the payloads it
completes (many, when the reader is behind the engine; one per token when it keeps up), and
:func:`joined` makes the events of one read one event, so everything after the client does its
per-event work once per read rather than once per token.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from inference.errors import EngineError, EngineUnavailable, error_for_status
from inference.events import ChoiceDelta, Finish, GenerationEvent, Usage, merged_deltas, normalize_finish

CANCELLED = {"type": "abort", "message": "Cancelled by the client"}
#: The most an unfinished line may hold: an engine that never ends one is broken, not slow.
MAX_LINE_BYTES = 32 * 2**20
#: What EventReader.feed returns for ``data: [DONE]``.
DONE = None


class EventReader:
    """The ``data:`` payloads of a server-sent event stream, from its bytes as they are read.

    SGLang sends each event as one ``data:`` line, so a payload is dispatched as soon as its line is
    complete; a ``data:`` line that is not JSON on its own waits for the event's next lines (the
    specification's multi-line form), and a blank line ends it. Comments and other fields are
    ignored; so is a payload that is not a JSON object."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[dict[str, Any] | None]:
        """The payloads ``chunk`` completes, in order; :data:`DONE` for ``[DONE]``, which ends them."""
        buffer = self._buffer
        end = chunk.rfind(b"\n")  # only the new bytes are searched: a long line is not scanned again and again
        if end < 0:
            buffer += chunk
            if len(buffer) > MAX_LINE_BYTES:
                raise EngineUnavailable(f"the engine sent a line longer than {MAX_LINE_BYTES} bytes")
            return []
        end += len(buffer)
        buffer += chunk
        lines = bytes(buffer[:end]).split(b"\n")
        del buffer[: end + 1]
        payloads: list[dict[str, Any] | None] = []
        data = self._data
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
                joined = data[0] if len(data) == 1 else b"\n".join(data)
                if joined.strip() == b"[DONE]":
                    payloads.append(DONE)
                    return payloads
                try:
                    payload = orjson.loads(joined)
                except orjson.JSONDecodeError:
                    continue  # a multi-line event: wait for its remaining lines
                data.clear()
                if isinstance(payload, dict):
                    payloads.append(payload)
            elif not line:
                data.clear()
        return payloads

    def close(self) -> list[dict[str, Any] | None]:
        """At the end of the stream: the payload of a last line that was never ended, if any."""
        return self.feed(b"\n") if self._buffer else []


def joined(events: list[GenerationEvent]) -> GenerationEvent:
    """Events read together as one: their text in order, their deltas one per choice, and the last
    one's counts, finish and request id (only the last of a stream's events has a finish)."""
    if len(events) == 1:
        return events[0]
    last = events[-1]
    usage = next((e.usage for e in reversed(events) if e.usage is not None), None)
    return GenerationEvent(
        text="".join(e.text for e in events),
        usage=usage,
        finish_reason=last.finish_reason,
        finish=last.finish,
        rid=last.rid or next((e.rid for e in reversed(events) if e.rid), ""),
        deltas=merged_deltas(d for e in events for d in e.deltas),
    )


def error_from_payload(error: Any, *, default_status: int = 500) -> EngineError:
    """The typed exception for an in-stream ``{"error": ...}`` payload.

    0.5.23 sends ``{"message", "type", "code", "retryable"}``; ~0.5.3 only ``{"message"}`` (an
    internal failure unless it says otherwise)."""
    if isinstance(error, dict):
        message = str(error.get("message") or error.get("type") or error)
        code = error.get("code")
    else:
        message, code = str(error), None
    status = code if isinstance(code, int) and not isinstance(code, bool) else default_status
    return error_for_status(status, message)


class NativeStreamDecoder:
    """Decodes ``data:`` payloads of a native ``/generate`` stream."""

    def __init__(self) -> None:
        self.text = ""
        self._cumulative: bool | None = None  # None until a chunk decides
        self.usage: Usage | None = None
        self.rid = ""
        self.finished = False

    def decode(self, payload: dict[str, Any]) -> list[GenerationEvent]:
        if "error" in payload:
            raise error_from_payload(payload["error"])
        meta = payload.get("meta_info") or {}
        self.rid = str(meta.get("id") or self.rid)
        finish = meta.get("finish_reason")
        if isinstance(finish, dict) and finish.get("type") == "abort":
            status = finish.get("status_code")
            if isinstance(status, int) and status >= 400:  # a server-side abort with an error status
                raise error_for_status(status, str(finish.get("message") or "aborted by the server"))
        delta = self._delta(payload, meta)
        self._update_usage(meta)
        if finish:
            self.finished = True
            kind = finish.get("type") if isinstance(finish, dict) else finish
            matched = finish.get("matched") if isinstance(finish, dict) else None
            end = Finish(normalize_finish(kind), raw=finish, matched=matched, rid=self.rid)
            return [GenerationEvent(delta, self.usage, end.reason, end, self.rid)]
        if not delta:
            return []  # no visible progress (held-back stop-string prefix, unfinished UTF-8)
        return [GenerationEvent(delta, self.usage, rid=self.rid)]

    def cancelled(self) -> GenerationEvent:
        """The end of a stream this client cut: an abort, with the counts as of the last chunk."""
        usage = None
        if self.usage is not None:
            usage = dataclasses.replace(self.usage, partial=True)
        return GenerationEvent("", usage, "abort", Finish("abort", raw=CANCELLED, rid=self.rid), self.rid)

    def _delta(self, payload: dict[str, Any], meta: dict[str, Any]) -> str:
        chunk_text = payload.get("text") or ""
        if not isinstance(chunk_text, str):
            return ""
        if self._cumulative is None and self.text:
            ids = payload.get("output_ids")
            completion = meta.get("completion_tokens")
            if isinstance(ids, list) and isinstance(completion, int):
                ids_cumulative = len(ids) == completion
            else:
                ids_cumulative = chunk_text.startswith(self.text)
            self._cumulative = ids_cumulative or chunk_text.startswith(self.text)
        if self._cumulative is False:
            self.text += chunk_text
            return chunk_text
        # Cumulative (or still undecided: before any text, both readings agree).
        delta = chunk_text[len(self.text) :] if chunk_text.startswith(self.text) else ""
        if len(chunk_text) >= len(self.text):
            self.text = chunk_text
        return delta

    def _update_usage(self, meta: dict[str, Any]) -> None:
        prompt = meta.get("prompt_tokens")
        completion = meta.get("completion_tokens")
        cached = meta.get("cached_tokens")
        previous = self.usage
        if not isinstance(prompt, int):
            prompt = previous.prompt_tokens if previous else None
        if not isinstance(cached, int):
            cached = previous.cached_tokens if previous else 0
        if not isinstance(completion, int):
            completion = previous.completion_tokens if previous else 0
        if prompt is not None:
            self.usage = Usage(prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion)
        elif previous is not None:
            # A chunk without prompt_tokens (an abort in the waiting queue) still counts completions.
            self.usage = Usage(previous.prompt_tokens, previous.cached_tokens, completion)


class OpenAIStreamDecoder:
    """Decodes ``data:`` payloads of a ``/v1/chat/completions`` (or ``/v1/completions``) stream.

    The finish arrives in its own chunk and the usage after it, so the finish is held back and
    emitted together with the usage (or at ``[DONE]`` when no usage comes): the last event has both.
    """

    def __init__(self, *, choices: bool = False) -> None:
        #: Keep every choice's deltas (tool calls, logprobs, n > 1) on the events; otherwise only the
        #: first choice's text is read.
        self.choices = choices
        self.text = ""
        self.usage: Usage | None = None
        self.rid = ""
        self.finished = False
        self._finish: Finish | None = None
        self._emitted_finish = False

    def decode(self, payload: dict[str, Any]) -> list[GenerationEvent]:
        if "error" in payload:
            raise error_from_payload(payload["error"])
        self.rid = str(payload.get("id") or self.rid)
        delta = ""
        deltas: list[ChoiceDelta] = []
        for choice in payload.get("choices") or []:
            index = choice.get("index", 0)
            if index != 0 and not self.choices:
                continue
            # Chat chunks carry a delta; completion chunks carry the new text directly.
            content = (choice.get("delta") or {}).get("content") if "delta" in choice else choice.get("text")
            if isinstance(content, str):
                delta += content
            raw = choice.get("finish_reason")
            if raw and self._finish is None:
                self._finish = Finish(normalize_finish(raw), raw=raw, matched=choice.get("matched_stop"), rid=self.rid)
                self.finished = True
            if self.choices:
                part = _choice_delta(choice, content)
                if part is not None:
                    deltas.append(part)
        self.text += delta
        usage = payload.get("usage")
        if isinstance(usage, dict):  # the final usage chunk (or every chunk with continuous_usage_stats)
            details = usage.get("prompt_tokens_details") or {}
            details = details if isinstance(details, dict) else {}
            self.usage = Usage(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                cached_tokens=int(details.get("cached_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                image_tokens=int(details.get("image_tokens") or 0),
            )
        events: list[GenerationEvent] = []
        if delta or deltas:
            events.append(GenerationEvent(delta, self.usage, rid=self.rid, deltas=tuple(deltas)))
        if self._finish is not None and self.usage is not None and not payload.get("choices"):
            events += self.end()
        return events

    @property
    def complete(self) -> bool:
        """True once the finish and the usage have both been emitted."""
        return self._emitted_finish and self.usage is not None

    def end(self) -> list[GenerationEvent]:
        """At ``[DONE]`` (or once the usage came): the held-back finish, with whatever usage there is."""
        if self._finish is None or self._emitted_finish:
            return []
        self._emitted_finish = True
        return [GenerationEvent("", self.usage, self._finish.reason, self._finish, self.rid)]

    def cancelled(self) -> GenerationEvent:
        """The end of a stream this client cut (OpenAI streams carry no counts before the end)."""
        return GenerationEvent("", self.usage, "abort", Finish("abort", raw="abort", rid=self.rid), self.rid)


def _choice_delta(choice: dict[str, Any], content: Any) -> ChoiceDelta | None:
    """One choice of a chunk as a ChoiceDelta, or None when it adds nothing (a role-only chunk)."""
    index = choice.get("index", 0)
    delta = choice.get("delta") or {}
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    logprobs = choice.get("logprobs")
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    part = ChoiceDelta(
        index=index if isinstance(index, int) and not isinstance(index, bool) else 0,
        content=content if isinstance(content, str) else "",
        tool_calls=tuple(c for c in calls if isinstance(c, dict)) if isinstance(calls, list) else (),
        logprobs=tuple(e for e in entries if isinstance(e, dict)) if isinstance(entries, list) else (),
        finish_reason=choice.get("finish_reason") or None,
    )
    if not (part.content or part.tool_calls or part.logprobs or part.finish_reason):
        return None
    return part
