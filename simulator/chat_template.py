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


def last_user_text(prompt: str) -> str | None:
    """The content of the last user turn of a ChatML prompt, or None when it isn't ChatML."""
    marker = f"{IM_START}user\n"
    start = prompt.rfind(marker)
    if start < 0:
        return None
    start += len(marker)
    end = prompt.find(IM_END, start)
    return prompt[start:] if end < 0 else prompt[start:end]
