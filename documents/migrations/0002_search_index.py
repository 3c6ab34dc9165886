"""The search index over chunks, per database vendor (documents.search.backends.<vendor>.install).

PostgreSQL: a generated tsvector column with a GIN index, always; with pgvector available, CREATE
EXTENSION vector, an embedding vector(RETRIEVAL_EMBEDDING_DIMENSIONS) column and its HNSW index
(cosine). Without pgvector, the migration succeeds, warns, and search is full-text only.
SQLite: an FTS5 external-content table, a sqlite-vec vec0 table and the triggers that keep them in
step with documents_chunk. None of it is in Django's model state: the columns and tables are the
search backend's, read and written with SQL.
"""

from django.db import migrations


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        from documents.search.backends import postgresql as backend
    elif vendor == "sqlite":
        from documents.search.backends import sqlite as backend
    else:
        return
    backend.install(schema_editor.connection)


def uninstall(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        from documents.search.backends import postgresql as backend
    elif vendor == "sqlite":
        from documents.search.backends import sqlite as backend
    else:
        return
    backend.uninstall(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("documents", "0001_files_and_passages")]

    operations = [migrations.RunPython(install, uninstall)]
