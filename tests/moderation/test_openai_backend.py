"""The `openai` backend against a stand-in /v1/moderations endpoint on a loopback port: verdicts,
and what an endpoint that errors or times out means under each fail mode."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import REGISTRY

from moderation import services
from moderation.backends import INPUT, OUTPUT, BackendError
from moderation.backends.openai import OpenAIBackend
from moderation.models import Flag
from tests.moderation.moderation_standin import ModerationStandIn


@pytest.fixture
def endpoint(settings):
    with ModerationStandIn(policy={"threaten": "violence", "insult": "harassment"}) as standin:
        settings.MODERATION_BACKENDS = ["openai"]
        settings.MODERATION_OPENAI_URL = standin.url
        settings.MODERATION_OPENAI_KEY = "sk-mod-test"
        settings.MODERATION_TIMEOUT_SECONDS = 0.5
        settings.MODERATION_THRESHOLD = 0.8
        yield standin


def test_flagged_text_is_blocked_in_the_endpoint_category_and_clean_text_passes(endpoint):
    backend = OpenAIBackend()
    hits = backend.screen("I will threaten them", INPUT)
    assert [(h.category, h.block, h.score, h.backend) for h in hits] == [("violence", True, 0.97, "openai")]
    assert backend.screen("Tell me about tides", OUTPUT) == []
    sent = endpoint.requests[0]
    assert sent["path"] == "/v1/moderations" and sent["authorization"] == "Bearer sk-mod-test"
    assert sent["body"] == {"model": "omni-moderation-latest", "input": "I will threaten them"}


def test_the_threshold_decides_from_the_scores(endpoint, settings):
    settings.MODERATION_THRESHOLD = 0.99
    endpoint.answer = lambda text: {
        "results": [{"flagged": False, "categories": {}, "category_scores": {"harassment": 0.98}}]
    }
    assert OpenAIBackend().screen("borderline", INPUT) == []
    settings.MODERATION_THRESHOLD = 0.9
    assert [h.category for h in OpenAIBackend().screen("borderline", INPUT)] == ["harassment"]


def test_a_slow_endpoint_times_out_and_an_error_status_is_an_error(endpoint):
    endpoint.hold()
    with ThreadPoolExecutor(1) as pool:
        screening = pool.submit(OpenAIBackend().screen, "anything", INPUT)
        # Bounded: a backend that waited for the answer would wait until the endpoint is released.
        with pytest.raises(BackendError, match=r"took longer than 0\.5s"):
            screening.result(timeout=60)
    # It gave up on its own deadline: the endpoint had the request and had not answered it.
    assert len(endpoint.requests) == 1 and endpoint.answered == 0
    endpoint.release()
    endpoint.status = 500
    with pytest.raises(BackendError, match="answered 500"):
        OpenAIBackend().screen("anything", INPUT)


def errors_counted() -> float:
    return (
        REGISTRY.get_sample_value(
            "sglchat_moderation_verdicts_total", {"stage": "input", "backend": "openai", "verdict": "error"}
        )
        or 0.0
    )


@pytest.mark.django_db
def test_fail_open_lets_a_message_through_when_the_endpoint_times_out(endpoint, settings, user, caplog):
    settings.MODERATION_FAIL_MODE = "open"
    endpoint.delay_s = 2
    before = errors_counted()
    services.check_input(user, "please threaten them")  # not judged: let through, logged and counted
    assert "moderation backend openai failed on input (open)" in caplog.text
    assert errors_counted() == before + 1
    assert not Flag.objects.exists()


@pytest.mark.django_db
def test_fail_closed_refuses_a_message_when_the_endpoint_times_out(endpoint, settings, user):
    settings.MODERATION_FAIL_MODE = "closed"
    endpoint.delay_s = 2
    with pytest.raises(services.ModerationUnavailable) as refused:
        services.check_input(user, "Tell me about tides")
    assert refused.value.status == 503 and refused.value.retry_after
    assert "cannot be checked" in refused.value.message


@pytest.mark.django_db
def test_a_streaming_answer_is_cut_by_the_endpoint_or_by_a_timeout_when_closed(endpoint, settings):
    settings.MODERATION_WINDOW_CHARS = 20

    async def stream(parts):
        screen = services.OutputScreen()
        text = ""
        for part in parts:
            text += part
            if screen.due(len(text)) and await screen.check(text):
                break
        else:
            await screen.check(text)
        return screen.verdict, text

    verdict, text = asyncio.run(stream(["The keeper climbs ", "the stairs and then ", "rests ", "the gulls " * 5]))
    assert verdict is None and len(endpoint.requests) == 2  # a full window, then the rest at the end
    verdict, text = asyncio.run(stream(["The keeper climbs ", "the stairs to threaten ", "the gulls " * 5]))
    assert verdict.category == "violence" and not verdict.allowed
    assert text.endswith("threaten ")  # cut at the window that crossed the line

    endpoint.delay_s = 2
    settings.MODERATION_FAIL_MODE = "open"
    assert asyncio.run(stream(["calm words " * 5]))[0] is None
    settings.MODERATION_FAIL_MODE = "closed"
    verdict, _ = asyncio.run(stream(["calm words " * 5]))
    assert verdict.unavailable and "could not be checked" in verdict.reason
