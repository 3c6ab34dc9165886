"""Reading an OpenAI-style chat completion request, with errors that say what is wrong.

Only what the product supports is accepted; anything else is refused by name, so a program never
gets a silently different answer from the one it asked for.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from config.refusals import BadInput
from config.text import shortened, shown, whole_number
from inference import images

ROLES = {"system", "developer", "user", "assistant", "tool"}
#: What both kinds of completion read: how long, how to sample, how to stream, and SGLang's own
#: extensions (its sampling parameters and grammars, which the SDKs send through `extra_body`, at the
#: top level of the body).
COMMON_FIELDS = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "n",
    "stream",
    "stream_options",
    "user",
    "logprobs",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "top_k",
    "min_p",
    "repetition_penalty",
    "regex",
    "ebnf",
}
#: What a chat completion reads besides: its messages, tools and formats.
SUPPORTED_FIELDS = COMMON_FIELDS | {
    "messages",
    "max_completion_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "top_logprobs",
}
#: What a text completion (/v1/completions) reads: OpenAI's legacy fields besides the common ones.
TEXT_COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "best_of", "echo", "suffix"}
#: OpenAI's default for a text completion that names no max_tokens (SGLang's too).
TEXT_COMPLETION_MAX_TOKENS = 16
#: Fields that do not change the answer, accepted and ignored.
IGNORED_FIELDS = {"metadata", "store", "service_tier"}
#: OpenAI's older names for tools; refused with the new name rather than ignored.
RENAMED = {"functions": "tools", "function_call": "tool_choice"}
MAX_STOP_SEQUENCES = 4
#: OpenAI's own limits.
MAX_TOOLS = 128
MAX_CHOICES = 128
MAX_TOP_LOGPROBS = 20
MAX_LOGIT_BIAS = 300
FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


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
    #: How many choices to write (`n`).
    n: int = 1
    #: The tool definitions offered (validated), also inside `engine_fields`.
    tools: list[dict] = field(default_factory=list)
    #: Whether the answer carries its tokens' log-probabilities.
    logprobs: bool = False
    #: The fields passed to the engine as they are: tools, grammars, logprobs, n, penalties.
    engine_fields: dict[str, Any] = field(default_factory=dict)
    #: A text completion's raw prompt (/v1/completions): continued as it is, with no chat template.
    prompt: str | None = None
    #: A text completion's `echo`: each choice's text starts with the prompt.
    echo: bool = False


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


def _parts(content: list, where: str, role: str) -> str | list[dict]:
    """Content parts: text parts joined into one string, or, with images (user messages only), the
    parts as the engine reads them (text and image_url, in order)."""
    parts: list[dict] = []
    for position, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            if role != "user":
                raise InvalidRequest("Images can only be sent in user messages.", f"{where}[{position}]")
            parts.append(images.read_image_part(part, f"{where}[{position}]"))
        else:
            raise InvalidRequest(
                "Only text and image content parts ({'type': 'text', 'text': ...}, {'type': 'image_url', "
                "'image_url': {'url': 'data:...'}}) are supported.",
                where,
            )
    if any(part["type"] == "image_url" for part in parts):
        return parts
    return "".join(part["text"] for part in parts)


def _content(message: dict, index: int, *, optional: bool = False) -> str | list[dict] | None:
    content = message.get("content")
    where = f"messages[{index}].content"
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _parts(content, where, str(message.get("role")))
    if content is None and optional:
        return None
    raise InvalidRequest("Each message needs 'content': a string or a list of content parts.", where)


def _tool_calls(message: dict, index: int) -> list[dict]:
    """An assistant turn's tool calls, as the engine reads them back (arguments must be JSON)."""
    calls = message.get("tool_calls")
    where = f"messages[{index}].tool_calls"
    if not isinstance(calls, list) or not calls:
        raise InvalidRequest("'tool_calls' must be a non-empty list of calls.", where)
    cleaned = []
    for position, call in enumerate(calls):
        here = f"{where}[{position}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest("Each tool call needs 'function' with a 'name' and 'arguments'.", here)
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            raise InvalidRequest("'arguments' must be a string of JSON.", f"{here}.function.arguments")
        try:
            json.loads(arguments or "{}")
        except ValueError:
            raise InvalidRequest(
                "Assistant tool call function.arguments must be valid JSON.", f"{here}.function.arguments"
            ) from None
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest("Each tool call needs its 'id' (the tool reply's tool_call_id).", f"{here}.id")
        cleaned.append(
            {"id": call_id, "type": "function", "function": {"name": function["name"], "arguments": arguments}}
        )
    return cleaned


