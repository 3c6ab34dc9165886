"""Pictures in the web chat: attached in the composer, checked as pictures on the way in (the plan must
send images, at most the size an engine is sent, bytes that read as a picture), never read or indexed,
and sent to the model with the message that carried them, as OpenAI's `image_url` content parts, in
that turn and in the turns that follow. In-process: the prompt the engine would be sent is the Job that
start_turn returns."""

import base64
import json
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from billing.models import Subscription
from chat.exports import to_json, to_markdown
from chat.generation.admit import release_holds
from chat.generation.start import Files, start_edit, start_regeneration, start_turn
from chat.models import Conversation, Message
from chat.serializers import conversation_json, message_json
from config.refusals import BadInput, NotAllowed, NotFound, TooLarge
from documents import services
from documents.models import Chunk, Document
from harness.engines import start_simulator
from inference import environment, fleet, images
from inference.health import poll_nodes
from tests.support.images import png
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

PICTURE = png(56, 84)


def picture(user, data: bytes = PICTURE, name: str = "whiteboard.png", **where) -> Document:
    return services.upload_document(user, SimpleUploadedFile(name, data, content_type="text/plain"), **where)


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def _send(user, content: str, document_ids=(), **fields):
    """Start a turn and end its answer at once (no engine here), so the next turn can follow."""
    turn = start_turn(user, content=content, files=Files(document_ids=list(document_ids)), **fields)
    release_holds(turn.reservation, turn.job.rid)
    Message.objects.filter(pk=turn.assistant_message.pk).update(status=Message.Status.COMPLETED, content="ok")
    return turn


def test_a_picture_is_kept_as_the_type_its_bytes_say_ready_at_once_and_never_read(
    user, settings, django_capture_on_commit_callbacks
):
    put_on_plan(user, "plus")
    with django_capture_on_commit_callbacks() as callbacks:
        document = picture(user)  # the browser said text/plain: the bytes decide
    assert (document.kind, document.state, document.content_type) == ("image", "ready", "image/png")
    assert (document.width, document.height) == (56, 84)
    assert Path(settings.MEDIA_ROOT, document.file.name).read_bytes() == PICTURE
    assert callbacks == []  # no reading started
    assert not Chunk.objects.exists()


def test_a_plan_without_images_refuses_a_picture_naming_the_plan_that_sends_them(user, settings):
    put_on_plan(user, "free")
    with pytest.raises(NotAllowed) as refused:
        picture(user)
    assert refused.value.status == 403
    assert refused.value.message == "Images are not included in the Free plan. Upgrade to Plus to send them."
    assert not Document.objects.exists() and not list(Path(settings.MEDIA_ROOT).rglob("*.png"))


def test_a_picture_that_is_not_one_too_large_or_put_in_a_collection_is_refused_with_a_sentence(user, settings):
    put_on_plan(user, "plus")
    with pytest.raises(BadInput, match=r"“holiday\.jpg” could not be read as a PNG, JPEG, WebP or GIF picture\."):
        picture(user, b"this is text, not a picture", "holiday.jpg")
    settings.API_IMAGE_MAX_BYTES = len(PICTURE) - 1
    with pytest.raises(TooLarge) as refused:
        picture(user)
    assert refused.value.status == 413
    assert "a picture sent to the model may be up to" in refused.value.message
    settings.API_IMAGE_MAX_BYTES = 1_572_864
    collection = services.create_collection(user, "Photos")
    with pytest.raises(BadInput, match="pictures go with a message in a chat, not into a collection"):
        picture(user, collection=collection)
    assert not Document.objects.exists()


def test_an_unreadable_type_names_pictures_among_what_can_be_sent(user):
    with pytest.raises(BadInput, match=r"\.exe files cannot be read\..* Pictures \(PNG, JPEG, WebP, GIF\) can be sent"):
        services.upload_document(user, SimpleUploadedFile("setup.exe", b"MZ"))


