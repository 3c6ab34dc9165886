"""One usage rule for every ending, on every transport: nothing generated, nothing billed; what was
generated, billed by the engine's own counts, or, when the engine never gave them (its runner died),
by the tokenizer's count of the saved text plus the prompt the engine said it processed."""

import httpx
from asgiref.sync import async_to_sync

from accounts.api_keys import create_api_key
from billing.models import UsageRecord
from billing.selectors import current_period, ledger_total
from chat.generation.reap import reap_stalled
from inference import fleet
from simulator import tokenizer
from tests.faults.invariants import assert_invariants
from tests.faults.support import ended, first_events, saved, send_accepted
from tests.support.waiting import wait_until


def test_an_answer_that_fails_before_its_first_token_is_billed_nothing_on_the_web_and_on_the_api(
    stack, pro_user, accepted
):
    engine = stack.engine("--fault-error-rate", "1.0")
    server = stack.server(engine.url)
    chat = stack.client(server, pro_user)

    turn = send_accepted(chat, accepted)
    answer = ended(turn["assistant_message"]["id"])
    assert answer.status == "failed" and not answer.content
    assert (answer.prompt_tokens, answer.completion_tokens) == (0, 0)

    _, raw = create_api_key(pro_user, "failing engine")
    response = httpx.post(
        server.base_url + "/v1/chat/completions",
        json={"model": "sim-small", "messages": [{"role": "user", "content": "Hello?"}]},
        headers={"Authorization": f"Bearer {raw}"},
        timeout=60,
    )
    assert response.status_code >= 500, response.text

    assert not UsageRecord.objects.filter(user=pro_user).exists()
    assert ledger_total(pro_user.pk, current_period(pro_user).period) == 0
    assert_invariants([pro_user], accepted)


def test_an_answer_whose_server_died_is_billed_its_processed_prompt_and_the_tokens_of_its_saved_text(
    stack, pro_user, accepted, settings
):
    engine = stack.engine()
    # This process plays Celery beat (the reaper), configured like the servers: the same engine.
    settings.SGLANG_URL = engine.url
    fleet.invalidate()
    # The prompt's size as the engine counts it: the same question, answered in full elsewhere.
    witness = stack.client(stack.server(engine.url), pro_user)
    reference = send_accepted(witness, accepted)
    witness.answer(reference["assistant_message"]["id"])
    processed_prompt = saved(reference["assistant_message"]["id"]).prompt_tokens
    assert processed_prompt > 0

    doomed = stack.server(engine.url)
    chat = stack.client(doomed, pro_user)
    turn = send_accepted(chat, accepted)
    answer_id = turn["assistant_message"]["id"]
    first_events(chat, answer_id)
    # Long enough for the runner's heartbeat to have kept what the engine reported.
    wait_until(lambda: len(saved(answer_id).content) > 40, timeout=30, what="the answer's first checkpoint")
    doomed.kill()

    wait_until(lambda: async_to_sync(reap_stalled)(), timeout=30, what="the reaper to find the dead runner")
    answer = saved(answer_id)
    assert answer.status == "interrupted" and answer.content
    row = UsageRecord.objects.get(generation_id=str(answer_id))
    assert row.completion_tokens == len(tokenizer.encode(answer.content))
    assert row.prompt_tokens == processed_prompt
    assert_invariants([pro_user], accepted)
