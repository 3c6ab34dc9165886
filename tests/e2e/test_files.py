"""Files in the chat, in a real browser: attach a PDF with the paperclip, watch it being read, ask about
a fact on its third page, get an answer whose sources name that page, open the cited passage in the
side panel; a follow-up that names nothing finds its passage through the question before it; a file's
reading is cancelled from its chip; and the same on a phone.

The engine echoes the question (tests/e2e/conftest.py), so the answer's "[1]" is the question's own: what
is tested is the product around the model (the file read, the passage found, the prompt quoting it,
the citation rendered and opened), not the model's reading. The prompt the engine received is checked
on the answer's sources, which the product records from the prompt it built.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from chat.models import Message
from documents.models import Collection, Document
from harness.engines import start_simulator
from tests.e2e.conftest import PHONE
from tests.support.documents import fact_pdf, pdf_bytes
from tests.support.images import png
from tests.support.live_fixtures import EMBED
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.e2e

TIMEOUT = 20_000


@pytest.fixture(scope="module")
def slow_embedder():
    """A simulated embedding worker at the "demo" speed (0.2 ms a token): a long file is indexed over
    seconds, batch by batch, so a test can watch its progress and cancel it; a question takes ~0.1 s."""
    with start_simulator("--is-embedding", "--served-model-name", EMBED, "--context-length", "256", speed="demo") as w:
        yield w


@pytest.fixture(scope="module")
def files_server(django_db_setup, django_db_blocker, e2e_engine, slow_embedder, tmp_path_factory):
    """The e2e server, with the simulated embedding worker as the retrieval model and its own media folder."""
    server = start_daphne(
        engine_url=e2e_engine.url,
        extra_env={
            "SGLANG_SIMULATED": "1",
            "INFERENCE_EMBEDDING_MODELS": f"{EMBED}=Simulated Embeddings",
            "SGLANG_EMBEDDING_URL": slow_embedder.url,
            "INFERENCE_MODEL_CONTEXT_TOKENS": f"{EMBED}=256",
            "RETRIEVAL_EMBEDDING_MODEL": EMBED,
            "MEDIA_ROOT": str(tmp_path_factory.mktemp("media")),
        },
    )
    yield server
    server.stop()


def attach(chat, name: str, data: bytes, mime: str = "application/pdf"):
    with chat.page.expect_file_chooser() as chooser:
        chat.page.get_by_role("button", name="Attach files or use a collection").click()
        chat.page.get_by_role("menuitem", name="Upload files").click()
    chooser.value.set_files(files=[{"name": name, "mimeType": mime, "buffer": data}])
    return chat.page.locator("#attachments .chip", has_text=name)


def test_a_pdf_is_read_and_an_answer_cites_its_third_page(open_chat, files_server, chat_user, screenshot_dir):
    chat = open_chat(server=files_server)

    chip = attach(chat, "varnholm.pdf", fact_pdf())
    expect(chip).to_contain_text("3 pages", timeout=TIMEOUT)
    expect(chat.send_button).to_be_disabled()  # nothing typed yet; a file being read also holds Send
    chat.page.screenshot(path=screenshot_dir / "files-composer-desktop-light.png")

    answer = chat.send("What is the secret ingredient of the Varnholm fish soup? Cite the passage like [1].")
    chat.wait_for_status(answer, "completed")

    # The prompt quoted the third page first: the answer's first source is page 3 of the file.
    first = answer.locator(".msg-sources li").first
    expect(first).to_contain_text("varnholm.pdf")
    expect(first).to_contain_text("p. 3")
    saved = Message.objects.get(pk=chat.message_id(answer))
    assert saved.sources[0]["page"] == 3
    # The file is the conversation's now, and stays on the chat's chips after a reload.
    assert Document.objects.get(name="varnholm.pdf").conversation_id == chat.conversation_id()

    # The "[1]" in the answer is a citation: it opens the passage, highlighted, in the side panel.
    answer.locator("button.cite").first.click()
    panel = chat.page.locator("#passage-panel")
    expect(panel).to_be_visible()
    expect(panel.locator("#passage-title")).to_have_text("varnholm.pdf")
    expect(panel.locator("#passage-where")).to_contain_text("Page 3")
    expect(panel.locator("mark.passage-cited")).to_contain_text("smoked juniper")
    chat.page.screenshot(path=screenshot_dir / "files-cited-passage-desktop-light.png")
    chat.page.keyboard.press("Escape")
    expect(panel).to_be_hidden()

    chat.reload()
    expect(chat.page.locator("#attachments .chip", has_text="varnholm.pdf")).to_be_visible()
    expect(chat.last_answer().locator(".msg-sources li").first).to_contain_text("p. 3")


def test_a_follow_up_finds_its_passage_through_the_question_before_it(open_chat, files_server, chat_user):
    chat = open_chat(server=files_server)
    expect(attach(chat, "varnholm.pdf", fact_pdf())).to_contain_text("3 pages", timeout=TIMEOUT)

    first = chat.send("When does the ferry to Varnholm leave the harbour?")
    chat.wait_for_status(first, "completed")
    expect(first.locator(".msg-sources li").first).to_contain_text("p. 2")

    # "And when does it come back?" names neither the ferry nor Varnholm; the question before it does.
    follow_up = chat.send("And when does it come back?")
    chat.wait_for_status(follow_up, "completed")
    expect(follow_up.locator(".msg-sources li").first).to_contain_text("p. 2")


def test_reading_a_file_can_be_cancelled_from_its_chip(open_chat, files_server, chat_user):
    chat = open_chat(server=files_server)
    # A long file: read in many batches, so there is time to cancel it.
    pages = [
        [f"Section {n}", "", " ".join(f"Line {n}.{k} about Varnholm harbour tides." for k in range(60))]
        for n in range(60)
    ]
    chip = attach(chat, "almanac.pdf", pdf_bytes(pages))
    # Its progress shows while it is indexed (a bar on the chip, within the page's style policy).
    expect(chip).to_contain_text("Indexing", timeout=TIMEOUT)
    expect(chip.locator(".chip-bar")).to_be_attached()
    chip.get_by_role("button", name="Cancel reading almanac.pdf").click()

    expect(chip).to_contain_text("Cancelled", timeout=TIMEOUT)
    document = Document.objects.get(name="almanac.pdf")
    assert document.state == Document.State.CANCELLED
    # Nothing of a cancelled file is searchable.
    assert not document.chunks.exists()


def test_the_phone_layout_shows_files_and_the_cited_passage(open_chat, files_server, chat_user, screenshot_dir):
    chat = open_chat(server=files_server, viewport=PHONE)
    chip = attach(chat, "varnholm.pdf", fact_pdf())
    expect(chip).to_contain_text("3 pages", timeout=TIMEOUT)
    box = chip.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]

    answer = chat.send("How many brass lanterns does the lighthouse keeper polish? [1]")
    chat.wait_for_status(answer, "completed")
    expect(answer.locator(".msg-sources li").first).to_contain_text("p. 1")
    answer.locator("button.cite").first.click()
    panel = chat.page.locator("#passage-panel")
    expect(panel.locator("mark.passage-cited")).to_contain_text("eleven brass lanterns")
    width = panel.bounding_box()["width"]
    assert width <= PHONE["width"]
    chat.page.screenshot(path=screenshot_dir / "files-cited-passage-phone-light.png")


def test_the_files_page_lists_collections_and_files_with_their_state(
    open_chat, files_server, chat_user, screenshot_dir
):
    contracts = Collection.objects.create(owner=chat_user, name="Contracts")
    chat = open_chat(None, server=files_server)
    page = chat.page
    page.goto("/accounts/files/")
    page.get_by_label("Files to add to Contracts").set_input_files(
        files=[{"name": "lease.pdf", "mimeType": "application/pdf", "buffer": fact_pdf()}]
    )
    page.get_by_role("button", name="Add files").click()
    expect(page.get_by_text("Added 1 file to “Contracts”: reading now.")).to_be_visible()
    item = page.get_by_test_id("file").filter(has_text="lease.pdf")
    # The page refreshes itself while a file is being read.
    expect(item.get_by_test_id("file-state")).to_have_text("Ready", timeout=TIMEOUT)
    page.screenshot(path=screenshot_dir / "files-page-desktop-light.png", full_page=True)
    assert Document.objects.get(name="lease.pdf").collection_id == contracts.pk

    # The collection is offered in the chat's paperclip menu, and a chat that uses it reads its files.
    chat.open("/")
    page.get_by_role("button", name="Attach files or use a collection").click()
    page.get_by_label("Contracts").check()
    expect(page.locator("#attachments .chip-collection")).to_contain_text("Contracts")
    answer = chat.send("What is the secret ingredient of the Varnholm fish soup?")
    chat.wait_for_status(answer, "completed")
    expect(answer.locator(".msg-sources li").first).to_contain_text("lease.pdf")
    assert list(contracts.conversations.values_list("pk", flat=True)) == [chat.conversation_id()]


@pytest.fixture(scope="module")
def vision_server(django_db_setup, django_db_blocker, tmp_path_factory):
    """A Daphne whose engine sees pictures (--enable-multimodal), echoing the question back."""
    with start_simulator("--enable-multimodal", "--echo", "--accept-any-model") as engine:
        server = start_daphne(
            engine_url=engine.url,
            extra_env={"SGLANG_SIMULATED": "1", "MEDIA_ROOT": str(tmp_path_factory.mktemp("pictures"))},
        )
        yield server
        server.stop()


def test_a_picture_goes_with_its_message_and_is_shown_in_it(open_chat, vision_server, chat_user, screenshot_dir):
    put_on_plan(chat_user, "plus")
    chat = open_chat(server=vision_server)

    chip = attach(chat, "whiteboard.png", png(280, 140), mime="image/png")
    expect(chip).to_contain_text("Picture", timeout=TIMEOUT)
    expect(chip.locator("img.chip-thumb")).to_be_visible()

    answer = chat.send("What is written on this whiteboard?")
    chat.wait_for_status(answer, "completed")
    expect(chip).to_have_count(0)  # sent with the message, not kept as one of the chat's files
    question = chat.page.locator(".msg-user").last
    shown = question.locator(".msg-pictures img")
    expect(shown).to_have_count(1)
    assert shown.evaluate("img => img.complete && img.naturalWidth") == 280
    with_picture = Message.objects.get(pk=chat.message_id(answer)).prompt_tokens
    chat.page.screenshot(path=screenshot_dir / "files-picture-desktop-light.png")

    chat.reload()
    expect(chat.page.locator(".msg-user .msg-pictures img")).to_have_count(1)
    expect(chat.page.locator("#attachments .chip")).to_have_count(0)

    # The engine was sent the picture: the same question alone costs its 10x5 cells of 28 px and the
    # two markers around them less.
    plain = open_chat(server=vision_server)
    alone = plain.send("What is written on this whiteboard?")
    plain.wait_for_status(alone, "completed")
    assert with_picture - Message.objects.get(pk=plain.message_id(alone)).prompt_tokens == 10 * 5 + 2


def test_a_plan_without_pictures_says_so_at_the_paperclip(open_chat, vision_server, chat_user):
    chat = open_chat(server=vision_server)
    attach(chat, "whiteboard.png", png(28, 28), mime="image/png")
    expect(chat.page.get_by_text("Images are not included in the Free plan")).to_be_visible(timeout=TIMEOUT)
    expect(chat.page.locator("#attachments .chip")).to_have_count(0)
