"""What a plan allows of people's files: the largest file, files per collection, storage, and pages read
a month. The documents app counts (it owns the files) and asks here; the rule and its sentence are
decided here only. Every refusal is a 413 naming the limit, and the cheapest plan that allows more."""

from __future__ import annotations

from collections.abc import Callable

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing import selectors
from billing.models import Plan
from config.refusals import TooLarge
from config.text import grouped


class FileLimit(TooLarge):
    code = "file_limit"


#: Binary units, largest first, each a size with its unit as people read it.
_UNITS = (
    (1024**3, gettext_lazy("%(size)s GB")),
    (1024**2, gettext_lazy("%(size)s MB")),
    (1024, gettext_lazy("%(size)s KB")),
)


def in_bytes(size: int) -> str:
    """A size as people read it: "850 KB", "12.5 MB", "2 GB" (binary units, one decimal below 10)."""
    for scale, unit in _UNITS:
        if size >= scale:
            value = size / scale
            if value < 10:
                figure = f"{value:.1f}"
                figure = figure.removesuffix(".0")
            else:
                figure = f"{round(value):,}"
            return unit % {"size": figure}
    return _("%(size)s bytes") % {"size": grouped(size)}


def _refuse(plan: Plan, field: str, message: str, offer: Callable[[Plan], str], **details) -> FileLimit:
    better = selectors.cheapest_plan_with_more(plan, field)
    if better is not None:
        message += " " + offer(better)
    return FileLimit(
        message, plan=plan.slug, limit=getattr(plan, field), upgrade=better.slug if better else None, **details
    )


def check_file_upload(plan: Plan, *, size_bytes: int, stored_bytes: int, files_in_collection: int | None) -> None:
    """May a file of `size_bytes` be kept? `stored_bytes` is the size of the person's files already kept;
    `files_in_collection` how many files the collection it goes to holds (None: not to a collection)."""
    if size_bytes > plan.max_file_bytes:
        raise _refuse(
            plan,
            "max_file_bytes",
            _("This file is %(size)s; the %(plan)s plan allows files up to %(limit)s.")
            % {"size": in_bytes(size_bytes), "plan": plan.name, "limit": in_bytes(plan.max_file_bytes)},
            lambda better: (
                _("%(plan)s allows files up to %(limit)s.")
                % {"plan": better.name, "limit": in_bytes(better.max_file_bytes)}
            ),
            param="file",
        )
    if files_in_collection is not None and files_in_collection >= plan.files_per_collection:
        raise _refuse(
            plan,
            "files_per_collection",
            _(
                "This collection holds %(count)s files, the most the %(plan)s plan allows. Delete one, or start "
                "another collection."
            )
            % {"count": grouped(files_in_collection), "plan": plan.name},
            lambda better: (
                _("%(plan)s allows %(count)s files per collection.")
                % {"plan": better.name, "count": grouped(better.files_per_collection)}
            ),
            param="collection",
        )
    if stored_bytes + size_bytes > plan.storage_bytes:
        raise _refuse(
            plan,
            "storage_bytes",
            _(
                "Your files take %(stored)s of the %(limit)s the %(plan)s plan allows, and this one is %(size)s. "
                "Delete files you no longer need."
            )
            % {
                "stored": in_bytes(stored_bytes),
                "limit": in_bytes(plan.storage_bytes),
                "plan": plan.name,
                "size": in_bytes(size_bytes),
            },
            lambda better: (
                _("%(plan)s allows %(limit)s of files.")
                % {"plan": better.name, "limit": in_bytes(better.storage_bytes)}
            ),
            param="file",
        )


def check_pages(plan: Plan, *, pages: int, pages_read: int) -> None:
    """May a file of `pages` pages be read, when `pages_read` were read this billing period?"""
    if pages_read + pages > plan.pages_per_month:
        left = max(plan.pages_per_month - pages_read, 0)
        raise _refuse(
            plan,
            "pages_per_month",
            _(
                "This file has %(pages)s pages, but only %(left)s of the %(allowance)s pages the %(plan)s plan reads "
                "a month are left. The allowance renews with your billing period."
            )
            % {
                "pages": grouped(pages),
                "left": grouped(left),
                "allowance": grouped(plan.pages_per_month),
                "plan": plan.name,
            },
            lambda better: (
                _("%(plan)s allows %(count)s pages a month.")
                % {"plan": better.name, "count": grouped(better.pages_per_month)}
            ),
            pages=pages,
        )
