"""OpenAI's Responses API (`/v1/responses`) as a thin adapter over the chat completion path.

A Responses request is translated into the chat-completion body the API already reads, and read by
`api.requests.parse`, so every rule about models, tools, formats and sampling stays there (its errors
are renamed to the Responses parameter they came from). The driver's deltas are rendered as
Responses output items: a message with one `output_text` part, and a `function_call` item per tool
call, in the order they were written; as events when streamed (`Output`), as one object when not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, cast

from api.requests import CompletionRequest, InvalidRequest, parse
from chat.generation.engine import Usage
from config.refusals import NotFound, Refusal
from config.text import shortened, shown
from config.wire import json_bytes
from inference.events import ChoiceDelta

#: The fields of a Responses request this server reads.
SUPPORTED_FIELDS = {
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "temperature",
    "top_p",
    "max_output_tokens",
    "stream",
    "previous_response_id",
    "store",
    "metadata",
    "user",
    "seed",
}
#: Fields accepted only with the value that asks for what the server does anyway.
NEUTRAL_VALUES: dict[str, Any] = {"include": [], "truncation": "disabled", "background": False}
MESSAGE_ROLES = {"user", "system", "developer", "assistant"}
TEXT_PARTS = {"input_text", "output_text"}
MAX_METADATA_KEYS = 16
RESPONSE_ID = re.compile(r"resp_[0-9a-f]{32}")
#: Chat-completion parameters as the Responses API names them (for errors from `parse`).
RENAMES = (
    ("max_completion_tokens", "max_output_tokens"),
    ("response_format.json_schema", "text.format"),
    ("response_format", "text.format"),
)


class ResponseNotFound(NotFound):
    code = "previous_response_not_found"


@dataclass
class ResponsesRequest:
    """A Responses request, read: the new input as chat messages, and what the response echoes."""

    model: str
    #: The new input in chat-message form (the stored conversation, if any, goes before it).
    messages: list[dict]
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    #: The settings the response object echoes (tools, tool_choice, text, sampling...).
    echo: dict[str, Any] = field(default_factory=dict)
    #: The chat-completion fields besides `model` and `messages` (`parse` reads them).
    chat_fields: dict[str, Any] = field(default_factory=dict)


# -- reading the request ---------------------------------------------------------------------------------


def _text(content: object, where: str) -> str:
    """A message's content: a string, or text parts (`input_text`, and `output_text` of earlier answers)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest("A message's 'content' must be a string or a list of text parts.", where)
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise InvalidRequest(
                f"Only text content parts (input_text, output_text) are supported, not {shown(kind)}.",
                f"{where}[{index}].type",
            )
        if not isinstance(part.get("text"), str):
            raise InvalidRequest("A text part needs its 'text'.", f"{where}[{index}].text")
        texts.append(part["text"])
    return "".join(texts)


def _string(item: dict, name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"'{name}' must be a non-empty string.", f"{where}.{name}")
    return value


def _input_messages(value: object) -> list[dict]:
    """The input as chat messages: function calls join the assistant turn they follow, and each
    function_call_output is a `tool` message answering its call."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidRequest("'input' must be a string or a non-empty list of input items.", "input")
    messages: list[dict] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise InvalidRequest("Each input item must be an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in MESSAGE_ROLES:
                raise InvalidRequest(
                    f"'role' must be one of {', '.join(sorted(MESSAGE_ROLES))}, not {shown(role)}.", f"{where}.role"
                )
            messages.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call = {
                "id": _string(item, "call_id", where),
                "type": "function",
                "function": {"name": _string(item, "name", where), "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _string(item, "call_id", where),
                    "content": output if isinstance(output, str) else _text(output, f"{where}.output"),
                }
            )
        else:
            raise InvalidRequest(
                f"Input items of type {shown(kind)} are not supported: send messages, function_call and "
                "function_call_output items.",
                f"{where}.type",
            )
    return messages


def _tools(value: object) -> list[dict]:
    """Responses' flat function tools as chat tools; any other kind of tool is refused by name."""
    if not isinstance(value, list):
        raise InvalidRequest("'tools' must be a list of function tools.", "tools")
    tools = []
    for index, tool in enumerate(value):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise InvalidRequest(
                f"Tools of type {shown(kind)} are not supported by this server: only 'function' tools are.",
                f"tools[{index}].type",
            )
        function = {name: tool[name] for name in ("name", "description", "parameters", "strict") if name in tool}
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(value: object) -> str | dict:
    if value in ("auto", "none", "required"):
        return value  # type: ignore[return-value]
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    raise InvalidRequest(
        "'tool_choice' must be 'none', 'auto', 'required' or {'type': 'function', 'name': ...}.", "tool_choice"
    )


