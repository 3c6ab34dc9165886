"""Writing on from an unfinished answer (SGLang's `continue_final_message`), on both routes.

SGLang's OpenAI route takes a chat whose last message is the assistant's text and, with the flag,
renders the messages before it with the generation prompt and appends that text as it is, so the model
writes on from it; without the flag it reads that last message as the user's. The native route applies
no template: the client renders the same bytes itself. An answer cut at its length limit, continued,
comes out whole, and the continuation finds the cut answer in the prefix cache.
"""

from __future__ import annotations

import random

import pytest

from harness.engines import start_simulator
from inference.chat_templates import render_chatml
from inference.client import GenerationRequest, SGLangClient
from simulator import tokenizer as tok
from simulator.chat_template import final_assistant_message
from simulator.prose import ProseModel, eos_for
from tests.inference.helpers import collect

QUESTION = (
    "The keeper climbs the stairs at dusk, trims the wick of the great lamp, and watches the ships "
    "pass safely along the rocky coast through the long night."
)


@pytest.fixture(scope="module")
def echo_worker():
    with start_simulator("--echo", "--enable-cache-report", "--max-answer-tokens", "400") as w:
        yield w


def _asked() -> list[dict]:
    return [{"role": "system", "content": "Repeat the message."}, {"role": "user", "content": QUESTION}]


@pytest.mark.parametrize("mode", ["native", "openai"])
async def test_an_answer_cut_at_its_length_limit_is_written_on_to_its_end(echo_worker, mode):
    async with SGLangClient(echo_worker.url, mode=mode) as client:
        cut = await collect(client, GenerationRequest(messages=_asked(), max_new_tokens=9, temperature=0))
        assert cut.finish_reason == "length" and QUESTION.startswith(cut.text) and cut.text != QUESTION

        rest = await collect(
            client,
            GenerationRequest(
                messages=[*_asked(), {"role": "assistant", "content": cut.text}],
                max_new_tokens=200,
                temperature=0,
                continue_final_message=True,
            ),
        )
    assert rest.finish_reason == "stop"
    assert cut.text + rest.text == QUESTION  # the new text alone comes back, going on where it stopped
    # The prompt holds the cut answer: more than the question's prompt, and all of that from the cache.
    assert rest.usage.prompt_tokens > cut.usage.prompt_tokens
    assert rest.usage.cached_tokens >= cut.usage.prompt_tokens
    assert rest.usage.completion_tokens < len(tok.encode(QUESTION))


async def test_without_the_flag_a_last_answer_is_read_as_the_users_message(echo_worker):
    """As SGLang does: the trailing assistant message becomes the user's, and the echo repeats it."""
    said = [*_asked(), {"role": "assistant", "content": "Say this back to me."}]
    async with SGLangClient(echo_worker.url, mode="openai") as client:
        plain = await collect(client, GenerationRequest(messages=said, max_new_tokens=50, temperature=0))
    assert plain.text == "Say this back to me."


def test_the_client_renders_the_continuation_as_sglangs_chat_route_does():
    messages = [*_asked(), {"role": "assistant", "content": "The keeper climbs"}]
    native = SGLangClient("http://127.0.0.1:9", mode="native")
    openai = SGLangClient("http://127.0.0.1:9", mode="openai")
    request = GenerationRequest(messages=messages, continue_final_message=True)

    path, body = native._build(request, stream=True)
    assert path == "/generate"
    assert body["text"] == render_chatml(_asked()) + "The keeper climbs"  # no end-of-turn after the answer
    # The simulated engine's chat route takes the same turn off and appends its text: the same bytes.
    shown, prefix = final_assistant_message(messages, True)
    assert render_chatml(shown) + prefix == body["text"]

    path, body = openai._build(request, stream=True)
    assert path == "/v1/chat/completions" and body["continue_final_message"] is True
    assert body["messages"][-1] == {"role": "assistant", "content": "The keeper climbs"}
    assert "continue_final_message" not in openai._build(GenerationRequest(messages=_asked()), stream=True)[1]


def test_prose_written_on_from_a_word_is_spaced_from_it_and_ends_its_turn():
    prompt = render_chatml([{"role": "user", "content": "Tell me about harbors."}]) + "The harbor"
    ids = tok.encode(prompt)
    model = ProseModel(
        ids,
        temperature=0.0,
        top_p=1.0,
        seed=None,
        answer_tokens=(24, 40),
        fallback_rng=random.Random(0),
        prompt_text=prompt,
    )
    out = []
    while not out or out[-1] not in tok.EOS_TOKEN_IDS:
        out.append(model.next_token())
    assert tok.decode(out).startswith(" ")
    assert out[-1] == tok.IM_END_ID == eos_for(ids)  # still inside the assistant's turn
