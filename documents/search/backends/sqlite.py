"""The search index on SQLite (the embedded default): sqlite-vec's vec0 table and an FTS5 table.

``documents_chunk_vec`` (vec0: the embedding, cosine distance, partitioned by owner, with the
document as a metadata column, so the owner and document filters apply inside the nearest-neighbour
scan, not after it) and ``documents_chunk_fts`` (FTS5, external content: it indexes documents_chunk's
heading and text without a copy, porter stemming like PostgreSQL's 'english'). Triggers on
documents_chunk keep the full text in step and drop a deleted chunk's vector, so deleting chunks
(or their document, by cascade) leaves nothing behind. The migration 0002 creates all of it.

sqlite-vec is loaded into every new SQLite connection (:func:`load_sqlite_vec`, connected to
connection_created by documents.signals); the triggers need it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlite_vec
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections

from documents.search import RRF_K, Passage, candidates, max_distance, query_words

if TYPE_CHECKING:
    from documents.models import Chunk


def load_sqlite_vec(sender, connection, **kwargs) -> None:
    """connection_created's receiver: load sqlite-vec into a new SQLite connection."""
    if connection.vendor != "sqlite":
        return
    raw = connection.connection
    if not hasattr(raw, "enable_load_extension"):
        raise ImproperlyConfigured(
            "This Python's sqlite3 module cannot load extensions, and the search index needs sqlite-vec: "
            "install sqlean-py (config/settings.py then uses its sqlite3 module) or a Python built with "
            "--enable-loadable-sqlite-extensions."
        )
    raw.enable_load_extension(True)
    try:
        sqlite_vec.load(raw)
    finally:
        raw.enable_load_extension(False)


def index_chunks(chunks: list[Chunk], vectors: list[list[float]]) -> None:
    rows = [
        (chunk.pk, sqlite_vec.serialize_float32(vector), chunk.owner_id, chunk.document_id)
        for chunk, vector in zip(chunks, vectors, strict=True)
    ]
    with connection.cursor() as cursor:
        # vec0 has no upsert: a chunk indexed again replaces its vector.
        cursor.executemany("DELETE FROM documents_chunk_vec WHERE rowid = %s", [(row[0],) for row in rows])
        cursor.executemany(
            "INSERT INTO documents_chunk_vec (rowid, embedding, owner_id, document_id) VALUES (%s, %s, %s, %s)",
            rows,
        )


# The same shape as the PostgreSQL query: two ranked lists, each filtered by owner and documents inside
# its own search (vec0's partition key and metadata column; a join for FTS5), fused by reciprocal rank.
# Formatted in: only the placeholders of the document ids and the constant RRF_K. MATERIALIZED: each
# list is computed once; inlined, SQLite ran the nearest-neighbour search again for every passage it
# joined (3 s instead of 8 ms at 2,000 passages).
_VECTOR = """vector_hits AS MATERIALIZED (
    SELECT id, distance, row_number() OVER (ORDER BY distance) AS rank FROM (
        SELECT rowid AS id, distance FROM documents_chunk_vec
        WHERE embedding MATCH %s AND k = %s AND owner_id = %s AND document_id IN ({in_documents})
    )
    WHERE distance <= %s
)"""
_TEXT = """text_hits AS MATERIALIZED (
    SELECT id, row_number() OVER (ORDER BY relevance, id) AS rank FROM (
        SELECT c.id, bm25(documents_chunk_fts) AS relevance
        FROM documents_chunk_fts JOIN documents_chunk c ON c.id = documents_chunk_fts.rowid
        WHERE documents_chunk_fts MATCH %s AND c.owner_id = %s AND c.document_id IN ({in_documents})
        ORDER BY relevance, c.id LIMIT %s
    )
)"""
_FUSE = """
WITH {ctes},
fused AS MATERIALIZED (
    SELECT id, sum(1.0 / ({rrf} + rank)) AS score, max(by_vector) AS by_vector, max(by_text) AS by_text,
        min(distance) AS distance
    FROM ({hits}) GROUP BY id
)
SELECT c.id, c.document_id, d.name, c.page, c.heading, c.text, f.score, f.by_vector, f.by_text, 1 - f.distance
FROM fused f JOIN documents_chunk c ON c.id = f.id JOIN documents_document d ON d.id = c.document_id
WHERE c.owner_id = %s
ORDER BY f.score DESC, c.id
LIMIT %s
"""


