"""Token counts for context budgeting and quota reservations.

The product does not load model weights or tokenizers in the web tier, so it estimates: about four
bytes of UTF-8 per token (the usual figure for BPE tokenizers on English text, conservative for
code) plus a few tokens per message for the chat template's role markers. The estimate only sizes
budgets and reservations; what is billed is the engine's own count, reported with each answer.
"""

import math

TEMPLATE_TOKENS_PER_MESSAGE = 4
#: Bytes of UTF-8 per token, and so (for English) about the characters per token.
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / CHARS_PER_TOKEN)


def estimate_message_tokens(text: str) -> int:
    return estimate_tokens(text) + TEMPLATE_TOKENS_PER_MESSAGE
