"""The simulated model's chat template: ChatML, as its `tokenizer_config.json` says (model/).

A real engine applies the model's own template to a chat request; so does the simulated worker, with
this module, and it reads the last user turn of a ChatML prompt back for `--echo` and to seed its prose.
The product renders the same bytes on its side (`inference.chat_templates.render_chatml`, for the
native `/generate` route), and a test holds the two together: the simulator imports nothing of the
product (docs/ARCHITECTURE.md, "Layering").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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


def final_assistant_message(
    messages: list[dict[str, Any]], continue_final_message: bool
) -> tuple[list[dict[str, Any]], str | None]:
    """SGLang's handling of a chat that ends with the assistant's message of text (its OpenAI route):
    with ``continue_final_message`` the message is taken off and its text comes back, to be appended
    to the rendered prompt as it is (the model writes on from it); without, it is sent as the user's.
    A last message of another role, or of content parts, is left as it is."""
    last = messages[-1] if messages else None
    if last is None or last.get("role") != "assistant" or not isinstance(last.get("content"), str):
        return messages, None
    if continue_final_message:
        return messages[:-1], last["content"]
    return [*messages[:-1], {"role": "user", "content": last["content"]}], None


def assistant_prefix(prompt: str) -> str:
    """The assistant's text a ChatML prompt ends with, after its last assistant header ("" when the
    prompt ends with the header itself, or is not an open assistant turn): what the model writes on from."""
    marker = f"{IM_START}assistant\n"
    start = prompt.rfind(marker)
    if start < 0 or IM_END in prompt[start:] or IM_START in prompt[start + len(marker) :]:
        return ""
    return prompt[start + len(marker) :]


def last_user_text(prompt: str) -> str | None:
    """The content of the last user turn of a ChatML prompt, or None when it isn't ChatML."""
    marker = f"{IM_START}user\n"
    start = prompt.rfind(marker)
    if start < 0:
        return None
    start += len(marker)
    end = prompt.find(IM_END, start)
    return prompt[start:] if end < 0 else prompt[start:end]
