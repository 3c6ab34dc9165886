"""The simulated worker's vision mode (`--enable-multimodal`) against sglang-protocol.md §10.12: image
parts accepted by a vision model and refused by a text-only one with SGLang's sentence, image tokens
counted by Qwen2-VL's rule and reported as SGLang reports them; checked on the wire."""

from __future__ import annotations

import httpx
import pytest

from harness.engines import start_simulator
from simulator.vision import ImageError, image_size, smart_resize
from tests.support.images import data_url, gif, image_part, jpeg, png, webp

TEXT_ONLY = "Model only supports text input; received unsupported content type 'image_url'."


@pytest.fixture(scope="module")
def vision():
    with start_simulator("--enable-multimodal", "--enable-cache-report") as w:
        yield w


@pytest.fixture(scope="module")
def text_only():
    with start_simulator() as w:
        yield w


def chat(worker, content, **extra) -> httpx.Response:
    body = {"model": "sim-small", "messages": [{"role": "user", "content": content}], "max_tokens": 4, **extra}
    return httpx.post(f"{worker.url}/v1/chat/completions", json=body, timeout=10)


@pytest.mark.parametrize("build", [png, gif, jpeg, webp])
def test_the_size_is_read_from_each_format_header(build):
    assert image_size(build(640, 480)) == (640, 480)


def test_qwen2_vl_resize_rounds_to_28_pixel_cells_within_4_and_16384():
    assert smart_resize(448, 448) == (448, 448)  # 16 x 16 cells
    assert smart_resize(100, 100) == (112, 112)  # rounded to the nearest multiple of 28
    assert smart_resize(10, 10) == (56, 56)  # raised to the 4-cell minimum
    h, w = smart_resize(3000, 4000)
    assert (h // 28) * (w // 28) <= 16384 and h / w == pytest.approx(0.75, rel=0.02)
    with pytest.raises(ImageError, match="aspect ratio"):
        smart_resize(10, 2500)


def test_model_info_says_whether_the_model_understands_images(vision, text_only):
    assert httpx.get(f"{vision.url}/model_info").json()["has_image_understanding"] is True
    assert httpx.get(f"{text_only.url}/model_info").json()["has_image_understanding"] is False


def test_a_text_only_model_refuses_an_image_with_sglangs_sentence(text_only):
    reply = chat(text_only, [{"type": "text", "text": "What is this?"}, image_part(png(28, 28))])
    assert reply.status_code == 400
    assert reply.json() == {"object": "error", "message": TEXT_ONLY, "type": "BadRequest", "param": None, "code": 400}
    # Text parts alone are fine for the same model.
    assert chat(text_only, [{"type": "text", "text": "What is this?"}]).status_code == 200


def test_an_image_adds_its_cells_and_two_markers_to_the_prompt(vision):
    question = [{"type": "text", "text": "What is in this picture?"}]
    plain = chat(vision, question).json()["usage"]
    assert plain["prompt_tokens_details"] == {"cached_tokens": 0}  # no images: only the cache report
    with_image = chat(vision, [*question, image_part(png(448, 224))]).json()["usage"]
    cells = (448 // 28) * (224 // 28)
    assert with_image["prompt_tokens_details"]["image_tokens"] == cells
    assert with_image["prompt_tokens"] == plain["prompt_tokens"] + cells + 2
    two = chat(vision, [*question, image_part(jpeg(56, 56), "image/jpeg"), image_part(gif(10, 10), "image/gif")])
    assert two.json()["usage"]["prompt_tokens_details"]["image_tokens"] == 4 + 4


def test_image_tokens_are_reported_without_the_cache_report_too():
    with start_simulator("--enable-multimodal") as worker:
        usage = chat(worker, [image_part(webp(280, 280), "image/webp")]).json()["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0, "image_tokens": 100}


def test_the_streamed_usage_chunk_counts_the_images(vision):
    body = {"stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream(
        "POST",
        f"{vision.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": [image_part(png(56, 84))]}], **body},
        timeout=10,
    ) as reply:
        lines = [line for line in reply.iter_lines() if line.startswith("data: {")]
    import json

    usage = json.loads(lines[-1][6:])["usage"]
    assert usage["prompt_tokens_details"]["image_tokens"] == 2 * 3


def test_the_same_image_is_cached_and_a_different_one_of_the_same_size_is_not(vision):
    text = {"type": "text", "text": "Describe the picture in one careful sentence, please, with colours."}
    first = chat(vision, [text, image_part(png(280, 280, shade=10))]).json()["usage"]
    again = chat(vision, [text, image_part(png(280, 280, shade=10))]).json()["usage"]
    other = chat(vision, [text, image_part(png(280, 280, shade=200))]).json()["usage"]
    assert again["prompt_tokens_details"]["cached_tokens"] >= first["prompt_tokens"] - 1
    # The prefix before the image matches; the image's tokens (100 cells) do not.
    assert other["prompt_tokens_details"]["cached_tokens"] < first["prompt_tokens"] - 100


@pytest.mark.parametrize(
    ("url", "sentence"),
    [
        ("https://example.com/cat.png", "does not fetch image URLs"),
        ("data:image/png;base64,@@@", "not valid base64"),
        (data_url(b"plain text, not a picture"), "cannot identify image file"),
        ("data:image/png,rawbytes", "must be base64-encoded"),
    ],
)
def test_images_it_cannot_use_are_refused_with_a_400(vision, url, sentence):
    reply = chat(vision, [{"type": "image_url", "image_url": {"url": url}}])
    assert reply.status_code == 400 and sentence in reply.json()["message"]


def test_audio_is_refused_by_the_image_only_model(vision):
    reply = chat(vision, [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}])
    assert reply.status_code == 400
    assert reply.json()["message"] == "Model only supports text input; received unsupported content type 'input_audio'."
