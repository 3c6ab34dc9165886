"""The events a generation stream yields.

One type, :class:`GenerationEvent`, so every consumer reads the same three attributes:

- ``text``: the new answer text in this event ("" if none);
- ``usage``: the token counts so far (prompt, cached, completion), on every event once the engine
  has reported them (native ``/generate`` chunks carry them from the first chunk on; OpenAI streams
  only at the end), so a consumer that stops early or meets an error still knows what was produced;
- ``finish_reason``: "" until the last event, then "stop", "length" or "abort".

The last event of a stream that ends normally (or is cancelled by this client) carries the finish
reason, the :class:`Finish` details, and the final usage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class Usage:
    """Token counts of one generation, cumulative.

    ``cached_tokens`` is the prompt prefix served from SGLang's radix cache; it is 0 when the engine
    does not report it (OpenAI mode against a server without ``--enable-cache-report``).
    ``partial`` is True when the stream was cut short and these are the figures of the last chunk
    received, not the engine's final count.
    """

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    partial: bool = False
    #: The prompt's image tokens (already in ``prompt_tokens``), as a vision model's engine reports them.
    image_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Finish:
    """How the answer ended.

    ``reason`` is normalized to stop / length / abort; ``raw`` is what the engine said (native: a dict
    such as ``{"type": "stop", "matched": 151645}``; OpenAI: a string such as ``"tool_calls"``);
    ``matched`` is the stop string or token id that ended it, if any; ``rid`` is the engine's request
    id (through the gateway's chat route, the chunk id).
    """

    reason: FinishReason
    raw: Any = None
    matched: str | int | None = None
    rid: str = ""


@dataclass(frozen=True)
class ChoiceDelta:
    """What one chunk added to one choice, as OpenAI's chat chunks carry it: for requests that use
    what only the OpenAI-compatible route offers (tools, logprobs, n choices, grammars).

    ``tool_calls`` and ``logprobs`` are the engine's own delta objects, passed on as they came:
    SGLang's function-call parser has already turned the model's markup into OpenAI's shape.
    """

    index: int = 0
    content: str = ""
    #: OpenAI tool-call deltas: the first of a call has its id and name, later ones argument fragments.
    tool_calls: tuple[dict[str, Any], ...] = ()
    #: The new tokens' entries of ``logprobs.content``.
    logprobs: tuple[dict[str, Any], ...] = ()
    #: This choice's finish as the engine said it ("stop", "length", "tool_calls"), on its last delta.
    finish_reason: str | None = None

    @property
    def arguments(self) -> str:
        """The tool-call argument text this delta adds (screened by moderation like any output)."""
        return "".join(str((call.get("function") or {}).get("arguments") or "") for call in self.tool_calls)


@dataclass(frozen=True)
class GenerationEvent:
    """One step of a streamed answer."""

    text: str = ""
    usage: Usage | None = None
    finish_reason: str = ""
    #: Set on the last event only.
    finish: Finish | None = None
    #: The engine's request id, once known.
    rid: str = ""
    #: Per-choice deltas, for requests on the OpenAI route that asked for them (``text`` is then
    #: every choice's new content together).
    deltas: tuple[ChoiceDelta, ...] = ()


def merged_deltas(deltas: Iterable[ChoiceDelta]) -> tuple[ChoiceDelta, ...]:
    """Deltas read together as one per choice, in the order the choices first appear: content and
    logprobs joined, each tool call's fragments joined into one call delta, the last finish. A client
    reading OpenAI's chunks expects each choice once per chunk (many read only ``choices[0]``)."""
    by_index: dict[int, ChoiceDelta] = {}
    for delta in deltas:
        last = by_index.get(delta.index)
        by_index[delta.index] = (
            delta
            if last is None
            else ChoiceDelta(
                index=delta.index,
                content=last.content + delta.content,
                tool_calls=_joined_calls(last.tool_calls, delta.tool_calls),
                logprobs=last.logprobs + delta.logprobs,
                finish_reason=delta.finish_reason or last.finish_reason,
            )
        )
    return tuple(by_index.values())


def _joined_calls(calls: tuple[dict[str, Any], ...], more: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    """Tool-call deltas in order, a fragment joined to the call before it when both have its index:
    its id, type and name are the first given, its arguments all of theirs."""
    joined = list(calls)
    for call in more:
        previous = joined[-1] if joined else None
        if previous is None or previous.get("index") != call.get("index"):
            joined.append(call)
            continue
        before, after = previous.get("function") or {}, call.get("function") or {}
        joined[-1] = {
            **previous,
            "id": previous.get("id") or call.get("id"),
            "type": previous.get("type") or call.get("type"),
            "function": {
                "name": before.get("name") or after.get("name"),
                "arguments": (before.get("arguments") or "") + (after.get("arguments") or ""),
            },
        }
    return tuple(joined)


def normalize_finish(kind: Any) -> FinishReason:
    """SGLang's finish type or OpenAI's finish_reason, as stop / length / abort."""
    if kind in ("length", "abort"):
        return kind
    return "stop"  # stop, and the OpenAI extras (tool_calls, content_filter, function_call)
