"""The simulated model: a token source that writes readable pseudo-prose, or echoes the prompt.

It behaves like a language model where it matters to the system around it:

- greedy decoding (temperature 0) is a pure function of the prompt: the same prompt gives the same
  answer in any process, streamed or not, batched or alone;
- with temperature > 0 it samples: seeded by ``sampling_seed`` it is reproducible, without one it
  varies from request to request (as SGLang does);
- the answer has a natural length drawn from the prompt and ends with an end-of-sequence token at
  a sentence boundary, so ``finish_reason`` is ``stop`` or ``length`` for the right reasons;
- for a chat prompt the end token is the template's own (``<|im_end|>`` for ChatML).

"Logits" are deterministic pseudo-random scores of each candidate word given the position and the
previous word; temperature scales them before the softmax, and top_p trims the nucleus.
"""

from __future__ import annotations

import hashlib
import math
import random
from array import array
from collections.abc import Sequence

from simulator import tokenizer as tok
from simulator import vocab
from simulator.chat_template import last_user_text

# Sentence shapes, as word classes; "," "." are punctuation tokens.
_SHAPES: list[list[str]] = [
    ["DET", "ADJ", "NOUN", "VERB", "DET", "NOUN", "PREP", "DET", "ADJ", "NOUN", "."],
    ["DET", "NOUN", "VERB", "ADV", ",", "CONN", "DET", "NOUN", "VERB", "DET", "ADJ", "NOUN", "."],
    ["PRON", "VERB", "DET", "NOUN", "PREP", "DET", "NOUN", "."],
    ["ADV", ",", "DET", "ADJ", "NOUN", "VERB", "PREP", "DET", "NOUN", "."],
    ["DET", "NOUN", "PREP", "DET", "NOUN", "VERB", "DET", "ADJ", "NOUN", ",", "CONN", "PRON", "VERB", "ADV", "."],
    ["DET", "ADJ", "NOUN", "VERB", "ADV", "."],
]
_CLASSES: dict[str, list[str]] = {
    "DET": vocab.DETERMINERS,
    "ADJ": vocab.ADJECTIVES,
    "NOUN": vocab.NOUNS,
    "VERB": vocab.VERBS,
    "ADV": vocab.ADVERBS,
    "PREP": vocab.PREPOSITIONS,
    "CONN": vocab.CONNECTIVES,
    "PRON": vocab.PRONOUNS,
}
_MASK = (1 << 64) - 1


def prompt_digest(prompt_ids: Sequence[int]) -> int:
    """A stable 64-bit digest of a prompt (Python's str hash is salted per process; this is not)."""
    return int.from_bytes(hashlib.blake2b(array("q", prompt_ids).tobytes(), digest_size=8).digest(), "big")


def _score(*key: int) -> float:
    """A deterministic pseudo-random logit in [0, 4) (int tuples hash identically in every process)."""
    return (hash(key) & 0xFFFFFF) / float(1 << 24) * 4.0


def eos_for(prompt_ids: Sequence[int]) -> int:
    """The end token the prompt's template expects: ChatML's, Llama 3's, or plain end-of-text."""
    tail = prompt_ids[-8:]
    if tok.IM_START_ID in tail:
        return tok.IM_END_ID
    if tok.END_HEADER_ID in tail:
        return tok.EOT_ID
    return tok.ENDOFTEXT_ID


def guard_verdict(prompt: str, keywords: dict[str, str]) -> str:
    """The simulated guard's answer, in Llama Guard's format: "safe", or "unsafe" and a line of the
    codes of the keywords found in the conversation part of the prompt (the whole prompt if it has none).
    A keyword policy, not a model: it only lets the guard path be tested end to end."""
    start, end = prompt.find("<BEGIN CONVERSATION>"), prompt.find("<END CONVERSATION>")
    conversation = (prompt[start:end] if 0 <= start < end else prompt).lower()
    codes = sorted({code for word, code in keywords.items() if word in conversation}, key=lambda c: (len(c), c))
    return "unsafe\n" + ",".join(codes) if codes else "safe"


