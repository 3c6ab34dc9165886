"""Parsing ``sampling_params`` the way SGLang 0.5.23 does: a strict schema, model defaults.

Unknown keys are refused, types are checked strictly (a bool is not an int), and keys the request
leaves out come from the model's ``generation_config.json`` (SGLang's ``--sampling-defaults
model``). Ranges and their messages are SGLang's (protocol note §10.5). Grammars
(``json_schema``/``regex``/``ebnf``) are kept for the engine, which compiles them when the request is
queued (``simulator.grammar``). The simulated sampler applies temperature, top_p, top_k and min_p to
its word choices; the penalties and ``logit_bias`` are checked and accepted but change nothing,
because the simulated model has no vocabulary-wide logits for them to act on. ``structural_tag``,
``stop_regex`` and ``custom_params`` are refused with a clear 400 rather than silently ignored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.request import SamplingParams
from simulator.tokenizer import vocab_size

KNOWN_KEYS = (
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "logit_bias",
    "sampling_seed",
    "stream_interval",
    "custom_params",
)
UNSUPPORTED = ("structural_tag", "stop_regex", "custom_params")
GRAMMARS = ("json_schema", "regex", "ebnf", "structural_tag")


class SchemaError(ValueError):
    """The request body does not match the schema (SGLang answers 400 {"error": "<text>"})."""


def model_defaults(model_path: str) -> dict[str, float]:
    """temperature/top_p from the model's generation_config.json, as SGLang's default mode reads them."""
    path = Path(model_path) / "generation_config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(data[k]) for k in ("temperature", "top_p") if isinstance(data.get(k), int | float)}


def _int(name: str, value: Any, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"invalid type for `{name}`: {json.dumps(value)}, expected an integer")
    if minimum is not None and value < minimum:
        raise SchemaError(f"invalid value for `{name}`: {value}, expected at least {minimum}")
    return value


def _float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SchemaError(f"invalid type for `{name}`: {json.dumps(value)}, expected a number")
    return float(value)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SchemaError(f"invalid type for `{name}`: {json.dumps(value)}, expected a boolean")
    return value


def stop_list(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise SchemaError(f"invalid type for `{name}`: expected a string or a list of strings")


def parse_sampling_params(raw: Any, defaults: dict[str, float]) -> SamplingParams:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SchemaError("invalid type for `sampling_params`: expected an object")
    for key in raw:
        if key not in KNOWN_KEYS:
            raise SchemaError(f"unknown field `{key}`, expected one of {', '.join(f'`{k}`' for k in KNOWN_KEYS)}")
    p = SamplingParams(temperature=defaults.get("temperature", 1.0), top_p=defaults.get("top_p", 1.0))
    get = raw.get
    if get("max_new_tokens") is not None:
        p.max_new_tokens = _int("max_new_tokens", raw["max_new_tokens"], minimum=0)
    if get("temperature") is not None:
        p.temperature = _float("temperature", raw["temperature"])
        if p.temperature < 0:
            raise SchemaError("temperature must be non-negative")
    if get("top_p") is not None:
        p.top_p = _float("top_p", raw["top_p"])
        if not 0 < p.top_p <= 1:
            raise SchemaError(f"top_p must be in (0, 1], got {p.top_p}.")
    if get("top_k") is not None:
        p.top_k = _int("top_k", raw["top_k"])
        if p.top_k < 1 and p.top_k != -1:
            raise SchemaError(f"top_k must be -1 (disable), or at least 1, got {p.top_k}.")
    if get("min_p") is not None:
        p.min_p = _float("min_p", raw["min_p"])
        if not 0 <= p.min_p <= 1:
            raise SchemaError(f"min_p must be in [0, 1], got {p.min_p}.")
    for name in ("frequency_penalty", "presence_penalty"):
        if get(name) is not None:
            value = _float(name, raw[name])
            if not -2 <= value <= 2:
                raise SchemaError(f"{name} must be in [-2, 2], got {value}.")
            setattr(p, name, value)
    if get("repetition_penalty") is not None:
        p.repetition_penalty = _float("repetition_penalty", raw["repetition_penalty"])
        if not 0 < p.repetition_penalty <= 2:
            raise SchemaError(f"repetition_penalty must be in (0, 2], got {p.repetition_penalty}.")
    if get("logit_bias") is not None:
        p.logit_bias = parse_logit_bias(raw["logit_bias"])
    if get("min_new_tokens") is not None:
        p.min_new_tokens = _int("min_new_tokens", raw["min_new_tokens"], minimum=0)
    p.stop = stop_list("stop", get("stop"))
    if get("stop_token_ids") is not None:
        ids = raw["stop_token_ids"]
        if not isinstance(ids, list):
            raise SchemaError("invalid type for `stop_token_ids`: expected a list of integers")
        p.stop_token_ids = {_int("stop_token_ids", i) for i in ids}
    for name in ("ignore_eos", "skip_special_tokens", "no_stop_trim"):
        if get(name) is not None:
            setattr(p, name, _bool(name, raw[name]))
    if get("spaces_between_special_tokens") is not None:
        _bool("spaces_between_special_tokens", raw["spaces_between_special_tokens"])
    if get("sampling_seed") is not None:
        p.sampling_seed = _int("sampling_seed", raw["sampling_seed"])
    if get("stream_interval") is not None:
        p.stream_interval = _int("stream_interval", raw["stream_interval"], minimum=1)
    if get("n") is not None and _int("n", raw["n"], minimum=1) != 1:
        raise SchemaError("n > 1 is not supported on /generate by the simulated engine (use a batch of rids)")
    for name in UNSUPPORTED:
        if get(name) not in (None, {}, ""):
            raise SchemaError(f"`{name}` is not supported by the simulated engine")
    grammars = [name for name in GRAMMARS if get(name) not in (None, "")]
    if len(grammars) > 1:
        raise SchemaError("Only one of json_schema, regex, ebnf, or structural_tag can be set.")
    if grammars:
        value = raw[grammars[0]]
        if not isinstance(value, str):
            raise SchemaError(f"invalid type for `{grammars[0]}`: expected a string")
        p.grammar = ({"json_schema": "json"}.get(grammars[0], grammars[0]), value)
    if p.temperature == 0:
        p.top_p = 1.0
    return p


def parse_logit_bias(value: Any) -> dict[int, float]:
    """`{"<token id>": bias}`; an id outside the vocabulary is SGLang's 400."""
    if not isinstance(value, dict):
        raise SchemaError("invalid type for `logit_bias`: expected an object of token id -> bias")
    size = vocab_size()
    out: dict[int, float] = {}
    for key, bias in value.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise SchemaError(f"invalid key for `logit_bias`: {json.dumps(key)}, expected a token id") from None
        if not 0 <= token < size:
            raise SchemaError(f"logit_bias must has keys in [0, {size - 1}], got {token}.")
        out[token] = _float("logit_bias", bias)
    return out


def parse_priority(body: dict) -> int | None:
    """SGLang's request `priority`: an integer, or absent."""
    priority = body.get("priority")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
        raise SchemaError("`priority` must be an integer")
    return priority
