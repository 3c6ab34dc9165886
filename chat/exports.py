"""A conversation as a file: Markdown for people, JSON for programs. The branch shown is exported."""

from __future__ import annotations

import json

from django.utils.text import slugify

from chat.models import Conversation
from chat.selectors import branch
from chat.serializers import conversation_json

FORMATS = {"md": "text/markdown; charset=utf-8", "json": "application/json"}


def to_markdown(conversation: Conversation) -> str:
    lines = [f"# {conversation.title or 'Conversation'}", "", f"Model: {conversation.model}", ""]
    for message in branch(conversation):
        who = "You" if message.role == "user" else "Assistant"
        note = "" if message.status == "completed" else f" ({message.status})"
        lines += [f"## {who}{note}", "", message.content, ""]
    return "\n".join(lines)


def to_json(conversation: Conversation) -> str:
    return json.dumps({
        "conversation": conversation_json(conversation),
        "system_prompt": conversation.system_prompt,
        "messages": [
            {"id": m.pk, "role": m.role, "content": m.content, "status": m.status, "model": m.model,
             "created": m.created.isoformat(), "prompt_tokens": m.prompt_tokens,
             "completion_tokens": m.completion_tokens, "cached_tokens": m.cached_tokens}
            for m in branch(conversation)
        ],
    }, indent=2)


def export(conversation: Conversation, kind: str) -> tuple[str, str, str]:
    """(body, content type, file name)."""
    body = to_markdown(conversation) if kind == "md" else to_json(conversation)
    name = slugify(conversation.title)[:60] or f"conversation-{conversation.pk}"
    return body, FORMATS[kind], f"{name}.{kind}"
