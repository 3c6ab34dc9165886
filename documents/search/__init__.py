"""The search index over people's passages: vectors and full text, one backend per database.

Three functions, the same on every database (the default connection's vendor picks the backend):

    index_chunks(chunks, vectors)
        Store each chunk's vector (RETRIEVAL_EMBEDDING_DIMENSIONS floats). Chunks are saved rows of one
        document. Their text is full-text searchable as soon as the rows are saved (PostgreSQL: a
        generated column; SQLite: triggers), so only the vectors are written here.
    remove_document(document_id)
        Drop the document's passages and every index entry of them (its Chunk rows; the backends'
        own tables follow them). The Document row stays: its state is its caller's.
    search(owner_id, document_ids, query, vector, k)
        The best k passages of those documents, across all of them (not k per file), never another
        owner's: the owner and documents are filtered inside the query that searches. Vector and
        full-text results (each its top max(4k, 50)) are fused by reciprocal rank (RRF, k=60), best first.
        ``by=(VECTOR,)`` or ``by=(TEXT,)`` runs one search alone (the bench's and tests' comparison).
        Each Passage says which search found it and, if the vector search did, its cosine similarity.
        The vector side keeps only passages at least RETRIEVAL_MIN_SIMILARITY alike; the full-text side
        only passages with a word of the question: a question the files do not touch finds nothing.

Backends: documents.search.backends.postgresql (pgvector HNSW + tsvector GIN) and .sqlite (sqlite-vec
vec0 + FTS5). Both index once, in the migration (documents/migrations/0002_search_index.py), never per
query. Full text uses English stemming on both stores (PostgreSQL's 'english' configuration, FTS5's
porter tokenizer): questions are sentences, and without stemming and stop words "caching" misses
"cache" and PostgreSQL's ts_rank (which has no IDF) ranks passages by their "the"s. The cost: other
languages' words are indexed unstemmed (found when spelled alike), and their stop words are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from documents.models import Chunk

#: Reciprocal rank fusion's constant (Cormack et al. 2009): a passage's score is the sum over the
#: result lists it is in of 1 / (RRF_K + its rank there).
RRF_K = 60
_WORD_RE = re.compile(r"\w+")


@dataclass(frozen=True)
class Passage:
    """One passage search found: what the prompt quotes and a citation opens."""

    chunk_id: int
    document_id: int
    document_name: str
    #: The page it starts on, if the document has pages.
    page: int | None
    #: The headings it sits under, outermost first, joined with " / ".
    heading: str
    text: str
    #: Its fused score (higher is better): the sum of 1 / (60 + rank) over the lists that found it.
    score: float
    #: Found by the vector search (meaning), the full-text search (words), or both.
    by_vector: bool
    by_text: bool
    #: Its vector's cosine similarity to the question's (1 is the same direction), when the vector
    #: search found it: the fused score is rank-based and says nothing of how close the best passage
    #: is, this does (a caller can tell "nothing relevant" from it).
    similarity: float | None = None

    @classmethod
    def from_row(cls, row) -> Passage:
        """From a backend's row: the six columns of the chunk, then score, by_vector, by_text, similarity."""
        similarity = None if row[9] is None else float(row[9])
        return cls(*row[:6], float(row[6]), bool(row[7]), bool(row[8]), similarity)


def candidates(k: int) -> int:
    """How many results each of the two searches gives the fusion."""
    return max(4 * k, 50)


#: English stop words (Snowball's list, which PostgreSQL's 'english' configuration drops too): in an
#: any-of-these-words query, "the" or "is" would match every passage, and FTS5 does not drop them itself.
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)


def query_words(query: str) -> list[str]:
    """The query's words but stop words, for an any-of-these-words full-text query (each backend quotes
    them)."""
    return [w for w in dict.fromkeys(_WORD_RE.findall(query.casefold())) if w not in STOP_WORDS]


def max_distance() -> float:
    """The cosine distance past which the vector search keeps nothing: 1 - RETRIEVAL_MIN_SIMILARITY. The
    nearest passages of files that have nothing to do with the question are not an answer; with none,
    the prompt says the files do not have it."""
    return 1.0 - settings.RETRIEVAL_MIN_SIMILARITY


def check_vector(vector: list[float]) -> None:
    expected = settings.RETRIEVAL_EMBEDDING_DIMENSIONS
    if len(vector) != expected:
        raise ValueError(
            f"The vector has {len(vector)} dimensions; the search index holds {expected} "
            "(RETRIEVAL_EMBEDDING_DIMENSIONS)."
        )


def _backend() -> ModuleType:
    """The default connection's backend module, loaded by name as Django loads its own backends (the
    backends import this module's helpers)."""
    if connection.vendor not in ("postgresql", "sqlite"):  # settings allow only these two
        raise ImproperlyConfigured(f"There is no search index for the {connection.vendor} database.")
    return import_module(f"documents.search.backends.{connection.vendor}")


def index_chunks(chunks: list[Chunk], vectors: list[list[float]]) -> None:
    """Store the vectors of saved chunks (one per chunk, in order)."""
    if len(chunks) != len(vectors):
        raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors.")
    for vector in vectors:
        check_vector(vector)
    if chunks:
        _backend().index_chunks(chunks, vectors)


def remove_document(document_id: int) -> None:
    """Remove a document's passages from the index (and its Chunk rows with them)."""
    Chunk.objects.filter(document_id=document_id).delete()


#: The two searches hybrid search fuses; `search(..., by=...)` can run one alone (the benchmark's
#: vector-only and full-text-only recall, the tests' comparison).
VECTOR, TEXT = "vector", "text"


def search(
    owner_id: int,
    document_ids: list[int],
    query: str,
    vector: list[float] | None,
    k: int,
    *,
    by: tuple[str, ...] = (VECTOR, TEXT),
) -> list[Passage]:
    """The owner's best k passages in those documents, best first (see the module's docstring). With no
    `vector` (the question could not be embedded), full text alone."""
    if vector is None:
        by = tuple(b for b in by if b != VECTOR)
    else:
        check_vector(vector)
    if k <= 0 or not document_ids or not by:
        return []
    return _backend().search(
        owner_id, list(document_ids), query if TEXT in by else "", vector, k, by_vector=VECTOR in by
    )
