"""Retrieval's behaviour, the same on every store: run by tests/documents/test_search.py once per store
(real pgvector on a pgserver PostgreSQL, and SQLite with sqlite-vec), each in a pytest of its own
whose DATABASE_URL names that store. Not collected on its own (not test_*.py): on the suite's
PostgreSQL, which has no pgvector, the vector cases could not pass.

Vectors are the simulated embedding model's (simulator/embedding.py: hashed words and character
n-grams), so "by meaning" here means by shared word pieces, which full text cannot see.
"""

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from documents import search
from documents.models import Chunk, Document
from simulator.embedding import embed_text
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def embed(text: str) -> list[float]:
    return embed_text(text, settings.RETRIEVAL_EMBEDDING_DIMENSIONS)


def add_document(owner, name: str, passages: list[str], heading: str = "") -> Document:
    document = Document.objects.create(owner=owner, name=name, file=f"documents/{name}", state=Document.State.READY)
    chunks = [
        Chunk.objects.create(document=document, owner=owner, ordinal=i, page=i + 1, heading=heading, text=text)
        for i, text in enumerate(passages)
    ]
    search.index_chunks(chunks, [embed(f"{heading}\n{text}") for text in passages])
    return document


def find(owner, documents, query: str, k: int = 5, **kwargs) -> list[search.Passage]:
    return search.search(owner.pk, [d.pk for d in documents], query, embed(query), k, **kwargs)


@pytest.fixture
def ada():
    return make_user("ada@example.com")


@pytest.fixture
def bob():
    return make_user("bob@example.com")


def test_the_store_is_the_one_asked_for():
    """The runner sets STORE; a run on the wrong database would prove nothing."""
    import os

    store = os.environ["RETRIEVAL_STORE"]
    assert connection.vendor == {"pgvector": "postgresql", "sqlite": "sqlite"}[store]
    if store == "pgvector":
        from documents.search.backends import postgresql

        assert postgresql.has_vectors()


def test_a_passage_found_by_meaning_alone(ada):
    """No word of the question is in the passage (so full text cannot find it); its word pieces are."""
    doc = add_document(
        ada,
        "notes.md",
        [
            "Postgres keeps every embedding beside its passage.",
            "The garden needs water twice a week in summer.",
            "Invoices are sent on the first working day of the month.",
        ],
    )
    [best, *_] = find(ada, [doc], "postgresql")
    assert best.text.startswith("Postgres keeps")
    assert best.by_vector and not best.by_text
    assert not find(ada, [doc], "postgresql", by=(search.TEXT,))


def test_a_question_the_files_do_not_touch_finds_nothing(ada):
    """Nothing in common, by words or by meaning: no passage at all (the prompt then says the files do
    not have it), rather than the least bad ones. The vector side keeps only passages at least
    RETRIEVAL_MIN_SIMILARITY alike (cosine)."""
    doc = add_document(
        ada,
        "varnholm.pdf",
        [
            "The lighthouse keeper on Varnholm Island keeps eleven brass lanterns polished every morning.",
            "The ferry to Varnholm leaves the harbour at seven and returns before the evening tide.",
            "The secret ingredient of the Varnholm fish soup is smoked juniper, added at the very end.",
        ],
    )
    assert find(ada, [doc], "Who won the 1954 World Cup?") == []
    assert find(ada, [doc], "Tell me a joke about cats") == []
    [best, *_] = find(ada, [doc], "When does the ferry to Varnholm leave the harbour?")
    assert best.page == 2


def test_similarity_says_how_close_a_passage_is(ada, settings):
    settings.RETRIEVAL_MIN_SIMILARITY = -1.0  # no floor: the unlike passage too, to read its similarity
    doc = add_document(ada, "same.md", ["Lighthouses guide ships at night.", "Bread rises in a warm kitchen."])
    [same, other] = find(ada, [doc], "Lighthouses guide ships at night.", by=(search.VECTOR,))
    assert same.similarity == pytest.approx(1.0, abs=1e-4)
    assert other.similarity < 0.3
    [by_words] = find(ada, [doc], "bread", k=1, by=(search.TEXT,))
    assert by_words.similarity is None


def test_a_passage_found_by_its_exact_words(ada):
    doc = add_document(
        ada,
        "runbook.md",
        [
            "Error QX-7731 means the disk quota was exceeded; free space and retry.",
            "Errors in the queue are retried three times before an alert.",
            "The quota of each team is set by its plan.",
        ],
    )
    [best, *_] = find(ada, [doc], "what does QX-7731 mean")
    assert best.text.startswith("Error QX-7731")
    assert best.by_text and best.by_vector
    [(passage)] = find(ada, [doc], "QX-7731", k=1, by=(search.TEXT,))
    assert passage.text == best.text and passage.page == 1 and passage.document_name == "runbook.md"