def search(
    owner_id: int, document_ids: list[int], query: str, vector: list[float] | None, k: int, *, by_vector: bool = True
) -> list[Passage]:
    n = candidates(k)
    in_documents = ", ".join(["%s"] * len(document_ids))
    # FTS5's query language: quoted words joined by OR (any of the question's words).
    words = " OR ".join(f'"{word}"' for word in query_words(query))
    ctes, hits, params = [], [], []
    if by_vector:
        ctes.append(_VECTOR.format(in_documents=in_documents))
        params += [sqlite_vec.serialize_float32(vector), n, owner_id, *document_ids, max_distance()]
        hits.append("SELECT id, rank, 1 AS by_vector, 0 AS by_text, distance FROM vector_hits")
    if words:
        ctes.append(_TEXT.format(in_documents=in_documents))
        params += [words, owner_id, *document_ids, n]
        hits.append("SELECT id, rank, 0 AS by_vector, 1 AS by_text, NULL AS distance FROM text_hits")
    if not hits:
        return []
    sql = _FUSE.format(ctes=", ".join(ctes), rrf=RRF_K, hits=" UNION ALL ".join(hits))
    params += [owner_id, k]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [Passage.from_row(row) for row in rows]


def install(db) -> None:
    """Create the index (idempotent: the migration 0002 runs it, and post_migrate again, because a
    later migration that rebuilds documents_chunk, as SQLite's ALTER does, drops its triggers)."""
    dimensions = int(settings.RETRIEVAL_EMBEDDING_DIMENSIONS)
    with db.cursor() as cursor:
        for statement in (
            "CREATE VIRTUAL TABLE IF NOT EXISTS documents_chunk_fts USING fts5(heading, text, "
            "content='documents_chunk', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
            f"CREATE VIRTUAL TABLE IF NOT EXISTS documents_chunk_vec USING vec0(embedding float[{dimensions}] "
            "distance_metric=cosine, owner_id integer partition key, document_id integer)",
            "CREATE TRIGGER IF NOT EXISTS documents_chunk_fts_insert AFTER INSERT ON documents_chunk BEGIN "
            "INSERT INTO documents_chunk_fts (rowid, heading, text) VALUES (new.id, new.heading, new.text); END",
            "CREATE TRIGGER IF NOT EXISTS documents_chunk_fts_delete AFTER DELETE ON documents_chunk BEGIN "
            "INSERT INTO documents_chunk_fts (documents_chunk_fts, rowid, heading, text) "
            "VALUES ('delete', old.id, old.heading, old.text); "
            "DELETE FROM documents_chunk_vec WHERE rowid = old.id; END",
            "CREATE TRIGGER IF NOT EXISTS documents_chunk_fts_update AFTER UPDATE OF heading, text ON documents_chunk "
            "BEGIN INSERT INTO documents_chunk_fts (documents_chunk_fts, rowid, heading, text) "
            "VALUES ('delete', old.id, old.heading, old.text); "
            "INSERT INTO documents_chunk_fts (rowid, heading, text) VALUES (new.id, new.heading, new.text); END",
        ):
            cursor.execute(statement)


def reinstall_triggers(sender, using, **kwargs) -> None:
    """post_migrate's receiver: put back triggers a table rebuild dropped (where the index exists)."""
    db = connections[using]
    if db.vendor == "sqlite" and "documents_chunk_vec" in db.introspection.table_names():
        install(db)


def uninstall(db) -> None:
    with db.cursor() as cursor:
        for statement in (
            "DROP TRIGGER IF EXISTS documents_chunk_fts_insert",
            "DROP TRIGGER IF EXISTS documents_chunk_fts_delete",
            "DROP TRIGGER IF EXISTS documents_chunk_fts_update",
            "DROP TABLE IF EXISTS documents_chunk_vec",
            "DROP TABLE IF EXISTS documents_chunk_fts",
        ):
            cursor.execute(statement)
