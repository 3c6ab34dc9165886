"""The levers that spare the GPUs, live in the browser and through the OpenAI SDK.

The semantic cache: a first question answered, then a paraphrase of it answered with that answer, in the browser (said so under the answer, with "Answer afresh", which asks the engine) and
through the OpenAI SDK (`x-cache: semantic-hit`); another person is never served it, and staff see the
hit and the thumbs-down on it in the console. The rules behind it are tests/chat/test_semantic_cache.py.

Auto: the picker offers it first; an easy question is answered by the small model, said so under the
answer with "Retry with Simulated Large", which the large model then answers (tests/chat/test_auto_model.py).

The engine echoes the question (tests/e2e/conftest.py), so an answer shows which question it was
written for: the paraphrase's answer from the cache is the first question's words."""

from __future__ import annotations

import openai
import pytest
from playwright.sync_api import expect

from accounts.api_keys import create_api_key
from billing.models import UsageRecord
from chat.models import Message, SemanticCachePolicy
from tests.conftest import make_user
from tests.e2e.chatpage import TIMEOUT, wait_until
from tests.e2e.conftest import PHONE
from tests.support.live_fixtures import EMBED
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.e2e

FIRST = "What is the capital of France?"
PARAPHRASE = "What's the capital of France?"


@pytest.fixture(scope="module")
def semantic_server(django_db_setup, django_db_blocker, e2e_engine, embedder):
    """The e2e server, with the simulated embedding worker embedding questions, and Auto offered."""
    server = start_daphne(
        engine_url=e2e_engine.url,
        extra_env={
            "SGLANG_SIMULATED": "1",
            "INFERENCE_EMBEDDING_MODELS": f"{EMBED}=Simulated Embeddings",
            "SGLANG_EMBEDDING_URL": embedder.url,
            "INFERENCE_MODEL_CONTEXT_TOKENS": f"{EMBED}=256",
            "RETRIEVAL_EMBEDDING_MODEL": EMBED,
            "INFERENCE_AUTO_MODEL": "sim-small,sim-large",
        },
    )
    yield server
    server.stop()


@pytest.fixture
def turned_on(transactional_db):
    """As staff save it in the console (0.9: the simulator's vectors put the paraphrase at 0.91)."""
    return SemanticCachePolicy.objects.create(enabled=True, threshold=0.9)


def test_a_paraphrase_is_answered_from_the_first_answer_and_answer_afresh_asks_the_engine(
    open_chat, semantic_server, turned_on, chat_user, screenshot_dir
):
    chat = open_chat(server=semantic_server)
    first = chat.send(FIRST)
    chat.wait_for_status(first, "completed")
    expect(first.locator(".cache-note")).to_be_hidden()
    # The title is asked for once the answer is filed (chat.generation.run: keep, then follow-up).
    first_chat = Message.objects.get(pk=chat.message_id(first)).conversation
    wait_until(lambda: first_chat.__class__.objects.get(pk=first_chat.pk).title, what="the first chat's title")

    # A new chat, the same question in other words.
    chat = open_chat(server=semantic_server, viewport=PHONE)
    again = chat.send(PARAPHRASE)
    chat.wait_for_status(again, "completed")
    assert chat.answer_text(again).strip() == FIRST  # the first question's answer (the engine echoes)
    note = again.locator(".cache-note")
    expect(note).to_contain_text("answer to a very similar earlier question")
    hit = Message.objects.get(pk=chat.message_id(again))
    assert hit.cache_hit == "similar" and hit.node == "response-cache"
    wait_until(lambda: Message.objects.get(pk=hit.pk).conversation.title, what="the new chat's title")

    note.get_by_role("button", name="Answer afresh").click()
    afresh = chat.answers().last
    expect(afresh).not_to_have_attribute("data-id", str(hit.pk), timeout=TIMEOUT)
    chat.wait_for_status(afresh, "completed")
    assert chat.answer_text(afresh).strip() == PARAPHRASE  # the engine answered this question
    expect(afresh.locator(".cache-note")).to_be_hidden()
    assert Message.objects.get(pk=chat.message_id(afresh)).cache_hit == ""

    # Reloaded, the cached answer is still said to be one, as version 1 of 2.
    chat.reload()
    chat.last_answer().get_by_role("button", name="Previous version").click()
    expect(chat.last_answer().locator(".cache-note")).to_be_visible(timeout=TIMEOUT)
    chat.page.screenshot(path=screenshot_dir / "semantic-cache-phone.png")


def test_a_program_gets_semantic_hit_for_its_own_paraphrase_and_never_anothers(semantic_server, turned_on, chat_user):
    put_on_plan(chat_user, "pro")
    other = make_user("grace@example.com")
    put_on_plan(other, "pro")

    def client(user):
        _, raw = create_api_key(user, "a program")
        return openai.OpenAI(base_url=semantic_server.base_url + "/v1", api_key=raw, max_retries=0, timeout=60)

    def ask(sdk, question: str):
        return sdk.chat.completions.with_raw_response.create(
            model="sim-small", temperature=0, max_tokens=32, messages=[{"role": "user", "content": question}]
        )

    with client(chat_user) as mine, client(other) as theirs:
        first = ask(mine, FIRST)  # answered once its answer is filed: the reply waits for the whole driver
        assert first.headers["x-cache"] == "miss"
        again = ask(mine, PARAPHRASE)
        assert again.headers["x-cache"] == "semantic-hit"
        assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
        assert ask(theirs, PARAPHRASE).headers["x-cache"] == "miss"
    rows = list(UsageRecord.objects.filter(user=chat_user).order_by("created", "id"))
    assert [row.from_cache for row in rows] == [False, True]


def test_auto_answers_an_easy_question_with_the_small_model_and_retries_with_the_large(
    open_chat, semantic_server, chat_user, screenshot_dir
):
    put_on_plan(chat_user, "pro")
    chat = open_chat(server=semantic_server, viewport=PHONE)
    expect(chat.page.locator("#model-picker")).to_have_value("auto")
    expect(chat.page.locator("#model-picker option").first).to_have_text("Auto")

    answer = chat.send("What is the capital of Canada?")
    chat.wait_for_status(answer, "completed")
    expect(answer.locator(".msg-meta")).to_contain_text("Auto: sim-small")
    first = Message.objects.get(pk=chat.message_id(answer))
    assert (first.model, first.auto_route) == ("sim-small", "easy")
    wait_until(lambda: UsageRecord.objects.filter(generation_id=str(first.pk)).exists(), what="the ledger row")
    assert UsageRecord.objects.get(generation_id=str(first.pk)).auto_route == "easy"  # charted by the console
    wait_until(lambda: Message.objects.get(pk=first.pk).conversation.title, what="the new chat's title")
    chat.page.screenshot(path=screenshot_dir / "auto-model-phone.png")

    answer.get_by_role("button", name="Retry with Simulated Large").click()
    retried = chat.answers().last
    expect(retried).not_to_have_attribute("data-id", str(first.pk), timeout=TIMEOUT)
    chat.wait_for_status(retried, "completed")
    expect(retried.locator(".msg-meta")).to_contain_text("sim-large")
    expect(retried.get_by_role("button", name="Retry with Simulated Large")).to_have_count(0)
    again = Message.objects.get(pk=chat.message_id(retried))
    assert (again.model, again.auto_route) == ("sim-large", "escalated")
    assert again.conversation.model == "auto"