def test_a_picture_goes_to_the_model_with_its_message_and_with_the_turns_after_it(user):
    put_on_plan(user, "plus")
    sent = picture(user)

    first = _send(user, "What is written on this whiteboard?", document_ids=[sent.pk])

    question = first.job.messages[-1]
    assert question == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is written on this whiteboard?"},
            {"type": "image_url", "image_url": {"url": data_url(PICTURE)}},
        ],
    }
    # Reserved as the engine will count it (inference.images), on top of the text.
    assert first.job.prompt_estimate >= images.picture_of(PICTURE).reserved_tokens
    assert first.user_message.images == [sent.pk]
    sent.refresh_from_db()
    assert sent.conversation_id == first.conversation.pk
    # Shown with its message, not among the chat's files.
    assert message_json(first.user_message)["images"] == [
        {"id": sent.pk, "url": reverse("chat:picture", args=[sent.pk])}
    ]
    assert conversation_json(first.conversation, detail=True)["documents"] == []

    follow_up = _send(user, "And the second line?", conversation_id=first.conversation.pk).job.messages
    earlier = next(m for m in follow_up if m["role"] == "user")
    assert earlier["content"][1] == {"type": "image_url", "image_url": {"url": data_url(PICTURE)}}
    assert follow_up[-1] == {"role": "user", "content": "And the second line?"}


def test_editing_or_regenerating_a_question_keeps_its_pictures(user):
    put_on_plan(user, "plus")
    sent = picture(user)
    first = _send(user, "What is on it?", document_ids=[sent.pk])

    edited = start_edit(user, first.user_message.pk, "Read it aloud.")
    release_holds(edited.reservation, edited.job.rid)
    assert edited.user_message.images == [sent.pk]
    assert edited.job.messages[-1]["content"][1]["image_url"]["url"] == data_url(PICTURE)

    Message.objects.filter(pk=edited.assistant_message.pk).update(status=Message.Status.COMPLETED, content="ok")
    again = start_regeneration(user, edited.assistant_message.pk)
    release_holds(again.reservation, again.job.rid)
    assert again.job.messages[-1]["content"][1]["image_url"]["url"] == data_url(PICTURE)


def test_a_deleted_picture_leaves_its_turn_as_text(user):
    put_on_plan(user, "plus")
    sent = picture(user)
    first = _send(user, "What is on it?", document_ids=[sent.pk])
    services.delete_document(user, sent.pk)

    follow_up = _send(user, "And now?", conversation_id=first.conversation.pk).job.messages

    assert next(m for m in follow_up if m["role"] == "user") == {"role": "user", "content": "What is on it?"}


def test_someone_elses_picture_cannot_be_sent(user, other_user):
    put_on_plan(user, "plus")
    put_on_plan(other_user, "plus")
    theirs = picture(other_user)
    with pytest.raises(NotFound):
        start_turn(user, content="What is this?", files=Files(document_ids=[theirs.pk]))
    assert not Message.objects.exists()


def test_a_plan_that_stopped_sending_images_refuses_new_ones_but_the_chat_goes_on_without_them(user):
    put_on_plan(user, "plus")
    sent = picture(user)
    first = _send(user, "What is on it?", document_ids=[sent.pk])
    Subscription.objects.filter(user=user).delete()  # back on Free, which sends no images

    with pytest.raises(NotAllowed):
        start_turn(user, content="And this one?", files=Files(document_ids=[picture_on_disk(user).pk]))
    # What was asked before still works, as text: a follow-up, a regeneration, an edit.
    follow_up = _send(user, "Thanks.", conversation_id=first.conversation.pk).job.messages
    assert next(m for m in follow_up if m["role"] == "user")["content"] == "What is on it?"
    again = start_regeneration(user, first.assistant_message.pk)
    release_holds(again.reservation, again.job.rid)
    assert again.job.messages[-1] == {"role": "user", "content": "What is on it?"}
    edited = start_edit(user, first.user_message.pk, "Describe it.")
    release_holds(edited.reservation, edited.job.rid)
    assert edited.job.messages[-1] == {"role": "user", "content": "Describe it."}
    assert edited.user_message.images == [sent.pk]  # still the question's, should the plan take them again


def picture_on_disk(user) -> Document:
    """A picture kept as one would have been under a plan that allowed it."""
    document = Document(owner=user, name="later.png", kind="image", state="ready", content_type="image/png")
    document.width = document.height = 28
    document.file.save("later.png", ContentFile(png(28, 28)))
    return document


