"""The passages found in a person's files, in the prompt of one answer: where they go, what they may
cost (one budget with the history), how they are numbered for citations, and what the model is told
when nothing matched."""

from django.test import override_settings

from chat.generation.assemble import NOTHING_FOUND, PASSAGES_HEADER, assemble
from config.tokens import estimate_message_tokens
from documents.models import Document
from documents.retrieval import Retrieved
from documents.search import Passage
from tests.chat.factories import conversation_for, exchange


def passage(n: int, text: str, *, page: int | None = None, heading: str = "") -> Passage:
    return Passage(
        chunk_id=100 + n,
        document_id=7,
        document_name="report.pdf",
        page=page,
        heading=heading,
        text=text,
        score=1 / (60 + n),
        by_vector=True,
        by_text=False,
    )


def document(name: str = "report.pdf") -> Document:
    return Document(pk=7, name=name)


def test_passages_come_after_the_history_and_before_the_question_numbered_for_citing(user):
    conv = conversation_for(user, system_prompt="SYSTEM")
    q, a = exchange(conv, "What is in the report?", "A study of herons.")
    found = Retrieved(
        documents=[document()],
        passages=[passage(1, "Herons are violet.", page=3, heading="Results"), passage(2, "Tortoises sleep.", page=2)],
    )

    prompt = assemble(["PRODUCT", "SYSTEM"], "", [q, a], "What colour are herons?", 4000, found)

    roles = [m["role"] for m in prompt.messages]
    assert roles == ["system", "system", "user", "assistant", "system", "user"]
    quoted = prompt.messages[-2]["content"]
    assert quoted.startswith(PASSAGES_HEADER)
    assert "[1] report.pdf, page 3, Results\nHerons are violet." in quoted
    assert "[2] report.pdf, page 2\nTortoises sleep." in quoted
    assert prompt.sources == [
        {"n": 1, "chunk_id": 101, "document_id": 7, "name": "report.pdf", "page": 3, "heading": "Results"},
        {"n": 2, "chunk_id": 102, "document_id": 7, "name": "report.pdf", "page": 2, "heading": ""},
    ]
    # The shared prefix (system prompts, then the history) is the same as without files: still cached.
    plain = assemble(["PRODUCT", "SYSTEM"], "", [q, a], "What colour are herons?", 4000)
    assert prompt.messages[:4] == plain.messages[:4]
    assert prompt.estimated_tokens == plain.estimated_tokens + estimate_message_tokens(quoted)


@override_settings(RETRIEVAL_PROMPT_SHARE_PERCENT=50)
def test_passages_take_at_most_their_share_best_first_and_the_history_the_rest(user):
    conv = conversation_for(user)
    history = []
    parent = None
    for i in range(20):
        q, a = exchange(conv, f"question {i} " + "x" * 200, f"answer {i} " + "y" * 200, parent=parent)
        history += [q, a]
        parent = a
    # Six passages of about 100 tokens each, best first; a budget of 600 leaves about 290 for them.
    found = Retrieved(documents=[document()], passages=[passage(n, f"fact {n} " + "z" * 400) for n in range(1, 7)])

    prompt = assemble("S", "", history, "and now?", 600, found)

    assert [s["n"] for s in prompt.sources] == [1, 2]  # whole passages, the best ones, within the share
    quoted = prompt.messages[-2]["content"]
    assert "fact 1" in quoted and "fact 2" in quoted and "fact 3" not in quoted
    assert prompt.estimated_tokens <= 600
    assert prompt.dropped  # the history gave way, the newest turns kept
    assert prompt.messages[-3]["content"].startswith("answer 19")


def test_with_files_but_no_match_the_model_is_told_to_say_it_did_not_find_it(user):
    found = Retrieved(documents=[document("report.pdf"), document("notes.md")], passages=[])

    prompt = assemble("S", "", [], "Who won the 1954 World Cup?", 4000, found)

    assert prompt.messages[-2] == {
        "role": "system",
        "content": NOTHING_FOUND.format(names="report.pdf, notes.md"),
    }
    assert prompt.sources == []


def test_without_files_the_prompt_is_unchanged(user):
    assert assemble("S", "", [], "hi", 4000, Retrieved(documents=[], passages=[])).messages == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
    ]