def test_passages_carry_their_page_heading_and_document(ada):
    doc = add_document(ada, "guide.pdf", ["First page.", "The warranty lasts five years."], heading="Terms / Warranty")
    [best, *_] = find(ada, [doc], "how long is the warranty")
    assert (best.document_id, best.document_name, best.page, best.heading) == (
        doc.pk,
        "guide.pdf",
        2,
        "Terms / Warranty",
    )
    assert best.chunk_id == Chunk.objects.get(document=doc, ordinal=1).pk
    assert best.score > 0


# A small labelled set: questions and the passage that answers each. Half are answered by a long
# passage holding the question's exact word once, beside a short passage that merely spells alike
# (the simulated vectors prefer the short look-alike, full text finds the word); half by a passage that
# spells the question's word differently (full text cannot match it, the vectors can). Fused, all six
# are found first; each search alone finds three.
LIBRARY = [
    "In the old quarry the guide showed us the tunnels, the rusted rails, the lamps the miners carried, "
    "the chapel they built, and at the far end the bats hanging from the ceiling while the rain kept falling outside.",
    "Batsman stats.",
    "The museum's new wing opened in spring with paintings, sculpture, a small cinema, a cafe on the roof, "
    "a shop for prints and posters, and a room of ants in glass cases that children queue to see.",
    "Antsy pants.",
    "The farm sells eggs, honey, apples and cider; its barns hold tractors, hay, two old horses, "
    "a goat called Pip and, in the rafters above the cider press, a pair of owls that hunt the mice.",
    "Bowls and howls.",
    "Postgres replicas fall behind when the disks are slow.",
    "Photosynthesis turns light into chemical energy in leaves.",
    "The tokenizers split words into pieces before the model reads them.",
]
QUESTIONS = [
    ("bats", 0),
    ("ants", 2),
    ("owls", 4),
    ("postgresql replication", 6),
    ("photosynthetic", 7),
    ("tokenisation", 8),
]


def hits_at_1(owner, doc, by) -> int:
    found = 0
    for question, answer in QUESTIONS:
        passages = find(owner, [doc], question, k=1, by=by)
        found += bool(passages) and passages[0].text == LIBRARY[answer]
    return found


def test_hybrid_search_beats_each_search_alone(ada, settings):
    # Ranking, without the relevance floor (tested on its own above): the simulated vectors' true but
    # weak matches ("tokenisation", 0.19 alike) are below the floor tuned for its noise.
    settings.RETRIEVAL_MIN_SIMILARITY = 0.0
    doc = add_document(ada, "library.md", LIBRARY)
    hybrid = hits_at_1(ada, doc, (search.VECTOR, search.TEXT))
    vector = hits_at_1(ada, doc, (search.VECTOR,))
    text = hits_at_1(ada, doc, (search.TEXT,))
    assert (hybrid, vector, text) == (6, 3, 3)


def test_top_k_is_across_all_documents_not_per_file(ada):
    """The k best passages of the conversation's files, wherever they are: one file may give them all."""
    relevant = add_document(
        ada,
        "solar.md",
        [
            "Solar panels turn sunlight into electricity.",
            "Solar panels lose some output in hot weather.",
            "Solar panels need cleaning twice a year.",
        ],
    )
    others = [add_document(ada, f"other{i}.md", [f"Recipe {i}: bake the bread for forty minutes."]) for i in range(3)]
    passages = find(ada, [relevant, *others], "solar panels output", k=3)
    assert [p.document_id for p in passages] == [relevant.pk] * 3
    assert passages[0].text == "Solar panels lose some output in hot weather."
    assert len(find(ada, [relevant, *others], "solar panels bread", k=5)) == 5
    assert {p.document_id for p in find(ada, [relevant, *others], "bake bread", k=3)} == {d.pk for d in others}


def test_another_owners_passages_are_never_returned(ada, bob):
    """Bob's passage matches best, and even his document's id in the request does not reach it."""
    mine = add_document(ada, "mine.md", ["The meeting moved to Tuesday."])
    theirs = add_document(bob, "theirs.md", ["The launch code is AZ-55, kept in the meeting room safe."])
    passages = search.search(
        ada.pk, [mine.pk, theirs.pk], "launch code AZ-55 meeting", embed("launch code AZ-55 meeting"), 10
    )
    assert [p.document_id for p in passages] == [mine.pk]
    for by in ((search.VECTOR,), (search.TEXT,)):
        assert search.search(ada.pk, [theirs.pk], "launch code AZ-55", embed("launch code AZ-55"), 10, by=by) == []
    assert [p.document_id for p in find(bob, [theirs], "launch code")] == [theirs.pk]


