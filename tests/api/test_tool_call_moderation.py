"""Tool-call arguments are output like any text: screened by moderation as they are written, and a
call that crosses the line is never handed to the program (finish_reason content_filter)."""

import json

import pytest
from django.db import transaction

from billing.models import UsageRecord
from moderation.backends.rules import bump_version
from moderation.models import Category

WORD = "handshake"
SEND = {
    "type": "function",
    "function": {
        "name": "send_message",
        "description": "Send a message",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
}
# Every word the simulated model can fill the argument with is the one the rule forbids.
MESSAGES = [{"role": "user", "content": f"{WORD} {WORD} {WORD}"}]
NAMED = {"type": "function", "function": {"name": "send_message"}}


@pytest.fixture
def handshake_rule(transactional_db):
    with transaction.atomic():
        Category.objects.all().delete()
        Category.objects.create(name="Handshakes", words=WORD, applies_to="output")
    bump_version()
    yield
    Category.objects.all().delete()
    bump_version()


def test_a_call_whose_arguments_cross_the_line_is_withheld(client, handshake_rule):
    completion = client.chat.completions.create(model="sim-small", messages=MESSAGES, tools=[SEND], tool_choice=NAMED)
    choice = completion.choices[0]
    assert choice.finish_reason == "content_filter"
    assert not choice.message.tool_calls and not choice.message.content
    # What the engine wrote is billed, as for any answer moderation cut.
    row = UsageRecord.objects.get(generation_id="api:" + completion.id.removeprefix("chatcmpl-"))
    assert row.completion_tokens > 0


def test_a_streamed_call_that_crosses_the_line_ends_with_content_filter(client, handshake_rule):
    chunks = list(
        client.chat.completions.create(
            model="sim-small", messages=MESSAGES, tools=[SEND], tool_choice=NAMED, stream=True
        )
    )
    # Streamed output, text or arguments, is screened in windows (MODERATION_WINDOW_CHARS and at the
    # end), as the web chat's is: a short call is screened at its end, so its fragments were sent, but
    # the choice ends with content_filter, never tool_calls, and a program acts on a call only then.
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "content_filter"
    ]


def test_a_harmless_call_goes_through(client):
    completion = client.chat.completions.create(
        model="sim-small",
        messages=[{"role": "user", "content": "Tell Ada the meeting moved"}],
        tools=[SEND],
        tool_choice=NAMED,
    )
    [call] = completion.choices[0].message.tool_calls
    assert json.loads(call.function.arguments)["text"]
    assert completion.choices[0].finish_reason == "tool_calls"
