"""Tool calling as SGLang 0.5.23 serves it with ``--tool-call-parser qwen`` (protocol note §10.1).

Three parts, each what the matching part of SGLang does:

- request side: ``tools`` / ``tool_choice`` are checked with SGLang's 400 messages, assistant
  ``tool_calls`` in the history have their ``arguments`` strings parsed, and the tools are rendered
  into the chat template the way Qwen2.5's template does (``# Tools`` and ``<tools>…</tools>`` in the
  system turn, ``<tool_call>`` blocks in assistant turns, ``<tool_response>`` in a user turn);
- the simulated model's decision (it is not a model; the rule is written down in docs/inference.md):
  with ``auto`` it calls the tool whose name or description shares the most words with the last user
  message, plus any tool the message names literally; after a ``tool`` result it answers in text that
  quotes the result; ``required`` and a named choice always call. Arguments are written from each
  tool's ``parameters`` schema by ``simulator.grammar`` with the user's words for text fields;
- the parser: qwen's ``<tool_call>\\n{json}\\n</tool_call>`` blocks turned into OpenAI ``tool_calls``,
  whole (non-streamed) or incrementally (streamed), calls to unknown names dropped.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.chat_template import IM_END, IM_START, message_text
from simulator.grammar import JsonWriter

PARSERS = {"qwen": "qwen", "qwen25": "qwen"}  # qwen25 is SGLang's deprecated alias
BOT, EOT = "<tool_call>", "</tool_call>"
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")


class ToolRequestError(ValueError):
    """A 400 with SGLang's message."""


@dataclass
class ToolSetup:
    tools: list[dict[str, Any]]  # the function objects ({"name", "description"?, "parameters"?})
    choice: str | dict  # "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
    parallel: bool

    @property
    def named(self) -> str | None:
        return self.choice["function"]["name"] if isinstance(self.choice, dict) else None

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    def rendered(self) -> list[dict[str, Any]]:
        """The tools the template sees: none for "none", only the named one for a named choice."""
        if not self.active:
            return []
        named = self.named
        return [t for t in self.tools if named is None or t["name"] == named]

    def names(self) -> set[str]:
        return {t["name"] for t in self.tools}


def _check_parameters(i: int, params: Any) -> None:
    def bad(reason: str) -> ToolRequestError:
        return ToolRequestError(f"Tool {i} function has invalid 'parameters' schema: {reason}")

    if not isinstance(params, dict):
        raise bad(f"{json.dumps(params)} is not of type 'object', 'boolean'")
    kind = params.get("type")
    valid = ("object", "array", "string", "integer", "number", "boolean", "null")
    for t in kind if isinstance(kind, list) else [kind] if kind is not None else []:
        if t not in valid:
            raise bad(f"{json.dumps(t)} is not valid under any of the given schemas")
    props = params.get("properties")
    if props is not None and not (isinstance(props, dict) and all(isinstance(v, dict | bool) for v in props.values())):
        raise bad(f"{json.dumps(props)} is not of type 'object'")
    required = params.get("required")
    if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        raise bad(f"{json.dumps(required)} is not of type 'array' of strings")


