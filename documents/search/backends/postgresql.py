"""The search index on PostgreSQL: pgvector (HNSW, cosine) and full-text search (tsvector, GIN).

The columns live on documents_chunk itself, outside Django's model (the migration 0002 adds them):
``embedding vector(N)`` with an HNSW index, present only where the server has pgvector, and
``search_text``, a generated tsvector over heading and text (English configuration) with a GIN
index, always present. The embedding column is not a model field because it exists only where the
extension does: a field would make every query of Chunk fail on a server without it.

Without pgvector (the server lacked the extension when the migration ran), search is full-text only
and says so once in the log; index_chunks keeps nothing for the vectors. Installing pgvector later
and re-running the migration's work (``documents.migrations`` 0002 is idempotent: migrate to 0001
and back) adds the column; documents indexed before then need re-indexing for their vectors.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from documents.search import RRF_K, Passage, candidates, max_distance, query_words

if TYPE_CHECKING:
    from documents.models import Chunk

logger = logging.getLogger(__name__)

#: Whether each database (by name) has the embedding column; read once per process.
_has_vectors: dict[str, bool] = {}


def has_vectors() -> bool:
    name = connection.settings_dict["NAME"]
    if name not in _has_vectors:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM information_schema.columns "
                "WHERE table_name = 'documents_chunk' AND column_name = 'embedding' "
                "AND table_schema = current_schema()"
            )
            _has_vectors[name] = cursor.fetchone() is not None
        if not _has_vectors[name]:
            logger.warning(
                "PostgreSQL has no pgvector here (documents_chunk.embedding is missing): retrieval is "
                "full-text only. Install the extension and re-run migration documents 0002 for vector search."
            )
    return _has_vectors[name]


def install(db) -> None:
    """Create the index (idempotent; the migration 0002 runs it): full text always, vectors where
    the server has pgvector. Without it, a warning, and search is full-text only."""
    with db.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE documents_chunk ADD COLUMN IF NOT EXISTS search_text tsvector GENERATED ALWAYS AS "
            "(setweight(to_tsvector('english', heading), 'A') || setweight(to_tsvector('english', text), 'B')) STORED"
        )
        cursor.execute(
            "CREATE INDEX IF NOT EXISTS documents_chunk_search_text ON documents_chunk USING gin (search_text)"
        )
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            logger.warning(
                "This PostgreSQL server has no pgvector: the search index is full-text only. Install pgvector "
                "(the compose file's image has it) and re-run migration documents 0002 for vector search."
            )
            return
        try:
            with transaction.atomic(using=db.alias):  # a savepoint: a refusal must not abort the migration
                cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except DatabaseError as error:
            logger.warning(
                "CREATE EXTENSION vector was refused (%s): the search index is full-text only. A superuser can "
                "run it; then re-run migration documents 0002.",
                error,
            )
            return
        dimensions = int(settings.RETRIEVAL_EMBEDDING_DIMENSIONS)
        cursor.execute(f"ALTER TABLE documents_chunk ADD COLUMN IF NOT EXISTS embedding vector({dimensions})")
        cursor.execute(
            "CREATE INDEX IF NOT EXISTS documents_chunk_embedding_hnsw ON documents_chunk "
            "USING hnsw (embedding vector_cosine_ops)"
        )
    _has_vectors.clear()


def uninstall(db) -> None:
    with db.cursor() as cursor:
        cursor.execute("ALTER TABLE documents_chunk DROP COLUMN IF EXISTS embedding, DROP COLUMN IF EXISTS search_text")
    _has_vectors.clear()


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def index_chunks(chunks: list[Chunk], vectors: list[list[float]]) -> None:
    if not has_vectors():
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            "UPDATE documents_chunk SET embedding = %s::vector WHERE id = %s",
            [(_literal(vector), chunk.pk) for chunk, vector in zip(chunks, vectors, strict=True)],
        )


# Each list is its own CTE, filtered by owner and documents inside it (so the HNSW scan, iterative
# since pgvector 0.8, keeps looking until it has n of this owner's passages), ranked by row_number
# over its own small result, and the two are fused in SQL: one round trip, nothing crosses owners.
_VECTOR = """
vector_hits AS (
    SELECT id, distance, row_number() OVER (ORDER BY distance) AS rank FROM (
        SELECT c.id, c.embedding <=> %(vector)s::vector AS distance
        FROM documents_chunk c
        WHERE c.owner_id = %(owner)s AND c.document_id = ANY(%(documents)s::bigint[]) AND c.embedding IS NOT NULL
        ORDER BY distance LIMIT %(n)s
    ) nearest
    WHERE distance <= %(max_distance)s
),"""
_TEXT = """
text_hits AS (
    SELECT id, row_number() OVER (ORDER BY relevance DESC, id) AS rank FROM (
        SELECT c.id, ts_rank_cd(c.search_text, q) AS relevance
        FROM documents_chunk c, to_tsquery('english', %(words)s) q
        WHERE c.owner_id = %(owner)s AND c.document_id = ANY(%(documents)s::bigint[]) AND c.search_text @@ q
        ORDER BY relevance DESC, c.id LIMIT %(n)s
    ) matching
),"""
_FUSE = """
hits AS ({hits}),
fused AS (
    SELECT id, sum(1.0 / ({rrf} + rank)) AS score, bool_or(source = 'v') AS by_vector, bool_or(source = 't') AS by_text,
        min(distance) AS distance
    FROM hits GROUP BY id
)
SELECT c.id, c.document_id, d.name, c.page, c.heading, c.text, f.score, f.by_vector, f.by_text, 1 - f.distance
FROM fused f JOIN documents_chunk c ON c.id = f.id JOIN documents_document d ON d.id = c.document_id
WHERE c.owner_id = %(owner)s
ORDER BY f.score DESC, c.id
LIMIT %(k)s
"""


def search(
    owner_id: int, document_ids: list[int], query: str, vector: list[float] | None, k: int, *, by_vector: bool = True
) -> list[Passage]:
    vectors = by_vector and has_vectors()
    # Quoted words joined by OR: a question's words, any of which may be in the passage.
    words = " | ".join(f"'{word}'" for word in query_words(query))
    parts, hits = [], []
    if vectors:
        parts.append(_VECTOR)
        hits.append("SELECT id, rank, 'v' AS source, distance FROM vector_hits")
    if words:
        parts.append(_TEXT)
        hits.append("SELECT id, rank, 't' AS source, NULL::float8 AS distance FROM text_hits")
    if not hits:
        return []
    sql = "WITH" + "".join(parts) + _FUSE.format(hits=" UNION ALL ".join(hits), rrf=RRF_K)
    n = candidates(k)
    params = {
        "owner": owner_id,
        "documents": document_ids,
        "vector": _literal(vector) if vectors else None,
        "max_distance": max_distance(),
        "words": words,
        "n": n,
        "k": k,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        if vectors:
            # Filtered HNSW scans return too few rows with the default 40 candidates and no iteration.
            cursor.execute(f"SET LOCAL hnsw.ef_search = {min(max(n, 40), 1000)}")
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [Passage.from_row(row) for row in rows]
