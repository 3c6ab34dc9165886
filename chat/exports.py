"""A conversation as a file: Markdown for people, JSON for programs.

The download from the conversation menu has the branch shown; the account's data export
(chat.data_export) has every branch, from a MessageTree it loaded in bulk.
"""

from __future__ import annotations

import json

from django.utils.text import slugify
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from chat.models import Conversation, Message
from chat.selectors import MessageTree, message_tree
from chat.serializers import conversation_json

FORMATS = {"md": "text/markdown; charset=utf-8", "json": "application/json"}


def _content(message: Message) -> str:
    # A blocked answer's text is for staff only, wherever it may be kept.
    return "" if message.status == Message.Status.BLOCKED else message.content


def source_label(source: dict) -> str:
    """ "report.pdf, page 3, Results": a cited passage's file, page and heading (exports, shared pages)."""
    return ", ".join(
        str(part)
        for part in (
            source.get("name"),
            source.get("page") and _("page %(page)s") % {"page": source["page"]},
            source.get("heading"),
        )
        if part
    )


def _sources(message: Message) -> list[str]:
    if not message.sources or message.status == Message.Status.BLOCKED:
        return []
    return [_("Sources:"), "", *(f"[{s['n']}] {source_label(s)}" for s in message.sources), ""]


def _section(message: Message, level: str) -> list[str]:
    who = _("You") if message.role == "user" else _("Assistant")
    note = "" if message.status == "completed" else f" ({message.status})"
    pictures = len(message.images)
    attached = (
        [
            ngettext("(%(count)s picture sent with it)", "(%(count)s pictures sent with it)", pictures)
            % {"count": pictures},
            "",
        ]
        if pictures
        else []
    )
    return [f"{level} {who}{note}", "", _content(message), "", *attached, *_sources(message)]


def _quote(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def to_markdown(conversation: Conversation, tree: MessageTree | None = None, *, all_branches: bool = False) -> str:
    tree = tree or message_tree(conversation)
    shown = tree.branch()
    title = conversation.title or _("Conversation")
    lines = [f"# {title}", "", _("Model: %(model)s") % {"model": conversation.model}, ""]
    for message in shown:
        lines += _section(message, "##")
    if all_branches:
        lines += _other_branches(tree, shown)
    return "\n".join(lines)


def _other_branches(tree: MessageTree, shown: list[Message]) -> list[str]:
    """Each other branch from where it leaves the ones already written, so no message is written twice."""
    written = {m.pk for m in shown}
    leaves = [m for m in tree.by_id.values() if not tree.children.get(m.pk) and m.pk not in written]
    if not leaves:
        return []
    lines = [
        "---",
        "",
        "# " + _("Other branches"),
        "",
        _("Made by editing a message or regenerating an answer. Each starts where it leaves the text above."),
        "",
    ]
    for number, leaf in enumerate(leaves, start=2):
        path = tree.path_to(leaf)
        fork = next(n for n, m in enumerate(path) if m.pk not in written)
        start = path[fork - 1] if fork else None
        if start is not None:
            where = _("Branches off after “%(quote)s”") % {"quote": _quote(_content(start))}
        else:
            where = _("Branches off at the start of the conversation")
        lines += ["## " + _("Branch %(number)s") % {"number": number}, "", where, ""]
        for message in path[fork:]:
            lines += _section(message, "###")
            written.add(message.pk)
    return lines


def _message_json(message: Message) -> dict:
    return {
        "id": message.pk,
        "parent_id": message.parent_id,
        "role": message.role,
        "content": _content(message),
        "status": message.status,
        "model": message.model,
        "created": message.created.isoformat(),
        "prompt_tokens": message.prompt_tokens,
        "completion_tokens": message.completion_tokens,
        "cached_tokens": message.cached_tokens,
        "sources": [] if message.status == Message.Status.BLOCKED else message.sources,
        # The ids of the pictures it carried (the data export holds the files themselves).
        "images": message.images,
    }


def to_json(conversation: Conversation, tree: MessageTree | None = None, *, all_branches: bool = False) -> str:
    tree = tree or message_tree(conversation)
    shown = tree.branch()
    generating = any(m.is_active for m in tree.by_id.values())
    data = {
        "conversation": conversation_json(conversation, generating=generating),
        "system_prompt": conversation.system_prompt,
    }
    if all_branches:
        # Every message; parent_id links them into the tree that edits and regenerations made.
        data["active_branch"] = [m.pk for m in shown]
        data["messages"] = [_message_json(m) for m in tree.by_id.values()]
    else:
        data["messages"] = [_message_json(m) for m in shown]
    return json.dumps(data, indent=2, ensure_ascii=False)


def file_stem(conversation: Conversation) -> str:
    return slugify(conversation.title)[:60] or f"conversation-{conversation.pk}"


def export(conversation: Conversation, kind: str) -> tuple[str, str, str]:
    """(body, content type, file name)."""
    body = to_markdown(conversation) if kind == "md" else to_json(conversation)
    return body, FORMATS[kind], f"{file_stem(conversation)}.{kind}"