def _response_format(text: object) -> dict | None:
    """`text.format` as the chat completion's response_format."""
    if not isinstance(text, dict):
        raise InvalidRequest("'text' must be an object: {'format': {...}}.", "text")
    unknown = set(text) - {"format"}
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidRequest(f"'text.{shortened(name)}' is not supported by this server.", f"text.{shortened(name)}")
    spec = text.get("format")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise InvalidRequest("'text.format' must be an object.", "text.format")
    if spec.get("type") != "json_schema":
        return spec  # text and json_object mean the same to both APIs; parse refuses any other
    schema = {name: spec[name] for name in ("name", "schema", "strict", "description") if name in spec}
    return {"type": "json_schema", "json_schema": schema}


def _metadata(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or len(value) > MAX_METADATA_KEYS:
        raise InvalidRequest(f"'metadata' must be an object of at most {MAX_METADATA_KEYS} strings.", "metadata")
    for key, item in value.items():
        if len(key) > 64 or not isinstance(item, str) or len(item) > 512:
            raise InvalidRequest(
                "'metadata' keys are at most 64 characters and values strings of at most 512.", "metadata"
            )
    return value


def read(body: object) -> ResponsesRequest:
    """A Responses request, checked as far as this API's own fields go (`chat_request` does the rest)."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    body = {name: value for name, value in body.items() if value is not None}
    for name, neutral in NEUTRAL_VALUES.items():
        if name in body and body[name] != neutral:
            raise InvalidRequest(f"'{name}' other than {json.dumps(neutral)} is not supported by this server.", name)
        body.pop(name, None)
    unknown = set(body) - SUPPORTED_FIELDS
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidRequest(f"'{shortened(name)}' is not supported by this server.", shortened(name))
    if "input" not in body:
        raise InvalidRequest("'input' is required: a string or a list of input items.", "input")
    messages = _input_messages(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("'instructions' must be a string.", "instructions")
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise InvalidRequest("'previous_response_id' must be a string.", "previous_response_id")
    for flag in ("store", "stream"):
        if not isinstance(body.get(flag, False), bool):
            raise InvalidRequest(f"'{flag}' must be true or false.", flag)
    chat: dict[str, Any] = {
        name: body[name] for name in ("temperature", "top_p", "seed", "user", "parallel_tool_calls") if name in body
    }
    if "max_output_tokens" in body:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    tools = _tools(body["tools"]) if "tools" in body else []
    if tools:
        chat["tools"] = tools
    if "tool_choice" in body:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if "text" in body and (response_format := _response_format(body["text"])) is not None:
        chat["response_format"] = response_format
    return ResponsesRequest(
        model=body.get("model"),  # type: ignore[arg-type]  (parse says what a model must be)
        messages=messages,
        instructions=instructions,
        previous_response_id=previous,
        store=body.get("store", True),
        stream=body.get("stream", False),
        metadata=_metadata(body["metadata"]) if "metadata" in body else {},
        echo={
            "instructions": instructions,
            "tools": [{"type": "function", **tool["function"]} for tool in tools],
            "tool_choice": body.get("tool_choice", "auto"),
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}},
            "temperature": body.get("temperature"),
            "top_p": body.get("top_p"),
            "max_output_tokens": body.get("max_output_tokens"),
            "previous_response_id": previous,
            "user": body.get("user"),
        },
        chat_fields=chat,
    )


def renamed(refusal: Refusal) -> Refusal:
    """A refusal about the chat-completion body, naming the Responses parameter it came from."""
    param = refusal.details.get("param")
    if not isinstance(param, str):
        return refusal
    if param.startswith("messages"):
        param = "input"
    elif param.startswith("tools[") and ".function." in param:
        param = param.replace(".function.", ".", 1)
    for chat_name, name in RENAMES:
        if param.startswith(chat_name):
            param = name + param[len(chat_name) :]
            refusal.message = refusal.message.replace(f"'{chat_name}", f"'{name}")
            break
    refusal.details["param"] = param
    if isinstance(refusal, InvalidRequest):
        refusal.param = param
    return refusal


def conversation(earlier_messages: list[dict], earlier_output: list[dict]) -> list[dict]:
    """A stored response's conversation, its own answer included, in chat-message form."""
    answer: dict[str, Any] = {"role": "assistant", "content": None}
    for item in earlier_output:
        if item.get("type") == "message":
            text = "".join(part.get("text", "") for part in item.get("content", ()))
            answer["content"] = (answer["content"] or "") + text
        elif item.get("type") == "function_call":
            answer.setdefault("tool_calls", []).append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
    if answer["content"] is None and not answer.get("tool_calls"):
        return list(earlier_messages)  # it wrote nothing
    return [*earlier_messages, answer]


def chat_request(ask: ResponsesRequest, earlier: list[dict]) -> CompletionRequest:
    """The chat completion this request runs as: its instructions first, then the stored conversation
    (`earlier`), then the new input; read by the one parser, its errors in Responses' names."""
    instructions = [{"role": "system", "content": ask.instructions}] if ask.instructions else []
    body = {
        "model": ask.model,
        "messages": [*instructions, *earlier, *ask.messages],
        "stream": ask.stream,
        **ask.chat_fields,
    }
    try:
        return parse(body)
    except InvalidRequest as invalid:
        raise renamed(invalid) from None


# -- rendering the answer --------------------------------------------------------------------------------


def usage_body(usage: Usage | None) -> dict:
    prompt, cached, written = (
        (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) if usage is not None else (0, 0, 0)
    )
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": written,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + written,
    }


