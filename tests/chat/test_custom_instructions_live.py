"""Custom instructions reach the engine, after a prefix every user shares (real Daphne, simulated SGLang).

The simulated worker counts the prompt it is sent with its own tokenizer and serves repeated prefixes
from its radix cache, as SGLang does: so the engine's own prompt_tokens and cached_tokens show what
reached it."""

import pytest
from django.conf import settings

from accounts.models import User
from inference.chat_templates import IM_END, IM_START
from simulator import tokenizer as tok

pytestmark = pytest.mark.django_db(transaction=True)

INSTRUCTIONS = "Always answer in French, and keep it short."


def _system_tokens(text: str) -> int:
    """What one system message adds to a ChatML prompt, in the simulated engine's tokens."""
    return len(tok.encode(f"{IM_START}system\n{text}{IM_END}\n"))


def _first_answer(chat) -> dict:
    sent = chat.send_ok("Say hello.")
    _, final, _ = chat.answer(sent["assistant_message"]["id"])
    assert final["status"] == "completed", final
    return final


def test_custom_instructions_reach_the_engine_after_the_shared_product_prompt(chat, user):
    plain = _first_answer(chat)
    User.objects.filter(pk=user.pk).update(custom_instructions=INSTRUCTIONS)

    instructed = _first_answer(chat)

    # The engine was sent exactly one more system message: the instructions.
    assert instructed["prompt_tokens"] - plain["prompt_tokens"] == _system_tokens(INSTRUCTIONS)
    # And the product prompt before it came from the engine's cache: the shared prefix stayed shared.
    assert instructed["cached_tokens"] >= _system_tokens(settings.CHAT_DEFAULT_SYSTEM_PROMPT)
