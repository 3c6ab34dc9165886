"""How long each forward pass takes: the simulator's timing model and its speed presets.

A prefill batch costs a fixed launch overhead plus a cost per *uncached* prompt token, so a prefix
cache hit shortens time to first token by exactly the tokens it saves. A decode step costs a fixed
overhead plus a cost per request in the batch plus a cost per token of context attended to, so
inter-token latency rises with load. Running requests wait while a prefill batch runs (SGLang
without mixed chunking), which is why a burst of arrivals stalls streams already running.

The ``realistic`` preset is roughly an 8B model in bf16 on one H100-class GPU: about 20k prefill
tokens/s, ~11 ms per decode step alone, ~20 ms with 64 requests in the batch. ``instant`` charges
nothing (every step yields to the event loop only), for measuring the web tier on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class TimingModel:
    prefill_base_s: float = 0.0
    prefill_per_token_s: float = 0.0
    decode_base_s: float = 0.0
    decode_per_request_s: float = 0.0
    decode_per_context_token_s: float = 0.0
    #: How often /health looks for scheduler output (SGLang: once a second).
    health_poll_s: float = 1.0

    def prefill_time(self, uncached_tokens: int) -> float:
        return self.prefill_base_s + self.prefill_per_token_s * uncached_tokens

    def decode_time(self, batch_size: int, context_tokens: int) -> float:
        return (
            self.decode_base_s
            + self.decode_per_request_s * batch_size
            + self.decode_per_context_token_s * context_tokens
        )

    def with_overrides(self, **overrides: float | None) -> TimingModel:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


SPEED_PRESETS: dict[str, TimingModel] = {
    "instant": TimingModel(health_poll_s=0.02),
    "fast": TimingModel(
        prefill_base_s=0.0005,
        prefill_per_token_s=0.000002,
        decode_base_s=0.001,
        decode_per_request_s=0.00002,
        health_poll_s=0.05,
    ),
    "realistic": TimingModel(
        prefill_base_s=0.005,
        prefill_per_token_s=0.00005,
        decode_base_s=0.011,
        decode_per_request_s=0.00012,
        decode_per_context_token_s=0.0000002,
        health_poll_s=1.0,
    ),
    # Slow enough for a test to act mid-answer (attach, stop, kill), quick enough for a short suite:
    # about 60 tokens/s per stream.
    "slow": TimingModel(
        prefill_base_s=0.02,
        prefill_per_token_s=0.0001,
        decode_base_s=0.015,
        decode_per_request_s=0.0002,
        health_poll_s=0.05,
    ),
    # Slow enough to watch: about 25 tokens/s per stream.
    "demo": TimingModel(
        prefill_base_s=0.05,
        prefill_per_token_s=0.0002,
        decode_base_s=0.04,
        decode_per_request_s=0.0005,
        health_poll_s=0.2,
    ),
}