def _message(message: dict, index: int) -> dict:
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:  # a list or an object would not hash
        raise InvalidRequest(
            f"'role' must be one of {', '.join(sorted(ROLES))}, not {shown(role)}.", f"messages[{index}].role"
        )
    if role == "assistant" and message.get("tool_calls") is not None:
        # A turn that called tools: its content may be null.
        return {
            "role": "assistant",
            "content": _content(message, index, optional=True),
            "tool_calls": _tool_calls(message, index),
        }
    # "developer" is OpenAI's new name for system; SGLang's templates know system.
    cleaned = {"role": "system" if role == "developer" else role, "content": _content(message, index)}
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest(
                "A 'tool' message needs the 'tool_call_id' of the call it answers.", f"messages[{index}].tool_call_id"
            )
        cleaned["tool_call_id"] = call_id
    return cleaned


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list of {'role', 'content'} objects.", "messages")
    cleaned = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest("Each message must be an object with 'role' and 'content'.", f"messages[{index}]")
        cleaned.append(_message(message, index))
    pictures = sum(len(images.image_urls(m["content"])) for m in cleaned)
    if pictures > settings.API_MAX_IMAGES:
        raise InvalidRequest(
            f"A request may carry at most {settings.API_MAX_IMAGES} images; this one has {pictures}.", "messages"
        )
    if cleaned[-1]["role"] == "assistant":
        raise InvalidRequest(
            "The last message must not be from the assistant: there is nothing to answer.",
            f"messages[{len(cleaned) - 1}]",
        )
    return cleaned


def _tools(body: dict) -> list[dict]:
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be a list of {'type': 'function', 'function': {...}} objects.", "tools")
    if len(tools) > MAX_TOOLS:
        raise InvalidRequest(f"At most {MAX_TOOLS} tools are allowed, not {len(tools)}.", "tools")
    cleaned, names = [], set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise InvalidRequest("Each tool must be {'type': 'function', 'function': {...}}.", where)
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
            raise InvalidRequest(
                "A function's 'name' must be 1 to 64 letters, digits, underscores or dashes.", f"{where}.function.name"
            )
        if name in names:
            raise InvalidRequest(f"Two tools are named '{name}'.", f"{where}.function.name")
        names.add(name)
        kept: dict[str, Any] = {"name": name}
        description = function.get("description")
        if description is not None:
            if not isinstance(description, str):
                raise InvalidRequest("'description' must be a string.", f"{where}.function.description")
            kept["description"] = description
        parameters = function.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise InvalidRequest("'parameters' must be a JSON Schema object.", f"{where}.function.parameters")
            kept["parameters"] = parameters
        strict = function.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise InvalidRequest("'strict' must be true or false.", f"{where}.function.strict")
            kept["strict"] = strict
        cleaned.append({"type": "function", "function": kept})
    return cleaned


def _tool_choice(body: dict, tools: list[dict]) -> str | dict | None:
    choice = body.get("tool_choice")
    if choice is None:
        return None
    names = {tool["function"]["name"] for tool in tools}
    if choice in ("none", "auto"):
        return choice if tools else None  # with nothing offered, both mean a plain answer
    if choice == "required":
        if not tools:
            raise InvalidRequest("Tools cannot be empty if tool choice is set to required.", "tool_choice")
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if not isinstance(name, str):
            raise InvalidRequest("A named tool choice needs 'function': {'name': ...}.", "tool_choice")
        if name not in names:
            raise InvalidRequest(f"Tool '{shortened(name)}' not found in tools list.", "tool_choice")
        return {"type": "function", "function": {"name": name}}
    raise InvalidRequest(
        "'tool_choice' must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}.",
        "tool_choice",
    )


