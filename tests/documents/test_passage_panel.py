"""What a citation opens (the passage, with the text around it on the same page, its owner's only), and
what retrieval finds when the question cannot be embedded."""

import pytest

from documents.models import Chunk, Document
from documents.retrieval import passage_for, retrieve

pytestmark = pytest.mark.django_db


def test_a_passage_comes_with_its_neighbours_on_its_page_only(user, other_user):
    document = Document.objects.create(owner=user, name="guide.pdf", file="documents/guide.pdf", state="ready")
    texts = [
        (1, "End of page one."),
        (2, "Start of page two."),
        (2, "The fact."),
        (2, "More of page two."),
        (3, "Page three."),
    ]
    chunks = [
        Chunk.objects.create(document=document, owner=user, ordinal=n, page=page, text=text)
        for n, (page, text) in enumerate(texts)
    ]

    cited, before, after = passage_for(user.pk, chunks[2].pk)
    assert (cited.text, before.text, after.text) == ("The fact.", "Start of page two.", "More of page two.")

    cited, before, after = passage_for(user.pk, chunks[1].pk)
    assert before is None and after.text == "The fact."  # page one's text is not shown under "Page 2"

    with pytest.raises(Chunk.DoesNotExist):
        passage_for(other_user.pk, chunks[2].pk)


def test_without_an_embedding_model_a_chat_with_files_still_finds_passages_by_their_words(user, settings):
    settings.RETRIEVAL_EMBEDDING_MODEL = ""
    settings.INFERENCE_EMBEDDING_MODELS = []
    document = Document.objects.create(owner=user, name="ferry.md", file="documents/ferry.md", state="ready")
    Chunk.objects.create(document=document, owner=user, ordinal=0, page=None, text="The ferry leaves at seven.")
    Chunk.objects.create(document=document, owner=user, ordinal=1, page=None, text="The soup has juniper.")

    found = retrieve(user.pk, [document], "When does the ferry leave?")

    assert [p.text for p in found.passages] == ["The ferry leaves at seven."]
    assert found.passages[0].by_text and not found.passages[0].by_vector