def test_only_the_documents_asked_for(ada):
    one = add_document(ada, "one.md", ["Alpacas live in the Andes."])
    two = add_document(ada, "two.md", ["Alpacas are shorn once a year."])
    assert [p.document_id for p in find(ada, [two], "alpacas")] == [two.pk]
    assert {p.document_id for p in find(ada, [one, two], "alpacas")} == {one.pk, two.pk}


def test_removing_a_document_removes_it_from_the_index(ada):
    kept = add_document(ada, "kept.md", ["Hedgehogs hibernate in winter."])
    removed = add_document(ada, "removed.md", ["Hedgehogs eat beetles and worms."])
    assert {p.document_id for p in find(ada, [kept, removed], "hedgehogs")} == {kept.pk, removed.pk}
    search.remove_document(removed.pk)
    for by in ((search.VECTOR, search.TEXT), (search.VECTOR,), (search.TEXT,)):
        assert [p.document_id for p in find(ada, [kept, removed], "hedgehogs beetles", by=by)] == [kept.pk]
    assert not Chunk.objects.filter(document=removed).exists()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM documents_chunk_vec")
            assert cursor.fetchone() == (1,)


def test_deleting_a_document_leaves_nothing_in_the_index(ada):
    doc = add_document(ada, "gone.md", ["Otters hold hands while they sleep."])
    other = add_document(ada, "stays.md", ["Owls sleep by day."])
    doc.delete()
    assert [p.document_id for p in find(ada, [doc, other], "otters sleep")] == [other.pk]


def test_indexing_a_chunk_again_replaces_its_vector(ada):
    doc = add_document(ada, "draft.md", ["Volcanoes erupt when pressure builds."])
    chunk = Chunk.objects.get(document=doc)
    search.index_chunks([chunk], [embed("glaciers move slowly")])
    [best] = find(ada, [doc], "glaciers", by=(search.VECTOR,))
    assert best.chunk_id == chunk.pk
    assert find(ada, [doc], "volcanoes erupt", by=(search.VECTOR,)) == []  # the old vector is gone


def test_a_vector_of_the_wrong_size_is_refused(ada):
    doc = add_document(ada, "x.md", ["Text."])
    with pytest.raises(ValueError, match="dimensions"):
        search.index_chunks(list(Chunk.objects.filter(document=doc)), [[1.0, 0.0]])
    with pytest.raises(ValueError, match="dimensions"):
        search.search(ada.pk, [doc.pk], "text", [1.0], 5)


def test_postgresql_searches_through_its_indexes(ada):
    """On a table of some size, PostgreSQL's plan for the query goes through the HNSW index for the
    vectors and the GIN index for the words (the ones the migration built once): no scan of every
    passage, no index built per query."""
    assert connection.vendor == "postgresql"  # tests/documents/test_search.py runs it on pgvector only
    doc = add_document(ada, "plan.md", ["Anything at all."])
    Chunk.objects.bulk_create(
        Chunk(document=doc, owner=ada, ordinal=i, text=f"Filler passage number {i}.") for i in range(1, 3000)
    )
    with connection.cursor() as cursor:
        # Vectors of their own for the filler: random, one per row (the subquery refers to the row).
        cursor.execute(
            "UPDATE documents_chunk c SET embedding = ARRAY(SELECT random() + 0 * c.id "
            "FROM generate_series(1, %s))::vector WHERE embedding IS NULL",
            [settings.RETRIEVAL_EMBEDDING_DIMENSIONS],
        )
        cursor.execute("ANALYZE documents_chunk")
    with CaptureQueriesContext(connection) as queries:
        find(ada, [doc], "anything")
    [sql] = [query["sql"] for query in queries.captured_queries if "fused" in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "documents_chunk_embedding_hnsw" in plan, plan
    assert "documents_chunk_search_text" in plan, plan


def test_any_question_text_is_searched_as_words(ada, settings):
    """Quotes, operators and stop words are words to look for, never query syntax."""
    settings.RETRIEVAL_MIN_SIMILARITY = -1.0  # no floor: every query must run both searches to the end
    doc = add_document(ada, "syntax.md", ["Quotes and the NEAR operator."])
    for query in ['"); DROP TABLE documents_chunk; --', "NEAR AND OR NOT * ^ :", "the of a", "'", "", "_ \\"]:
        assert [p.document_id for p in find(ada, [doc], query)] == [doc.pk]  # the vector still finds it
    [best] = find(ada, [doc], 'operator" OR "x', by=(search.TEXT,))
    assert best.document_id == doc.pk
