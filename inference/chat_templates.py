"""Chat templates: how a list of chat messages becomes one prompt string.

SGLang's OpenAI route applies the model's own template (from its tokenizer config). The native
`/generate` route applies none, so a client that sends chat to `/generate` must render the template
itself, byte for byte as the model was trained, or the model sees a different prompt.

Two templates are provided:

- ``chatml`` (Qwen 2/2.5/3, many fine-tunes, and the simulated worker):
  ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then ``<|im_start|>assistant\\n``.
  No default system message is inserted (Qwen 2.5's template adds one when there is none; ours
  doesn't, so that the rendered prompt is exactly what the caller assembled).
- ``llama3`` (Llama 3.x instruct): ``<|begin_of_text|>`` then
  ``<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>`` per message, then the
  assistant header.

Continuing the last message (SGLang's ``continue_final_message``): a chat whose last message is the
assistant's, to be written on from where it stops, is rendered as SGLang's OpenAI route renders it: the
messages before it with the generation prompt, then its text as it is, with no end-of-turn marker
(:func:`render_continuing`).

The simulated worker applies its model's template with its own module (`simulator.chat_template`: a real
engine's template is the model's, not the client's); tests/inference/test_simulator_units.py holds the
two to the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

ChatTemplate = Callable[[list[Mapping[str, Any]]], str]

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or OpenAI-style parts (text parts are kept)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def render_chatml(messages: list[Mapping[str, Any]]) -> str:
    """ChatML with the generation prompt (the assistant header) appended."""
    out = [f"{IM_START}{m.get('role', 'user')}\n{message_text(m.get('content'))}{IM_END}\n" for m in messages]
    out.append(f"{IM_START}assistant\n")
    return "".join(out)


def render_llama3(messages: list[Mapping[str, Any]]) -> str:
    """Llama 3 instruct format with the generation prompt appended."""
    out = ["<|begin_of_text|>"]
    for m in messages:
        out.append(
            f"<|start_header_id|>{m.get('role', 'user')}<|end_header_id|>\n\n{message_text(m.get('content'))}<|eot_id|>"
        )
    out.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(out)


TEMPLATES: dict[str, ChatTemplate] = {"chatml": render_chatml, "llama3": render_llama3}


def render_continuing(template: ChatTemplate, messages: list[Mapping[str, Any]]) -> str:
    """The prompt that has the model write on from the last message, the assistant's unfinished answer:
    the earlier messages with the generation prompt (the assistant header), then that answer's text.
    A chat that does not end with the assistant's text is rendered as usual."""
    last = messages[-1] if messages else None
    if last is None or last.get("role") != "assistant" or not isinstance(last.get("content"), str):
        return template(messages)
    return template(messages[:-1]) + last["content"]


def get_template(template: str | ChatTemplate) -> ChatTemplate:
    """A template by name, or the callable itself."""
    if callable(template):
        return template
    try:
        return TEMPLATES[template]
    except KeyError:
        raise ValueError(f"unknown chat template {template!r}; known: {', '.join(sorted(TEMPLATES))}") from None
