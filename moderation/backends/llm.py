"""The `llm` backend: a guard model (Llama Guard 3) served by SGLang, through the inference client.

The text is put in Llama Guard's own prompt (its task, its fourteen categories, the conversation
with the text as the last turn: "User" for input, "Agent" for an answer) and sent as a raw prompt,
so the engine applies no other template. The model answers "safe", or "unsafe" and a line of
category codes ("S1,S10"); the codes are mapped to the names below. Anything else is a
`BackendError`, as are an unreachable engine and an answer slower than MODERATION_TIMEOUT_SECONDS.

The simulated worker has a guard mode (`--guard-keywords "heist=S2"`) that answers in this format
from a keyword policy, so the path is tested end to end without a model.
"""

from __future__ import annotations

import asyncio
import re

from django.conf import settings

from inference import client as inference_client
from inference.client import Timeouts
from inference.connect import engine_client
from inference.errors import EngineError
from moderation.backends import INPUT, BackendError, Hit

#: Llama Guard 3's categories (MLCommons hazard taxonomy), as staff see them on flags.
CATEGORIES = {
    "S1": "Violent crimes",
    "S2": "Non-violent crimes",
    "S3": "Sex-related crimes",
    "S4": "Child sexual exploitation",
    "S5": "Defamation",
    "S6": "Specialized advice",
    "S7": "Privacy",
    "S8": "Intellectual property",
    "S9": "Indiscriminate weapons",
    "S10": "Hate",
    "S11": "Suicide & self-harm",
    "S12": "Sexual content",
    "S13": "Elections",
    "S14": "Code interpreter abuse",
}

_TASK = (
    "Task: Check if there is unsafe content in '{role}' messages in conversations according our safety "
    "policy with the below categories.\n\n<BEGIN UNSAFE CONTENT CATEGORIES>\n{categories}\n"
    "<END UNSAFE CONTENT CATEGORIES>\n\n<BEGIN CONVERSATION>\n\n{role}: {text}\n\n<END CONVERSATION>\n\n"
    "Provide your safety assessment for ONLY THE LAST {role} message in the above conversation:\n"
    " - First line must read 'safe' or 'unsafe'.\n"
    " - If unsafe, a second line must include a comma-separated list of violated categories."
)


def guard_prompt(text: str, stage: str) -> str:
    """Llama Guard 3's prompt for one message, in its Llama 3 chat format."""
    role = "User" if stage == INPUT else "Agent"
    categories = "\n".join(f"{code}: {name}." for code, name in CATEGORIES.items())
    task = _TASK.format(role=role, categories=categories, text=text)
    return (
        f"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{task}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def parse_verdict(answer: str) -> list[Hit]:
    """Llama Guard's answer as hits; raises BackendError for any other shape."""
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    if lines and lines[0].lower() == "safe":
        return []
    if not lines or lines[0].lower() != "unsafe":
        raise BackendError(f"the guard model answered in an unexpected shape: {answer[:200]!r}")
    codes = re.findall(r"S\d+", lines[1]) if len(lines) > 1 else []
    if not codes:
        return [Hit(category="Unsafe (no category given)", block=True, backend="llm")]
    return [Hit(category=CATEGORIES.get(code, code), block=True, backend="llm") for code in dict.fromkeys(codes)]


class LlmGuardBackend:
    name = "llm"
    blocking = True  # a generation on an engine

    def prepare(self, stage: str) -> None:
        pass

    def screen(self, text: str, stage: str) -> list[Hit]:
        return parse_verdict(asyncio.run(self._ask(guard_prompt(text, stage))))

    async def _ask(self, prompt: str) -> str:
        request = inference_client.GenerationRequest(
            prompt=prompt, model=settings.MODERATION_LLM_MODEL, max_new_tokens=20, temperature=0.0
        )
        url = settings.MODERATION_LLM_URL or settings.SGLANG_URL
        try:
            async with engine_client(url, timeouts=Timeouts()) as client:
                async with asyncio.timeout(settings.MODERATION_TIMEOUT_SECONDS):
                    parts = [event.text or "" async for event in client.generate_stream(request)]
        except TimeoutError as exc:
            raise BackendError(
                f"the guard model at {url} took longer than {settings.MODERATION_TIMEOUT_SECONDS}s"
            ) from exc
        except EngineError as exc:
            raise BackendError(f"the guard model at {url} failed: {exc}") from exc
        return "".join(parts)


def backend() -> LlmGuardBackend:
    return LlmGuardBackend()
