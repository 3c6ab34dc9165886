"""What a plan allows of people's files: the largest file, files per collection, storage, and pages read
a month. The documents app counts (it owns the files) and asks here; the rule and its sentence are
decided here only. Every refusal is a 413 naming the limit, and the cheapest plan that allows more."""

from __future__ import annotations

from collections.abc import Callable

from billing import selectors
from billing.models import Plan
from config.refusals import TooLarge


class FileLimit(TooLarge):
    code = "file_limit"


def in_bytes(size: int) -> str:
    """A size as people read it: "850 KB", "12.5 MB", "2 GB" (binary units, one decimal below 10)."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}".replace(".0 ", " ") if value < 10 else f"{round(value):,} {unit}"
    return f"{size:,} bytes"


def _refuse(plan: Plan, field: str, message: str, offer: Callable[[int], str], **details) -> FileLimit:
    better = selectors.cheapest_plan_with_more(plan, field)
    if better is not None:
        message += f" {better.name} allows {offer(getattr(better, field))}."
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
            f"This file is {in_bytes(size_bytes)}; the {plan.name} plan allows files up to "
            f"{in_bytes(plan.max_file_bytes)}.",
            lambda n: f"files up to {in_bytes(n)}",
            param="file",
        )
    if files_in_collection is not None and files_in_collection >= plan.files_per_collection:
        raise _refuse(
            plan,
            "files_per_collection",
            f"This collection holds {files_in_collection:,} files, the most the {plan.name} plan allows. "
            "Delete one, or start another collection.",
            lambda n: f"{n:,} files per collection",
            param="collection",
        )
    if stored_bytes + size_bytes > plan.storage_bytes:
        raise _refuse(
            plan,
            "storage_bytes",
            f"Your files take {in_bytes(stored_bytes)} of the {in_bytes(plan.storage_bytes)} the {plan.name} plan "
            f"allows, and this one is {in_bytes(size_bytes)}. Delete files you no longer need.",
            lambda n: f"{in_bytes(n)} of files",
            param="file",
        )


def check_pages(plan: Plan, *, pages: int, pages_read: int) -> None:
    """May a file of `pages` pages be read, when `pages_read` were read this billing period?"""
    if pages_read + pages > plan.pages_per_month:
        left = max(plan.pages_per_month - pages_read, 0)
        raise _refuse(
            plan,
            "pages_per_month",
            f"This file has {pages:,} pages, but only {left:,} of the {plan.pages_per_month:,} pages the "
            f"{plan.name} plan reads a month are left. The allowance renews with your billing period.",
            lambda n: f"{n:,} pages a month",
            pages=pages,
        )
