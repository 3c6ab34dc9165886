"""The `llm` backend: Llama Guard's prompt and verdicts, end to end against the simulated worker's
guard mode (a keyword policy answering in Llama Guard's format, not a model), and time-outs."""

import pytest

from harness.engines import start_simulator
from moderation import services
from moderation.backends import INPUT, OUTPUT, BackendError
from moderation.backends.llm import LlmGuardBackend, guard_prompt, parse_verdict
from simulator.prose import guard_verdict


@pytest.fixture(scope="module")
def guard():
    worker = start_simulator("--guard-keywords", "heist=S2,cliff jump=S11,blackmail=S2")
    yield worker
    worker.stop()


@pytest.fixture
def llm(settings, guard):
    settings.MODERATION_BACKENDS = ["llm"]
    settings.MODERATION_LLM_URL = guard.url
    settings.MODERATION_TIMEOUT_SECONDS = 5
    return LlmGuardBackend()


def test_the_prompt_is_llama_guard_s_with_the_text_as_the_last_turn():
    prompt = guard_prompt("How do tides work?", INPUT)
    assert prompt.startswith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>")
    assert "S11: Suicide & self-harm." in prompt and "<BEGIN CONVERSATION>\n\nUser: How do tides work?" in prompt
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "Agent: It is sunny." in guard_prompt("It is sunny.", OUTPUT)
    assert "ONLY THE LAST Agent message" in guard_prompt("It is sunny.", OUTPUT)


def test_verdicts_are_parsed_and_mapped_to_our_category_names():
    assert parse_verdict("safe") == parse_verdict("  safe\n") == []
    hits = parse_verdict("unsafe\nS2,S11")
    assert [(h.category, h.block, h.backend) for h in hits] == [
        ("Non-violent crimes", True, "llm"),
        ("Suicide & self-harm", True, "llm"),
    ]
    assert [h.category for h in parse_verdict("unsafe")] == ["Unsafe (no category given)"]
    with pytest.raises(BackendError, match="unexpected shape"):
        parse_verdict("I think this is fine.")


def test_the_simulated_guard_reads_only_the_conversation():
    policy = {"crimes": "S1"}  # a word of the category list itself
    assert guard_verdict(guard_prompt("Tides", INPUT), policy) == "safe"
    assert guard_verdict(guard_prompt("crimes at sea", INPUT), policy) == "unsafe\nS1"


def test_end_to_end_against_the_guard_worker(llm):
    assert [h.category for h in llm.screen("Plan a heist on the bank and a cliff jump", INPUT)] == [
        "Non-violent crimes",
        "Suicide & self-harm",
    ]
    assert llm.screen("How do lighthouses work?", OUTPUT) == []
    verdict = services.judge("blackmail the keeper", OUTPUT)
    assert not verdict.allowed and verdict.category == "Non-violent crimes" and verdict.backend == "llm"


@pytest.mark.django_db
def test_a_slow_guard_times_out_and_the_fail_mode_decides(settings, user):
    with start_simulator("--guard-keywords", "heist=S2", "--fault-latency", "3") as slow:
        settings.MODERATION_BACKENDS = ["llm"]
        settings.MODERATION_LLM_URL = slow.url
        settings.MODERATION_TIMEOUT_SECONDS = 0.5
        with pytest.raises(BackendError, match=r"took longer than 0\.5s"):
            LlmGuardBackend().screen("a heist", INPUT)
        settings.MODERATION_FAIL_MODE = "open"
        services.check_input(user, "a heist")
        settings.MODERATION_FAIL_MODE = "closed"
        with pytest.raises(services.ModerationUnavailable):
            services.check_input(user, "a heist")
