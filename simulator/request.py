"""One generation request inside the simulated engine, and its sampling parameters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator import tokenizer as tok
from simulator.prose import ProseModel
from simulator.radix_cache import Node

#: SGLang clips the per-request output estimate used for admission at this many tokens.
CLIP_MAX_NEW_TOKENS = 4096


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    min_new_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: set[int] = field(default_factory=set)
    ignore_eos: bool = False
    no_stop_trim: bool = False
    skip_special_tokens: bool = True
    sampling_seed: int | None = None
    stream_interval: int | None = None
    #: The request's grammar, ("json" | "regex" | "ebnf", its text), compiled when the request is queued.
    grammar: tuple[str, str] | None = None
    #: Record each output token's distribution (chat `logprobs`, /generate `return_logprob`).
    return_logprob: bool = False
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)


@dataclass(eq=False)
class Req:
    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    model: ProseModel
    stream: bool = False
    namespace: str | None = None
    log_metrics: bool = True
    arrival: int = 0  # admission order key (FCFS); retracted requests keep theirs
    priority: int | None = None  # SGLang's request priority (with --enable-priority-scheduling)
    # -- progress --
    output_ids: list[int] = field(default_factory=list)
    #: Per output token, the distribution it was drawn from (only with return_logprob).
    token_dists: list[list[tuple[int, float]]] = field(default_factory=list)
    finish: dict[str, Any] | None = None
    to_abort: bool = False
    cached_tokens: int | None = None  # set once, at the first prefill
    retractions: int = 0
    # -- memory --
    prefix_node: Node | None = None  # locked path in the radix cache
    kv_private: int = 0  # KV tokens held outside the tree
    fill_len: int = 0  # tokens computed by the latest prefill
    # -- text --
    text: str = ""
    _detok: tok.IncrementalDetokenizer | None = None
    stop_cut: int | None = None  # where a matched stop string starts in `text`
    # -- times (engine clock) --
    created: float = 0.0
    forward_entry: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    # -- delivery --
    notify: Callable[[Req], None] | None = None
    #: Its spans (a simulator.tracing.ReqTrace) with --enable-trace, else None.
    trace: Any = None

    @property
    def finished(self) -> bool:
        return self.finish is not None

    @property
    def fill_ids(self) -> list[int]:
        """What a prefill has to compute: the prompt, plus the output so far after a retraction."""
        return self.prompt_ids + self.output_ids

    def reserve(self) -> int:
        """Output tokens this request may still need (SGLang's clipped estimate)."""
        return max(0, min(self.params.max_new_tokens, CLIP_MAX_NEW_TOKENS) - len(self.output_ids))

    def add_token(self, token: int) -> None:
        if self._detok is None:
            self._detok = tok.IncrementalDetokenizer(skip_special_tokens=self.params.skip_special_tokens)
        self.output_ids.append(token)
        if self.params.return_logprob:
            self.token_dists.append(self.model.last_dist)
        self._detok.add(token)
        self.text = self._detok.text

    def visible_text(self) -> str:
        """The text the client may see: cut before a matched stop string unless no_stop_trim."""
        if self.stop_cut is not None and not self.params.no_stop_trim:
            return self.text[: self.stop_cut]
        return self.text

    def find_stop_string(self, new_chars: int) -> str | None:
        """A stop string that ends within the newest ``new_chars`` characters; records where it starts."""
        longest = max((len(s) for s in self.params.stop), default=0)
        if not longest:
            return None
        window_start = max(0, len(self.text) - new_chars - longest + 1)
        best: tuple[int, str] | None = None
        for stop in self.params.stop:
            if not stop:
                continue
            at = self.text.find(stop, window_start)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, stop)
        if best is None:
            return None
        self.stop_cut = best[0]
        return best[1]

    def tail_may_start_stop(self) -> bool:
        """True while the text ends with the beginning of a stop string (output is held back)."""
        for stop in self.params.stop:
            for k in range(min(len(stop) - 1, len(self.text)), 0, -1):
                if self.text.endswith(stop[:k]):
                    return True
        return False
