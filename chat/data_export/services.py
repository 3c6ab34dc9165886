"""Build an account's data export: one .zip with every conversation (all branches) as JSON and as
Markdown, the usage ledger, API key names, shared links, and the person's files as uploaded. Nothing
of any other account, and no secret (API keys appear by name and prefix only).

The archive is written into a spooled temporary file: in memory while small, on disk beyond
SPOOL_BYTES, so a large account does not hold its whole history in memory twice.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import PurePath
from typing import BinaryIO

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext_lazy

from accounts import selectors as account_selectors
from accounts.models import User
from billing import selectors as billing_selectors
from chat import exports
from chat import selectors as chat_selectors
from chat.data_export.limit import count_download
from chat.sharing import selectors as sharing_selectors
from documents import selectors as documents_selectors

SPOOL_BYTES = 32 * 1024 * 1024
#: Files are copied into the archive this much at a time.
CHUNK_BYTES = 1024 * 1024

USAGE_COLUMNS = [
    "created",
    "model",
    "plan",
    "conversation_id",
    "api_key",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "billable_tokens",
]

#: The archive's README.txt, in the language of the page that asked for it.
README = gettext_lazy("""Your %(site)s data, exported %(when)s for %(email)s.

account.json        your account: email, display name, when you joined
conversations/      every conversation, archived ones too, twice:
  <id>-<title>.json   every message of every branch; parent_id links the branches that editing a
                      message or regenerating an answer made; active_branch lists the one shown
  <id>-<title>.md     the branch shown, then the other branches from where each one leaves it
usage.csv           one row per answer from the usage ledger: model, plan and tokens
                    (billable_tokens is what counted against your plan's allowance)
api_keys.json       your API keys' names, prefixes and dates; the keys themselves are never stored
shared_links.json   the read-only links you made to your conversations, working or not
files.json          your files: name, size, state, the chat or collection each is in; and your collections
files/<id>-<name>   each file as you uploaded it
""")


@dataclass
class DataExport:
    file: BinaryIO
    size: int
    filename: str


def export_my_data(user: User, *, site_url: str) -> DataExport:
    """Count the download against DATA_EXPORT_RATE_LIMIT (429 beyond it), then build the archive.
    `site_url` (e.g. https://chat.example.com/) makes the shared links absolute."""
    count_download(user)
    return build_archive(user, site_url=site_url)


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def build_archive(user: User, *, site_url: str) -> DataExport:
    now = timezone.now()
    root = f"{slugify(settings.SITE_NAME) or 'chat'}-data-{now:%Y-%m-%d}"
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (the response closes it)
    with zipfile.ZipFile(spool, "w", compression=zipfile.ZIP_DEFLATED) as archive:

        def write(name: str, text: str) -> None:
            archive.writestr(f"{root}/{name}", text)

        write(
            "README.txt",
            README % {"site": settings.SITE_NAME, "when": now.strftime("%Y-%m-%d %H:%M UTC"), "email": user.email},
        )
        write(
            "account.json",
            _json(
                {
                    "email": user.email,
                    "display_name": user.display_name,
                    "joined": _iso(user.date_joined),
                    "exported": _iso(now),
                }
            ),
        )
        for conversation, tree in chat_selectors.conversations_with_trees(user):
            stem = f"conversations/{conversation.pk}-{exports.file_stem(conversation)}"
            write(f"{stem}.json", exports.to_json(conversation, tree, all_branches=True))
            write(f"{stem}.md", exports.to_markdown(conversation, tree, all_branches=True))

        keys = list(account_selectors.api_keys_for(user))
        write(
            "api_keys.json",
            _json(
                [
                    {
                        "name": key.name,
                        "prefix": f"{key.prefix}…",
                        "created": _iso(key.created),
                        "last_used": _iso(key.last_used),
                        "expires": _iso(key.expires_at),
                        "revoked": _iso(key.revoked_at),
                    }
                    for key in keys
                ]
            ),
        )
        prefixes = {key.pk: key.prefix for key in keys}
        with archive.open(f"{root}/usage.csv", "w") as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as out:
            rows = csv.writer(out)
            rows.writerow(USAGE_COLUMNS)
            for record in _usage_rows(user):
                rows.writerow(
                    [
                        _iso(record.created),
                        record.model,
                        record.plan_slug,
                        record.conversation_id or "",
                        f"{prefixes[record.api_key_id]}…" if record.api_key_id in prefixes else "",
                        record.prompt_tokens,
                        record.cached_tokens,
                        record.completion_tokens,
                        record.billable_tokens,
                    ]
                )

        base = site_url.rstrip("/")
        write(
            "shared_links.json",
            _json(
                [
                    {
                        "conversation_id": share.conversation_id,
                        "conversation_title": share.conversation.title,
                        "url": base + reverse("shared-conversation", args=[share.token]),
                        "mode": share.mode,
                        "shows_your_name": share.show_owner_name,
                        "shows_quoted_passages": share.show_passages,
                        "created": _iso(share.created),
                        "revoked": _iso(share.revoked_at),
                        "taken_down": _iso(share.taken_down_at),
                        "takedown_reason": share.takedown_reason,
                    }
                    for share in sharing_selectors.shares_for(user)
                ]
            ),
        )
        _write_files(archive, root, user)
    size = spool.tell()
    spool.seek(0)
    return DataExport(file=spool, size=size, filename=f"{root}.zip")


def _write_files(archive: zipfile.ZipFile, root: str, user: User) -> None:
    """files.json and each stored file as it was uploaded (streamed from storage, never whole in memory)."""
    documents = list(documents_selectors.documents_of(user).select_related("collection").order_by("created"))
    listed = []
    for document in documents:
        path = f"files/{document.pk}-{slugify(PurePath(document.name).stem) or 'file'}{PurePath(document.name).suffix}"
        try:
            with document.file.open("rb") as stored, archive.open(f"{root}/{path}", "w") as out:
                shutil.copyfileobj(stored, out, CHUNK_BYTES)
        except FileNotFoundError:
            path = None  # its stored copy is gone (it is listed all the same)
        listed.append(
            {
                "name": document.name,
                "file": path,
                "size_bytes": document.size_bytes,
                "sha256": document.sha256,
                "state": document.state,
                "failure": document.failure,
                "pages": document.pages,
                "conversation_id": document.conversation_id,
                "collection": document.collection.name if document.collection else None,
                "uploaded": _iso(document.created),
            }
        )
    collections = [
        {
            "name": c.name,
            "created": _iso(c.created),
            "conversation_ids": sorted(c.conversations.values_list("pk", flat=True)),
        }
        for c in documents_selectors.collections_of(user)
    ]
    archive.writestr(f"{root}/files.json", _json({"files": listed, "collections": collections}))


def _usage_rows(user: User, batch: int = 2000):
    """The ledger in batches (keyset on id, which grows with time), so a long history is never all in memory."""
    last = 0
    while True:
        rows = list(billing_selectors.usage_records(user).filter(pk__gt=last).order_by("pk")[:batch])
        yield from rows
        if len(rows) < batch:
            return
        last = rows[-1].pk


def _json(data) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
