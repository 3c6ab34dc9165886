"""Images in /v1/chat/completions: the OpenAI SDK sends a picture to a vision model and gets an answer
whose usage counts the image tokens the engine reported, billed as prompt tokens; a text-only model,
a plan without images, and images the server does not take are refused with a sentence, before any
engine time or quota. A fleet of two simulated workers: `sim-vision` (`--enable-multimodal`) and a
text-only `sim-small`."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from accounts.api_keys import create_api_key
from api import completions
from api.requests import InvalidRequest, parse
from billing.models import UsageRecord
from billing.quota_store import get_store
from billing.selectors import current_period
from chat.generation.admit import release_holds
from config.refusals import BadInput, NotAllowed, TooLarge
from harness.engines import start_simulator
from inference import environment, fleet, images
from inference.health import poll_nodes
from moderation.models import Category, Flag
from moderation.services import ContentBlocked
from tests.support.images import data_url, image_part, jpeg, png
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.django_db(transaction=True)

MODELS = "sim-small=Simulated Small,sim-vision=Simulated Vision"


@pytest.fixture(scope="module")
def workers():
    with (
        start_simulator("--enable-multimodal", "--served-model-name", "sim-vision") as vision,
        start_simulator("--served-model-name", "sim-small") as text,
    ):
        yield {"vision": vision, "text": text}


def _nodes(workers) -> list[str]:
    return [f"vision={workers['vision'].url}", f"text={workers['text'].url}"]


@pytest.fixture(scope="module")
def vision_server(django_db_setup, django_db_blocker, workers):
    server = start_daphne(
        engine_url=workers["text"].url,
        extra_env={"INFERENCE_NODES": ",".join(_nodes(workers)), "INFERENCE_MODELS": MODELS},
    )
    yield server
    server.stop()


@pytest.fixture
def vision_fleet(settings, workers):
    """The two nodes, polled: the product knows which one understands images (a flush empties the table)."""
    settings.INFERENCE_NODES = _nodes(workers)
    settings.INFERENCE_MODELS = MODELS.split(",")
    environment.forget_sync()
    poll_nodes()
    fleet.invalidate()
    yield
    environment.forget_sync()
    fleet.invalidate()


def release(generation) -> None:
    """Give back the holds of a generation admitted but never run."""
    release_holds(generation.reservation, generation.job.rid)


def ask(model: str, *parts) -> dict:
    return {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": list(parts)}]}


QUESTION = {"type": "text", "text": "What colour is this picture?"}


def test_the_sdk_sends_an_image_to_a_vision_model_and_the_image_tokens_are_billed(vision_fleet, vision_server, user):
    put_on_plan(user, "pro")
    _, raw = create_api_key(user, "vision")
    # The server reads the fleet from the database at most every second, and learns each node's
    # capabilities when it first polls it: until then a model's are unknown (None), not False.
    deadline = time.monotonic() + 10
    while True:
        listed = httpx.get(f"{vision_server.base_url}/v1/models", headers={"Authorization": f"Bearer {raw}"}).json()
        caps = {m["id"]: m.get("capabilities", {}).get("images") for m in listed["data"]}
        if None not in caps.values() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert caps == {"sim-small": False, "sim-vision": True}
    with openai.OpenAI(base_url=vision_server.base_url + "/v1", api_key=raw, max_retries=0, timeout=60) as client:
        answer = client.chat.completions.create(
            model="sim-vision",
            max_tokens=8,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What colour is this picture?"},
                        {"type": "image_url", "image_url": {"url": data_url(png(448, 224)), "detail": "auto"}},
                    ],
                }
            ],
        )
        stream = client.chat.completions.create(
            model="sim-vision",
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": [QUESTION, image_part(jpeg(280, 560), "image/jpeg")]}],
        )
        chunks = list(stream)
        plain = client.chat.completions.create(
            model="sim-vision", max_tokens=8, messages=[{"role": "user", "content": "What colour is this picture?"}]
        )
        refused = None
        try:
            client.chat.completions.create(
                model="sim-small",
                max_tokens=8,
                messages=[{"role": "user", "content": [QUESTION, image_part(png(28, 28))]}],
            )
        except openai.BadRequestError as exc:
            refused = exc
    assert answer.choices[0].message.content
    cells = (448 // 28) * (224 // 28)  # Qwen2-VL's 28-pixel cells, as the simulated engine counts them
    assert answer.usage.prompt_tokens_details.image_tokens == cells
    assert answer.usage.prompt_tokens >= plain.usage.prompt_tokens + cells
    [row] = UsageRecord.objects.filter(generation_id="api:" + answer.id.removeprefix("chatcmpl-"))
    assert row.prompt_tokens == answer.usage.prompt_tokens  # the image tokens are billed as prompt
    # Streamed, the usage chunk says the same.
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.prompt_tokens_details.image_tokens == (280 // 28) * (560 // 28)
    # The text-only model is refused by name before it is asked.
    assert refused is not None and "sim-small" in refused.message and "does not accept images" in refused.message


def test_a_text_only_model_is_refused_before_anything_is_held(vision_fleet, user):
    put_on_plan(user, "pro")
    key, _ = create_api_key(user, "vision")
    with pytest.raises(BadInput) as refused:
        completions.start(key, parse(ask("sim-small", QUESTION, image_part(png(56, 56)))), None, None)
    assert refused.value.message.startswith("The model 'sim-small' does not accept images")
    _, held = get_store().snapshot(user.pk, current_period(user).period.key)
    assert held == 0


def test_a_plan_without_images_is_refused_naming_the_plan_that_has_them(vision_fleet, user):
    put_on_plan(user, "plus", allows_images=False)
    key, _ = create_api_key(user, "vision")
    with pytest.raises(NotAllowed) as refused:
        completions.start(key, parse(ask("sim-vision", QUESTION, image_part(png(56, 56)))), None, None)
    assert refused.value.status == 403
    assert refused.value.message == "Images are not included in the Plus plan. Upgrade to Pro to send them."
    # Text alone is fine on that plan.
    release(completions.start(key, parse(ask("sim-vision", QUESTION)), None, None))


def test_the_seeded_free_plan_has_no_images_and_the_paid_ones_do(user):
    assert put_on_plan(user, "free").allows_images is False
    assert put_on_plan(user, "plus").allows_images and put_on_plan(user, "pro").allows_images


def test_the_reservation_counts_an_upper_bound_for_each_image(vision_fleet, user):
    put_on_plan(user, "pro")
    key, _ = create_api_key(user, "vision")
    text_only = completions.start(key, parse(ask("sim-vision", QUESTION)), None, None)
    with_image = completions.start(key, parse(ask("sim-vision", QUESTION, image_part(png(1120, 840)))), None, None)
    try:
        extra = with_image.job.prompt_estimate - text_only.job.prompt_estimate
        assert extra == (1120 // 28) * (840 // 28) + 2  # 1,200 cells and the two markers
        assert images.Picture("image/png", 10, 10, 100).reserved_tokens == images.MIN_RESERVED
        assert images.Picture("image/png", 8000, 8000, 100).reserved_tokens == images.MAX_CELLS + 2
    finally:
        release(text_only)
        release(with_image)


@pytest.mark.parametrize(
    ("part", "sentence"),
    [
        (
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            "this server does not fetch image URLs",
        ),
        ({"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}, "must be PNG, JPEG, WebP or GIF"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "not valid base64"),
        (image_part(b"words, not a picture"), "could not be read as a PNG picture"),
        ({"type": "image_url", "image_url": {"url": data_url(png(8, 8)), "detail": "max"}}, "'detail' must be"),
        ({"type": "image_url"}, "An image part needs 'image_url'"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA"}}, "Only text and image content parts"),
    ],
)
def test_images_the_server_does_not_take_are_refused_with_a_400(part, sentence):
    with pytest.raises(BadInput) as refused:
        parse(ask("sim-vision", QUESTION, part))
    assert sentence in refused.value.message and refused.value.status == 400


def test_too_many_or_too_large_images_are_refused(settings):
    settings.API_MAX_IMAGES = 2
    with pytest.raises(InvalidRequest, match="at most 2 images; this one has 3"):
        parse(ask("sim-vision", *[image_part(png(8, 8))] * 3))
    settings.API_IMAGE_MAX_BYTES = 1000
    with pytest.raises(TooLarge) as refused:
        parse(ask("sim-vision", image_part(png(200, 200, shade=7) + b"\0" * 2000)))
    assert refused.value.status == 413
    assert refused.value.message.startswith("The image at messages[0].content[0] is too large: it is ")
    assert "at most 1,000 bytes is accepted" in refused.value.message


def test_images_go_only_in_user_messages_and_text_parts_alone_stay_text():
    with pytest.raises(InvalidRequest, match="Images can only be sent in user messages"):
        parse(
            {
                "model": "sim-vision",
                "messages": [
                    {"role": "system", "content": [image_part(png(8, 8))]},
                    {"role": "user", "content": "hi"},
                ],
            }
        )
    request = parse(ask("sim-vision", QUESTION, {"type": "text", "text": " Answer briefly."}))
    assert request.messages[0]["content"] == "What colour is this picture? Answer briefly."
    # With an image, the parts go to the engine as they came.
    request = parse(ask("sim-vision", QUESTION, image_part(png(8, 8))))
    assert request.messages[0]["content"] == [QUESTION, image_part(png(8, 8))]
    # The declared type need not match: the engine reads the picture as it is (a JPEG sent as image/png).
    assert parse(ask("sim-vision", image_part(jpeg(10, 10)))).messages[0]["content"][0]["type"] == "image_url"


def test_the_text_beside_an_image_is_screened_by_moderation(vision_fleet, user, settings):
    settings.MODERATION_BACKENDS = ["rules"]
    Category.objects.create(name="Spam", words="buy followers")
    put_on_plan(user, "pro")
    key, _ = create_api_key(user, "vision")
    blocked = ask("sim-vision", {"type": "text", "text": "Please buy followers"}, image_part(png(56, 56)))
    with pytest.raises(ContentBlocked) as refused:
        completions.start(key, parse(blocked), None, None)
    assert "Spam" in refused.value.message
    [flag] = Flag.objects.all()
    assert flag.text == "Please buy followers" and flag.source == "input"


def test_while_no_engine_has_said_the_engine_decides_and_its_refusal_is_passed_on(client):
    # The session's server: one text-only node that nobody polled for capabilities.
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="sim-small", max_tokens=8, messages=[{"role": "user", "content": [QUESTION, image_part(png(28, 28))]}]
        )
    assert "Model only supports text input; received unsupported content type 'image_url'." in refused.value.message