def _response_format(body: dict) -> dict | None:
    """The format the answer must take, as the engine's grammar reads it; None for plain text."""
    value = body.get("response_format")
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise InvalidRequest(
            "'response_format' must be {'type': 'text'}, {'type': 'json_object'} or "
            "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}.",
            "response_format",
        )
    spec = value.get("json_schema")
    if spec is None and isinstance(value.get("schema"), dict):
        spec = {"name": value.get("name") or "response", "schema": value["schema"]}  # SGLang's shorthand
    if not isinstance(spec, dict):
        raise InvalidRequest("'response_format.json_schema' must be an object.", "response_format.json_schema")
    name = spec.get("name")
    if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
        raise InvalidRequest(
            "The schema's 'name' must be 1 to 64 letters, digits, underscores or dashes.",
            "response_format.json_schema.name",
        )
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequest(
            "'response_format.json_schema.schema' is required: the JSON Schema the answer must follow.",
            "response_format.json_schema.schema",
        )
    kept: dict[str, Any] = {"name": name, "schema": schema}
    if spec.get("strict") is not None:
        if not isinstance(spec["strict"], bool):
            raise InvalidRequest("'strict' must be true or false.", "response_format.json_schema.strict")
        kept["strict"] = spec["strict"]
    if isinstance(spec.get("description"), str):
        kept["description"] = spec["description"]
    return {"type": "json_schema", "json_schema": kept}


def _grammar(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"'{name}' must be a non-empty string.", name)
    return value


def _logit_bias(body: dict) -> dict[str, float] | None:
    bias = body.get("logit_bias")
    if bias is None or bias == {}:
        return None
    if not isinstance(bias, dict) or len(bias) > MAX_LOGIT_BIAS:
        raise InvalidRequest(
            f"'logit_bias' must map at most {MAX_LOGIT_BIAS} token ids to a bias from -100 to 100.", "logit_bias"
        )
    for token, value in bias.items():
        if whole_number(token) is None:
            raise InvalidRequest(f"'logit_bias' keys are token ids, not {shown(token)}.", "logit_bias")
        if isinstance(value, bool) or not isinstance(value, int | float) or not -100 <= value <= 100:
            raise InvalidRequest(f"The bias of token {token} must be a number from -100 to 100.", "logit_bias")
    return bias