def test_a_picture_uploaded_in_an_open_chat_waits_for_the_next_message(user):
    put_on_plan(user, "plus")
    conversation = _send(user, "Hello").conversation
    sent = picture(user, conversation=conversation)
    assert sent.conversation_id is None  # not one of the chat's files: it goes with a message
    turn = _send(user, "What is this?", conversation_id=conversation.pk, document_ids=[sent.pk])
    assert turn.user_message.images == [sent.pk]


def test_a_message_carries_at_most_the_pictures_a_request_may_and_a_prompt_only_the_newest(user, settings):
    put_on_plan(user, "plus")
    settings.API_MAX_IMAGES = 2
    many = [picture(user, png(28, 28 + n), f"p{n}.png") for n in range(3)]
    with pytest.raises(BadInput) as refused:
        start_turn(user, content="What are these?", files=Files(document_ids=[p.pk for p in many]))
    assert refused.value.message == (
        "A message may carry at most 2 pictures; this one has 3. Send the others with a later message."
    )
    assert not Message.objects.exists()

    turn = _send(user, "First?", document_ids=[many[0].pk])
    turn = _send(user, "Second?", conversation_id=turn.conversation.pk, document_ids=[many[1].pk])
    last = _send(user, "Third?", conversation_id=turn.conversation.pk, document_ids=[many[2].pk]).job.messages

    asked = [m for m in last if m["role"] == "user"]
    assert asked[0] == {"role": "user", "content": "First?"}  # the oldest picture left out: its text stays
    assert [len(m["content"]) for m in asked[1:]] == [2, 2]  # text and picture, for the two newest


@pytest.fixture
def text_only_fleet(settings):
    """One node, polled: its engine says it does not understand images."""
    with start_simulator("--served-model-name", "sim-small") as worker:
        settings.INFERENCE_NODES = [f"text={worker.url}"]
        environment.forget_sync()
        poll_nodes()
        fleet.invalidate()
        yield
    environment.forget_sync()
    fleet.invalidate()


@pytest.mark.django_db(transaction=True)
def test_a_text_only_model_refuses_a_question_with_pictures_by_name_and_saves_nothing(user, text_only_fleet):
    put_on_plan(user, "plus")
    sent = picture(user)
    with pytest.raises(BadInput) as refused:
        start_turn(user, content="What is on it?", model="sim-small", files=Files(document_ids=[sent.pk]))
    assert refused.value.message == (
        "Simulated Small does not see pictures (its engines serve a text-only model). Choose a model that does, "
        "or send the message without them."
    )
    assert not Message.objects.exists() and not Conversation.objects.exists()


def test_a_picture_is_shown_to_its_owner_only_as_a_picture_never_as_a_page(client, user, other_user):
    put_on_plan(user, "plus")
    sent = picture(user)
    notes = services.upload_document(user, SimpleUploadedFile("page.html", b"<script>alert(1)</script>"))
    url = reverse("chat:picture", args=[sent.pk])

    client.force_login(user)
    shown = client.get(url)
    assert shown.status_code == 200 and b"".join(shown.streaming_content) == PICTURE
    assert shown["Content-Type"] == "image/png"
    # Asked again each time (a deleted picture never shows from a cache), cheaply while unchanged.
    assert shown["Cache-Control"] == "private, no-cache"
    assert client.get(url, headers={"If-None-Match": shown["ETag"]}).status_code == 304
    assert shown["X-Content-Type-Options"] == "nosniff"
    assert shown["Content-Security-Policy"] == "default-src 'none'; sandbox"
    # A file that is not a picture is not served here at all (an uploaded page would run as the site's).
    assert client.get(reverse("chat:picture", args=[notes.pk])).status_code == 404

    client.force_login(other_user)
    refused = client.get(url)
    assert refused.status_code == 404 and refused.json()["error"]["message"] == "There is no such picture."
    client.logout()
    assert client.get(url).status_code == 401


def test_an_export_says_which_question_carried_pictures(user):
    put_on_plan(user, "plus")
    sent = picture(user)
    first = _send(user, "What is on it?", document_ids=[sent.pk])

    markdown = to_markdown(first.conversation)
    assert "What is on it?\n\n(1 picture sent with it)" in markdown
    question = next(m for m in json.loads(to_json(first.conversation))["messages"] if m["role"] == "user")
    assert question["images"] == [sent.pk]