class ProseModel:
    """Yields the next token id on each call to :meth:`next_token`."""

    def __init__(
        self,
        prompt_ids: Sequence[int],
        *,
        temperature: float,
        top_p: float,
        seed: int | None,
        answer_tokens: tuple[int, int],
        fallback_rng: random.Random,
        echo: bool = False,
        prompt_text: str | None = None,
        guard_keywords: dict[str, str] | None = None,
    ) -> None:
        self.base = prompt_digest(prompt_ids)
        self.temperature = temperature
        self.top_p = top_p
        if temperature > 0:
            seed_value = (
                (self.base ^ (seed * 0x9E3779B97F4A7C15)) & _MASK if seed is not None else fallback_rng.getrandbits(64)
            )
            self.rng: random.Random | None = random.Random(seed_value)  # nosec B311  # seeded on purpose: the simulated worker's text and faults must be reproducible
        else:
            self.rng = None
        low, high = answer_tokens
        self.target = low + self.base % max(1, high - low + 1)
        self.eos_id = eos_for(prompt_ids)
        self.emitted = 0
        self.sentences = 0
        self._pending: list[int] = []
        self._paragraph_at = 3 + self.base % 3
        self._echo: list[int] | None = None
        if guard_keywords:
            self._echo = tok.encode(guard_verdict(prompt_text or tok.decode(list(prompt_ids)), guard_keywords))
        elif echo:
            text = last_user_text(prompt_text) if prompt_text is not None else None
            self._echo = tok.encode(text) if text is not None else list(prompt_ids)

    def next_token(self, *, allow_eos: bool = True) -> int:
        token = self._next(allow_eos)
        self.emitted += 1
        return token

    def _next(self, allow_eos: bool) -> int:
        if self._echo is not None:
            if self.emitted < len(self._echo):
                return self._echo[self.emitted]
            if allow_eos:
                return self.eos_id
            self._echo = None  # echoed everything but must go on: continue as prose
        if not self._pending:
            if self.emitted >= self.target and allow_eos:
                return self.eos_id
            self._plan_sentence()
        return self._pending.pop(0)

    def _plan_sentence(self) -> None:
        index = self.sentences
        self.sentences += 1
        tokens: list[int] = []
        starts_paragraph = index > 0 and index % self._paragraph_at == 0
        if starts_paragraph:
            tokens += [tok.word_id("\n"), tok.word_id("\n")]
        shape = _SHAPES[self._choose(len(_SHAPES), index, -1, -1)]
        prev = -1
        for slot, cls in enumerate(shape):
            if cls in (".", ","):
                tokens.append(tok.word_id(cls))
                prev = -2
                continue
            words = _CLASSES[cls]
            word = words[self._choose(len(words), index, slot, prev)]
            first_of_text = index == 0 and slot == 0
            if slot == 0:
                word = word[:1].upper() + word[1:]
            lead = "" if first_of_text or (slot == 0 and starts_paragraph) else " "
            tokens.append(tok.word_id(lead + word))
            prev = tokens[-1]
        self._pending = tokens

    def _choose(self, n: int, sentence: int, slot: int, prev: int) -> int:
        logits = [_score(self.base & 0xFFFFFFFF, sentence, slot, prev, i) for i in range(n)]
        if self.rng is None:
            return max(range(n), key=logits.__getitem__)
        top = max(logits)
        weights = [math.exp((x - top) / self.temperature) for x in logits]
        order = sorted(range(n), key=weights.__getitem__, reverse=True)
        total = sum(weights)
        kept, mass = [], 0.0
        for i in order:
            kept.append(i)
            mass += weights[i] / total
            if mass >= self.top_p:
                break
        return self.rng.choices(kept, weights=[weights[i] for i in kept])[0]