def parse_tools(body: Mapping[str, Any], has_grammar: bool, grammar_desc: str) -> ToolSetup:
    raw = body.get("tools")
    if raw is not None and not isinstance(raw, list):
        raise ToolRequestError("`tools` must be a list")
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(raw or []):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(fn, dict):
            raise ToolRequestError(f"Tool {i} must be {{'type': 'function', 'function': {{...}}}}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolRequestError(f"Tool {i} function must have a string `name`")
        if fn.get("parameters") is not None:
            _check_parameters(i, fn["parameters"])
        tools.append(fn)
    choice = body.get("tool_choice")
    if choice is None:
        choice = "auto" if tools else "none"
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise ToolRequestError(f"Invalid tool_choice {json.dumps(choice)}: expected none, auto, required or a tool")
    elif not (
        isinstance(choice, dict)
        and isinstance(choice.get("function"), dict)
        and isinstance(choice["function"].get("name"), str)
    ):
        raise ToolRequestError('tool_choice must be "none", "auto", "required" or {"type": "function", ...}')
    setup = ToolSetup(tools, choice, body.get("parallel_tool_calls", True) is not False)
    forced = choice == "required" or isinstance(choice, dict)
    if forced and not tools:
        which = "required" if choice == "required" else "a specific tool"
        raise ToolRequestError(f"Tools cannot be empty if tool choice is set to {which}.")
    if setup.named is not None and setup.named not in setup.names():
        raise ToolRequestError(f"Tool '{setup.named}' not found in tools list.")
    if forced and has_grammar:
        raise ToolRequestError(
            "tool_choice 'required' or a named tool cannot be combined with response_format, regex, or ebnf: "
            f"{grammar_desc}"
        )
    return setup


def normalize_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assistant tool_calls with their arguments parsed (SGLang's 400 on invalid JSON)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and calls:
            if not isinstance(calls, list):
                raise ToolRequestError("Assistant tool_calls must be a list.")
            parsed = []
            for call in calls:
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict):
                    raise ToolRequestError("Assistant tool call must have a function.")
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except ValueError:
                        raise ToolRequestError("Assistant tool call function.arguments must be valid JSON.") from None
                parsed.append({"name": fn.get("name"), "arguments": args})
            m = {**m, "tool_calls": parsed}
        out.append(m)
    return out


def _call_block(name: Any, arguments: Any) -> str:
    return f"{BOT}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{EOT}"


def render_with_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """Qwen2.5's template over ChatML: the tools in the system turn, calls and responses in XML tags.
    Without tools and tool messages this is exactly ``render_chatml``."""
    out: list[str] = []
    rest = messages
    if tools:
        system = ""
        if messages and messages[0].get("role") == "system":
            system = message_text(messages[0].get("content")) + "\n\n"
            rest = messages[1:]
        listed = "\n".join(json.dumps({"type": "function", "function": t}, ensure_ascii=False) for t in tools)
        out.append(
            f"{IM_START}system\n{system}# Tools\n\n"
            "You may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{listed}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
            f"{IM_END}\n"
        )
    for i, m in enumerate(rest):
        role = m.get("role", "user")
        if role == "tool":
            first = i == 0 or rest[i - 1].get("role") != "tool"
            last = i == len(rest) - 1 or rest[i + 1].get("role") != "tool"
            out.append(
                (f"{IM_START}user" if first else "")
                + f"\n<tool_response>\n{message_text(m.get('content'))}\n</tool_response>"
                + (f"{IM_END}\n" if last else "")
            )
        elif role == "assistant" and m.get("tool_calls"):
            text = message_text(m.get("content"))
            blocks = "".join("\n" + _call_block(c["name"], c["arguments"]) for c in m["tool_calls"])
            out.append(f"{IM_START}assistant\n{text}{blocks}{IM_END}\n")
        else:
            out.append(f"{IM_START}{role}\n{message_text(m.get('content'))}{IM_END}\n")
    out.append(f"{IM_START}assistant\n")
    return "".join(out)


# -- the simulated model's decision -----------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _tool_words(tool: dict[str, Any]) -> set[str]:
    name_parts = re.split(r"[_\W]+|(?<=[a-z])(?=[A-Z])", tool["name"])
    text = " ".join(name_parts) + " " + str(tool.get("description") or "")
    return {w.lower() for w in _words(text) if len(w) > 2} - _COMMON


_COMMON = {"the", "and", "for", "with", "from", "that", "this", "get", "set", "use", "into", "about", "your"}
_COMMON |= {"you", "are", "can", "will", "returns", "return"}


def _choose_calls(
    setup: ToolSetup, messages: list[dict[str, Any]], rng: random.Random
) -> list[tuple[str, dict[str, Any]]] | str | None:
    """[(name, arguments)] to call, a text answer (str), or None for ordinary prose."""
    last = messages[-1] if messages else {}
    tools = setup.rendered()
    forced = setup.named is not None or setup.choice == "required"
    if last.get("role") == "tool" and not forced:
        result = message_text(last.get("content")).strip()
        return f"Based on the tool result: {result}" if result else "The tool returned no result."
    user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    user_text = message_text(user.get("content")) if user else ""
    words = _words(user_text)
    lowered = {w.lower() for w in words}
    chosen: list[dict[str, Any]]
    if setup.named:
        chosen = tools
    else:
        mentioned = [t for t in tools if t["name"].lower() in user_text.lower()]
        score, at = max((len(_tool_words(t) & lowered), -i) for i, t in enumerate(tools))
        best = tools[-at]
        if score == 0 and not mentioned:
            if not forced:
                return None
            best = tools[rng.randrange(len(tools))]
        chosen = [best] + [t for t in mentioned if t is not best]
        if not setup.parallel:
            chosen = chosen[:1]
    calls = []
    for tool in chosen:
        params = tool.get("parameters") or {"type": "object", "properties": {}}
        args = JsonWriter(params, rng, words).value(params)
        calls.append((tool["name"], args if isinstance(args, dict) else {}))
    return calls


def plan_tool_turn(setup: ToolSetup, messages: list[dict[str, Any]], rng: random.Random) -> str | None:
    """The raw text the simulated model writes (qwen's format), or None to let it write prose."""
    if not setup.rendered():
        return None
    decided = _choose_calls(setup, messages, rng)
    if decided is None or isinstance(decided, str):
        return decided
    return "\n".join(_call_block(name, args) for name, args in decided)


def plan_tool_array(setup: ToolSetup, messages: list[dict[str, Any]], rng: random.Random) -> str | None:
    """Without a parser, required/named output is SGLang's constrained JSON array of calls."""
    decided = _choose_calls(setup, messages, rng)
    if not isinstance(decided, list):
        return decided
    return json.dumps([{"name": name, "parameters": args} for name, args in decided], ensure_ascii=False)


# -- the qwen detector ---------------------------------------------------------------------------------------


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _json_blocks(text: str) -> list[tuple[int, int, str]]:
    """(start, end, inner) of every complete <tool_call> block."""
    out = []
    pos = 0
    while True:
        start = text.find(BOT, pos)
        if start < 0:
            return out
        end = text.find(EOT, start)
        if end < 0:
            return out
        out.append((start, end + len(EOT), text[start + len(BOT) : end]))
        pos = end + len(EOT)


def parse_calls(text: str, names: set[str]) -> tuple[str, list[dict[str, Any]]]:
    """Non-streamed: (normal text before the first block, stripped; the calls)."""
    start = text.find(BOT)
    if start < 0:
        return text, []
    calls = []
    for _, _, inner in _json_blocks(text):
        try:
            obj = json.loads(inner.strip())
        except ValueError:
            continue
        if not isinstance(obj, dict) or obj.get("name") not in names:
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append(
            {
                "id": new_call_id(),
                "index": len(calls),
                "type": "function",
                "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)},
            }
        )
    return text[:start].strip(), calls


_NAME_RE = re.compile(r'^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')


@dataclass
class StreamParser:
    """Incremental qwen parsing: normal text, a name delta per call, then argument fragments whose
    concatenation is ``json.dumps(arguments)``."""

    names: set[str]
    text: str = ""
    pos: int = 0  # how much of `text` has been consumed
    calls: int = 0
    _seen_block: bool = False  # text after the first block is dropped, as in the non-streamed parse
    _in_call: bool = False
    _name_sent: bool = False
    _skip: bool = False
    _args_sent: str = ""
    _id: str = ""
    deltas: list[dict[str, Any]] = field(default_factory=list)

    def feed(self, new_text: str, *, final: bool = False) -> list[dict[str, Any]]:
        """Deltas ({"content": …} or {"tool_calls": […]}) for the text added since the last call."""
        self.text += new_text
        out: list[dict[str, Any]] = []
        while True:
            if not self._in_call:
                at = self.text.find(BOT, self.pos)
                if at < 0:
                    # Hold back a tail that could be the start of "<tool_call>".
                    keep = 0 if final else _partial_suffix(self.text[self.pos :], BOT)
                    end = len(self.text) - keep
                    if end > self.pos:
                        chunk = self.text[self.pos : end]
                        if not self._seen_block and chunk:
                            out.append({"content": chunk})
                        self.pos = end
                    return out
                if at > self.pos and not self._seen_block:
                    out.append({"content": self.text[self.pos : at]})
                self.pos = at + len(BOT)
                self._seen_block = True
                self._in_call, self._name_sent, self._skip, self._args_sent = True, False, False, ""
                continue
            body_end = self.text.find(EOT, self.pos)
            body = self.text[self.pos : body_end if body_end >= 0 else len(self.text)]
            if not self._name_sent and not self._skip:
                m = _NAME_RE.match(body)
                if m is None and body_end < 0:
                    return out
                name = json.loads(f'"{m.group(1)}"') if m else None
                if name in self.names:
                    self._id = new_call_id()
                    out.append(
                        {
                            "tool_calls": [
                                {
                                    "id": self._id,
                                    "index": self.calls,
                                    "type": "function",
                                    "function": {"name": name, "arguments": ""},
                                }
                            ]
                        }
                    )
                    self._name_sent = True
                else:
                    self._skip = True
            if self._name_sent:
                m = _NAME_RE.match(body)
                raw_args = body[m.end() :] if m else ""
                if body_end >= 0:
                    try:
                        obj = json.loads(body.strip())
                        full = json.dumps(obj.get("arguments", obj.get("parameters", {})), ensure_ascii=False)
                    except ValueError:
                        full = self._args_sent
                    rest = full[len(self._args_sent) :] if full.startswith(self._args_sent) else ""
                    if rest:
                        out.append(self._arg_delta(rest))
                else:
                    # Everything but a tail that may be the outer object's "}" and the closing tag.
                    stable = raw_args[: len(raw_args) - _partial_suffix(raw_args, EOT)].rstrip()
                    stable = stable.rstrip("}").rstrip()
                    if len(stable) > len(self._args_sent) and stable.startswith(self._args_sent):
                        out.append(self._arg_delta(stable[len(self._args_sent) :]))
                        self._args_sent = stable
            if body_end < 0:
                return out
            if self._name_sent:
                self.calls += 1
            self.pos = body_end + len(EOT)
            self._in_call = False

    def _arg_delta(self, fragment: str) -> dict[str, Any]:
        return {
            "tool_calls": [
                {"id": None, "index": self.calls, "type": "function", "function": {"name": None, "arguments": fragment}}
            ]
        }


def _partial_suffix(text: str, token: str) -> int:
    for k in range(min(len(token) - 1, len(text)), 0, -1):
        if text.endswith(token[:k]):
            return k
    return 0
