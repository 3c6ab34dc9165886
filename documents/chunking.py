"""Passages out of paragraphs: structure-aware chunks of about a target size, overlapping a little.

A chunk never crosses a heading: a new section starts a new chunk, so a passage's heading path is
true of all of it. Nor does it cross a page: a citation names the page, and the passage it opens is
all on it, overlap included (a sentence broken across a page break is the price). Within a section and
a page, whole paragraphs are gathered until the next would pass the target; a paragraph longer than the
target on its own is cut at sentence ends (then at spaces, then anywhere). Each chunk after the first
of a section's page begins with the last `overlap` tokens of the one before (cut at a sentence or word
boundary), so a fact split between two chunks is whole in one of them.

Sizes are the product's token estimate (config.tokens), the same one that budgets the chat's window.
Pure functions: paragraphs in, passages out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from config.tokens import CHARS_PER_TOKEN, estimate_tokens
from documents.extract import Block

#: About a page of prose: big enough to carry a fact with its context, small enough to cite precisely.
TARGET_TOKENS = 400
OVERLAP_TOKENS = 50
#: How headings are joined in a chunk's heading path (Chunk.heading).
HEADING_SEPARATOR = " / "

_SENTENCE_END = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\n+")  # Latin and CJK sentence ends


@dataclass(frozen=True)
class Piece:
    """One passage, ready to be saved as a Chunk."""

    text: str
    page: int | None
    heading: str
    tokens: int


def chunk_size_for(window_tokens: int | None) -> tuple[int, int]:
    """The target and overlap for an embedding model whose window is `window_tokens`: at most half the
    window, since the estimate can undercount (code, other scripts) and the engine refuses an input
    longer than its window."""
    target = TARGET_TOKENS if not window_tokens else max(16, min(TARGET_TOKENS, window_tokens // 2))
    return target, min(OVERLAP_TOKENS, target // 4)


def split_long(text: str, target: int) -> list[str]:
    """`text` cut into parts of at most `target` tokens: at sentence ends, else at spaces, else anywhere."""
    if estimate_tokens(text) <= target:
        return [text]
    parts: list[str] = []
    for unit in _units(text, target):
        if parts and estimate_tokens(parts[-1] + " " + unit) <= target:
            parts[-1] = parts[-1] + " " + unit
        else:
            parts.append(unit)
    return parts


def _units(text: str, target: int) -> Iterable[str]:
    """Sentences of `text`, each further cut to fit `target` if it is too long on its own."""
    for sentence in (s.strip() for s in _SENTENCE_END.split(text)):
        if not sentence:
            continue
        if estimate_tokens(sentence) <= target:
            yield sentence
            continue
        words: list[str] = []
        for word in sentence.split():
            while estimate_tokens(word) > target:  # one "word" longer than a chunk: cut by bytes
                head = _prefix_of_tokens(word, target)
                if words:
                    yield " ".join(words)
                    words = []
                yield head
                word = word[len(head) :]
            if words and estimate_tokens(" ".join([*words, word])) > target:
                yield " ".join(words)
                words = []
            words.append(word)
        if words:
            yield " ".join(words)


def _prefix_of_tokens(text: str, tokens: int) -> str:
    """The longest prefix of `text` estimated at no more than `tokens` (at least one character)."""
    budget = tokens * CHARS_PER_TOKEN
    size, end = 0, 0
    for end, char in enumerate(text, start=1):
        size += len(char.encode("utf-8"))
        if size > budget:
            return text[: max(1, end - 1)]
    return text[:end]


def tail(text: str, tokens: int) -> str:
    """The end of `text` worth about `tokens`: whole sentences if they fit, else whole words."""
    if tokens <= 0:
        return ""
    if estimate_tokens(text) <= tokens:
        return text
    sentences = [s for s in _SENTENCE_END.split(text) if s.strip()]
    kept: list[str] = []
    for sentence in reversed(sentences):
        if estimate_tokens(" ".join([sentence.strip(), *kept])) > tokens:
            break
        kept.insert(0, sentence.strip())
    if kept:
        return " ".join(kept)
    words = text.split()
    kept = []
    for word in reversed(words):
        if estimate_tokens(" ".join([word, *kept])) > tokens:
            break
        kept.insert(0, word)
    return " ".join(kept)


def chunk(blocks: Sequence[Block], *, target: int = TARGET_TOKENS, overlap: int = OVERLAP_TOKENS) -> list[Piece]:
    """The passages of a document's paragraphs, in order (see the module's docstring)."""
    if overlap >= target:
        raise ValueError("The overlap must be smaller than the chunk.")
    pieces: list[Piece] = []
    section: tuple[str, ...] | None = None
    parts: list[str] = []  # the current chunk's own paragraphs
    page: int | None = None
    carried = ""  # the overlap it starts with

    def emit() -> None:
        nonlocal parts, carried
        if not parts:
            return
        own = "\n\n".join(parts)
        text = f"{carried}\n\n{own}" if carried else own
        heading = HEADING_SEPARATOR.join(section or ())
        pieces.append(Piece(text=text, page=page, heading=heading, tokens=estimate_tokens(text)))
        carried = tail(own, overlap)
        parts = []

    for block in blocks:
        if block.headings != section:
            emit()
            section, carried = block.headings, ""
        elif parts and block.page != page:
            emit()  # a citation names one page: a chunk's text is all on it
            carried = ""
        room = target - (estimate_tokens(carried) + 1 if carried else 0)
        for text in split_long(block.text.strip(), max(1, room)):
            if not text:
                continue
            if parts and (block.page != page or estimate_tokens("\n\n".join([carried, *parts, text])) > target):
                emit()
            if not parts:
                page = block.page
                if carried and estimate_tokens(f"{carried}\n\n{text}") > target:
                    carried = tail(carried, target - estimate_tokens(text) - 1)
            parts.append(text)
    emit()
    return pieces