def _engine_fields(body: dict, tools: list[dict], n: int) -> tuple[dict[str, Any], bool]:
    """What is passed to the engine as it is (its OpenAI-compatible route applies it), and whether
    the answer carries logprobs. Neutral values (false, [], 'text', 0 penalties) are left out."""
    fields: dict[str, Any] = {}
    choice = _tool_choice(body, tools)
    if tools and choice != "none":
        fields["tools"] = tools
        if choice is not None:
            fields["tool_choice"] = choice
        parallel = body.get("parallel_tool_calls")
        if parallel is not None:
            if not isinstance(parallel, bool):
                raise InvalidRequest("'parallel_tool_calls' must be true or false.", "parallel_tool_calls")
            fields["parallel_tool_calls"] = parallel
    response_format = _response_format(body)
    grammars = {name: value for name in ("regex", "ebnf") if (value := _grammar(body, name)) is not None}
    if response_format is not None:
        fields["response_format"] = response_format
    fields.update(grammars)
    if len(grammars) + (response_format is not None) > 1:
        raise InvalidRequest("Only one of response_format (JSON), regex or ebnf can be set.", sorted(grammars)[0])
    if (choice == "required" or isinstance(choice, dict)) and (response_format or grammars):
        raise InvalidRequest(
            "tool_choice 'required' or a named tool cannot be combined with response_format, regex, or ebnf.",
            "tool_choice",
        )
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise InvalidRequest("'logprobs' must be true or false.", "logprobs")
    top = _integer(body, "top_logprobs", 0)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise InvalidRequest(f"'top_logprobs' must be at most {MAX_TOP_LOGPROBS}.", "top_logprobs")
    if top and not logprobs:
        raise InvalidRequest("'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    if logprobs:
        fields["logprobs"] = True
        if top:
            fields["top_logprobs"] = top
    if n > 1:
        fields["n"] = n
    for name in ("presence_penalty", "frequency_penalty"):
        value = _number(body, name, -2, 2)
        if value:
            fields[name] = value
    if (bias := _logit_bias(body)) is not None:
        fields["logit_bias"] = bias
    top_k = _integer(body, "top_k", -1)
    if top_k == 0:
        raise InvalidRequest("'top_k' must be -1 (off) or at least 1.", "top_k")
    if top_k is not None and top_k != -1:
        fields["top_k"] = top_k
    if (min_p := _number(body, "min_p", 0, 1)) is not None:
        fields["min_p"] = min_p
    repetition = _number(body, "repetition_penalty", 0, 2)
    if repetition is not None:
        if repetition == 0:
            raise InvalidRequest("'repetition_penalty' must be above 0 and at most 2.", "repetition_penalty")
        fields["repetition_penalty"] = repetition
    return fields, bool(logprobs)


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


def _present(body: object, known: set[str]) -> dict:
    """The body's fields, explicit nulls left out (as OpenAI treats them; the SDKs send some), every
    one of them known."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    body = {name: value for name, value in body.items() if value is not None}
    for old, new in RENAMED.items():
        if old in body:
            raise InvalidRequest(f"'{old}' is OpenAI's deprecated form; send '{new}' instead.", old)
    unknown = set(body) - known - IGNORED_FIELDS
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidRequest(f"'{shortened(name)}' is not supported by this server.", shortened(name))
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required: one of the ids GET /v1/models lists.", "model")
    return body


def _streaming(body: dict) -> tuple[bool, bool]:
    """(stream, include_usage)."""
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be true or false.", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest("'stream_options' must be an object.", "stream_options")
    if options and not stream:
        raise InvalidRequest("'stream_options' is only allowed with 'stream': true.", "stream_options")
    return stream, bool((options or {}).get("include_usage", False))


def _choices_asked(body: dict) -> int:
    n = _integer(body, "n", 1) or 1
    if n > MAX_CHOICES:
        raise InvalidRequest(f"'n' must be at most {MAX_CHOICES}.", "n")
    return n


def _user(body: dict) -> str:
    user = body.get("user", "")
    if not isinstance(user, str):
        raise InvalidRequest("'user' must be a string.", "user")
    return user[:256]


def parse(body: object) -> CompletionRequest:
    """A `/v1/chat/completions` request, checked."""
    body = _present(body, SUPPORTED_FIELDS)
    n = _choices_asked(body)
    stream, include_usage = _streaming(body)
    max_tokens = _integer(body, "max_completion_tokens", 1)
    legacy_max = _integer(body, "max_tokens", 1)
    messages = _messages(body)
    tools = _tools(body)
    engine_fields, logprobs = _engine_fields(body, tools, n)
    return CompletionRequest(
        model=body["model"],
        messages=messages,
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens if max_tokens is not None else legacy_max,
        n=n,
        **_sampling(body),
        tools=engine_fields.get("tools", []),
        logprobs=logprobs,
        engine_fields=engine_fields,
    )


def _sampling(body: dict) -> dict[str, Any]:
    """The sampling fields both kinds of completion read the same way."""
    return {
        "temperature": _number(body, "temperature", 0, 2),
        "top_p": _number(body, "top_p", 0, 1),
        "stop": _stop(body),
        "seed": _integer(body, "seed", 0),
        "user": _user(body),
    }


def _prompt(body: dict) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        raise InvalidRequest("Send one prompt per request (a string); a list of prompts is not supported.", "prompt")
    if not isinstance(prompt, str) or not prompt:
        raise InvalidRequest("'prompt' must be a non-empty string (token ids are not supported).", "prompt")
    return prompt


def parse_text_completion(body: object) -> CompletionRequest:
    """A `/v1/completions` request (a raw prompt to continue), checked."""
    body = _present(body, TEXT_COMPLETION_FIELDS)
    n = _choices_asked(body)
    best_of = _integer(body, "best_of", 1)
    if best_of is not None and best_of != n:
        raise InvalidRequest("'best_of' other than n is not supported: each choice written is returned.", "best_of")
    if body.get("suffix"):
        raise InvalidRequest("'suffix' (insertion) is not supported by this server.", "suffix")
    if body.get("logprobs"):
        raise InvalidRequest(
            "'logprobs' is not supported on /v1/completions here; /v1/chat/completions has logprobs.", "logprobs"
        )
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise InvalidRequest("'echo' must be true or false.", "echo")
    stream, include_usage = _streaming(body)
    checked = {k: v for k, v in body.items() if k != "logprobs"}
    engine_fields, _ = _engine_fields(checked, [], n)
    max_tokens = _integer(body, "max_tokens", 1)
    return CompletionRequest(
        model=body["model"],
        messages=[],
        prompt=_prompt(body),
        echo=echo,
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens if max_tokens is not None else TEXT_COMPLETION_MAX_TOKENS,
        n=n,
        **_sampling(body),
        engine_fields=engine_fields,
    )