def response_object(
    ask: ResponsesRequest,
    *,
    response_id: str,
    model: str,
    created_at: int,
    status: str,
    output: list[dict],
    usage: dict | None = None,
    incomplete_reason: str | None = None,
    error: dict | None = None,
) -> dict:
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
        "error": error,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "metadata": ask.metadata,
        "store": ask.store,
        **ask.echo,
    }


def sse(event: dict) -> bytes:
    """One event of the stream: `event: <type>` and its data (no [DONE] ends a Responses stream)."""
    return f"event: {event['type']}\ndata: ".encode() + json_bytes(event) + b"\n\n"


class Output:
    """The output items of one response as the deltas come, with the events that announce them: a
    message item (one output_text part) while text comes, a function_call item per tool call; a new
    kind of item, or a new call, completes the one before it."""

    def __init__(self, rid: str) -> None:
        self.rid = rid
        self.items: list[dict] = []
        self._open: dict | None = None
        self._calls: dict[int, dict] = {}

    def _close(self, status: str) -> list[dict]:
        item, self._open = self._open, None
        if item is None:
            return []
        item["status"] = status
        index = self.items.index(item)
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            return [
                {"type": "response.output_text.done", **at, "content_index": 0, "text": part["text"], "logprobs": []},
                {"type": "response.content_part.done", **at, "content_index": 0, "part": dict(part)},
                {"type": "response.output_item.done", "output_index": index, "item": _copy(item)},
            ]
        return [
            {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]},
            {"type": "response.output_item.done", "output_index": index, "item": _copy(item)},
        ]

    def _start(self, item: dict) -> list[dict]:
        self.items.append(item)
        self._open = item
        events = [{"type": "response.output_item.added", "output_index": len(self.items) - 1, "item": _copy(item)}]
        if item["type"] == "message":
            events.append(
                {
                    "type": "response.content_part.added",
                    "item_id": item["id"],
                    "output_index": len(self.items) - 1,
                    "content_index": 0,
                    "part": dict(item["content"][0]),
                }
            )
        return events

    def add(self, piece: ChoiceDelta) -> list[dict]:
        """The events for one delta of the answer (choice 0: a Responses request writes one)."""
        events: list[dict] = []
        if piece.content:
            if self._open is None or self._open["type"] != "message":
                events += self._close("completed")
                number = sum(item["type"] == "message" for item in self.items)
                events += self._start(
                    {
                        "type": "message",
                        "id": f"msg_{self.rid}" + (f"_{number}" if number else ""),
                        "status": "in_progress",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "", "annotations": []}],
                    }
                )
            item = cast(dict, self._open)  # opened just above when none was
            item["content"][0]["text"] += piece.content
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": self.items.index(item),
                    "content_index": 0,
                    "delta": piece.content,
                    "logprobs": [],
                }
            )
        for call in piece.tool_calls:
            position = call.get("index", len(self._calls))
            function = call.get("function") or {}
            item = self._calls.get(position)
            if item is None:
                events += self._close("completed")
                item = self._calls[position] = {
                    "type": "function_call",
                    "id": f"fc_{self.rid}_{position}",
                    "call_id": call.get("id") or f"call_{self.rid}_{position}",
                    "name": function.get("name") or "",
                    "arguments": "",
                    "status": "in_progress",
                }
                events += self._start(item)
            arguments = function.get("arguments") or ""
            if arguments:
                item["arguments"] += arguments
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item["id"],
                        "output_index": self.items.index(item),
                        "delta": arguments,
                    }
                )
        return events

    def finish(self, status: str, *, withheld: bool = False) -> list[dict]:
        """The events that complete the open item. `withheld` (moderation cut the answer): the text is
        withheld from the final output and the calls left out of it, as a chat completion withholds
        them: a program never gets a call it could act on."""
        if withheld:
            for item in self.items:
                if item["type"] == "message":
                    item["content"][0]["text"] = ""
                else:
                    item["arguments"] = ""
                item["status"] = "incomplete"
        events = self._close("completed" if status == "completed" else "incomplete")
        if withheld:
            self.items = [item for item in self.items if item["type"] == "message"]
        return events


def _copy(item: dict) -> dict:
    return json.loads(json.dumps(item))
