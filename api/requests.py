"""Reading an OpenAI-style chat completion request, with errors that say what is wrong.

Only what the product supports is accepted; anything else is refused by name, so a program never
gets a silently different answer from the one it asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from config.refusals import BadInput
from config.text import shortened, shown

ROLES = {"system", "developer", "user", "assistant"}
SUPPORTED_FIELDS = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "n",
    "stream",
    "stream_options",
    "user",
}
#: Fields that do not change the answer, accepted and ignored.
IGNORED_FIELDS = {"metadata", "store", "service_tier", "parallel_tool_calls"}
#: Sampling fields not offered here: accepted only at their neutral value, refused otherwise.
NEUTRAL_ONLY = {"frequency_penalty": (None, 0, 0.0), "presence_penalty": (None, 0, 0.0), "logit_bias": (None, {})}
MAX_STOP_SEQUENCES = 4


class InvalidRequest(BadInput):
    """A 400 naming the offending parameter (OpenAI's `error.param`)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message, param=param)
        self.param = param


@dataclass
class CompletionRequest:
    model: str
    messages: list[dict]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    user: str = ""


def _number(body: dict, name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequest(f"'{name}' must be a number.", name)
    if not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be between {low:g} and {high:g}, not {value:g}.", name)
    return float(value)


def _integer(body: dict, name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"'{name}' must be a whole number.", name)
    if value < low:
        raise InvalidRequest(f"'{name}' must be at least {low}.", name)
    return value


def _content(message: dict, index: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise InvalidRequest(
                    "Only text content parts ({'type': 'text', 'text': ...}) are supported.",
                    f"messages[{index}].content",
                )
            parts.append(part["text"])
        return "".join(parts)
    raise InvalidRequest(
        "Each message needs 'content': a string or a list of text parts.", f"messages[{index}].content"
    )


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list of {'role', 'content'} objects.", "messages")
    cleaned = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest("Each message must be an object with 'role' and 'content'.", f"messages[{index}]")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:  # a list or an object would not hash
            raise InvalidRequest(
                f"'role' must be one of {', '.join(sorted(ROLES))}, not {shown(role)}.", f"messages[{index}].role"
            )
        # SGLang's chat templates know system, user and assistant; "developer" is OpenAI's new name for system.
        cleaned.append({"role": "system" if role == "developer" else role, "content": _content(message, index)})
    if cleaned[-1]["role"] == "assistant":
        raise InvalidRequest(
            "The last message must not be from the assistant: there is nothing to answer.",
            f"messages[{len(cleaned) - 1}]",
        )
    return cleaned


def _stop(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise InvalidRequest("'stop' must be a non-empty string or a list of them.", "stop")
    if len(stop) > MAX_STOP_SEQUENCES:
        raise InvalidRequest(f"At most {MAX_STOP_SEQUENCES} stop sequences are allowed.", "stop")
    return stop


def parse(body: object) -> CompletionRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    for name, neutral in NEUTRAL_ONLY.items():
        if name in body and body[name] not in neutral:
            raise InvalidRequest(f"'{name}' is not supported by this server; leave it out.", name)
    unknown = set(body) - SUPPORTED_FIELDS - IGNORED_FIELDS - set(NEUTRAL_ONLY)
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidRequest(f"'{shortened(name)}' is not supported by this server.", shortened(name))
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required: one of the ids GET /v1/models lists.", "model")
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise InvalidRequest("Only n=1 is supported.", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be true or false.", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest("'stream_options' must be an object.", "stream_options")
    if options and not stream:
        raise InvalidRequest("'stream_options' is only allowed with 'stream': true.", "stream_options")
    include_usage = bool((options or {}).get("include_usage", False))
    max_tokens = _integer(body, "max_completion_tokens", 1)
    legacy_max = _integer(body, "max_tokens", 1)
    user = body.get("user", "")
    if not isinstance(user, str):
        raise InvalidRequest("'user' must be a string.", "user")
    return CompletionRequest(
        model=model,
        messages=_messages(body),
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens if max_tokens is not None else legacy_max,
        temperature=_number(body, "temperature", 0, 2),
        top_p=_number(body, "top_p", 0, 1),
        stop=_stop(body),
        seed=_integer(body, "seed", 0),
        user=user[:256],
    )
