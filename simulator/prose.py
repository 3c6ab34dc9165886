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

A request may give the model a *plan* instead (a grammar, a tool call): a function of a seeded random
generator that returns the whole text to write; the model then emits that text's tokens and its end
token. Log-probabilities (``logprobs=True``) are those of the distribution each token was drawn from:
the log-softmax of the candidate words' scores (divided by the temperature, or by 1 when greedy) for
a word, and, for a token the sentence shape, a plan or the end of the answer forces, a peaked
distribution over that token and a few deterministic alternatives (as a grammar mask leaves one
token with nearly all the mass).
"""

from __future__ import annotations

import hashlib
import math
import random
from array import array
from collections.abc import Callable, Sequence

from simulator import tokenizer as tok
from simulator import vocab
from simulator.chat_template import assistant_prefix, last_user_text

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
#: A plan: the whole text the model writes for this request, chosen with the random generator given.
Plan = Callable[[random.Random], "str | None"]


def prompt_digest(prompt_ids: Sequence[int]) -> int:
    """A stable 64-bit digest of a prompt (Python's str hash is salted per process; this is not)."""
    return int.from_bytes(hashlib.blake2b(array("q", prompt_ids).tobytes(), digest_size=8).digest(), "big")


def _score(*key: int) -> float:
    """A deterministic pseudo-random logit in [0, 4) (int tuples hash identically in every process)."""
    return (hash(key) & 0xFFFFFF) / float(1 << 24) * 4.0


def eos_for(prompt_ids: Sequence[int]) -> int:
    """The end token the prompt's template expects: ChatML's or Llama 3's when the prompt ends inside an
    open turn (after its header, or after the unfinished text of a turn being continued), else plain
    end-of-text (a raw prompt, or a closed turn)."""
    for token in reversed(prompt_ids):
        if token == tok.IM_START_ID:
            return tok.IM_END_ID
        if token == tok.END_HEADER_ID:
            return tok.EOT_ID
        if token in (tok.IM_END_ID, tok.EOT_ID, tok.ENDOFTEXT_ID):
            return tok.ENDOFTEXT_ID
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
        degraded: bool = False,
        prompt_text: str | None = None,
        guard_keywords: dict[str, str] | None = None,
        plan: Plan | None = None,
        choice_index: int = 0,
        logprobs: bool = False,
        top_k: int = -1,
        min_p: float = 0.0,
    ) -> None:
        self.base = prompt_digest(prompt_ids)
        self.temperature = temperature
        self.top_p = top_p
        self.logprobs = logprobs
        self.top_k = top_k
        self.min_p = min_p
        #: The distribution the latest token was drawn from: [(token id, logprob)], best first.
        self.last_dist: list[tuple[int, float]] = []
        self._pending_dists: list[list[tuple[int, float]]] = []
        if temperature > 0:
            seed_value = (
                (self.base ^ (seed * 0x9E3779B97F4A7C15)) & _MASK if seed is not None else fallback_rng.getrandbits(64)
            )
            # Each of n choices samples its own way (greedy choices are identical, as on a real engine).
            seed_value = (seed_value ^ (choice_index * 0xD1B54A32D192ED03)) & _MASK
            self.rng: random.Random | None = random.Random(seed_value)  # nosec B311  # seeded on purpose: the simulated worker's text and faults must be reproducible
            plan_seed = seed_value ^ 0x5DEECE66D
        else:
            self.rng = None
            plan_seed = self.base
        low, high = answer_tokens
        self.target = low + self.base % max(1, high - low + 1)
        self.eos_id = eos_for(prompt_ids)
        self.emitted = 0
        self.sentences = 0
        self._pending: list[int] = []
        self._paragraph_at = 3 + self.base % 3
        self._echo: list[int] | None = None
        # Writing on from an unfinished answer (a continued turn): the first word is spaced from its text.
        written = assistant_prefix(prompt_text) if prompt_text is not None else ""
        self._continues_text = bool(written) and not written[-1].isspace()
        script = plan(random.Random(plan_seed)) if plan is not None else None  # nosec B311  # seeded on purpose
        if script is not None:
            self._echo = tok.encode(script)
        elif guard_keywords:
            self._echo = tok.encode(guard_verdict(prompt_text or tok.decode(list(prompt_ids)), guard_keywords))
        elif echo:
            text = last_user_text(prompt_text) if prompt_text is not None else None
            if text is not None and degraded:
                text = text.rsplit(None, 1)[0] if len(text.split()) > 1 else ""  # a bad version drops the last word
            if text is not None and written and text.startswith(written):
                text = text[len(written) :]  # an echo cut short is written on from where it stopped
            self._echo = tok.encode(text) if text is not None else list(prompt_ids)

    def next_token(self, *, allow_eos: bool = True) -> int:
        token = self._next(allow_eos)
        self.emitted += 1
        return token

    def _next(self, allow_eos: bool) -> int:
        if self._echo is not None:
            if self.emitted < len(self._echo):
                return self._forced(self._echo[self.emitted])
            if allow_eos:
                return self._forced(self.eos_id)
            self._echo = None  # echoed everything but must go on: continue as prose
        if not self._pending:
            if self.emitted >= self.target and allow_eos:
                return self._forced(self.eos_id)
            self._plan_sentence()
        if self.logprobs:
            self.last_dist = self._pending_dists.pop(0)
        return self._pending.pop(0)

    def _forced(self, token: int) -> int:
        if self.logprobs:
            self.last_dist = self._peaked(token, self.emitted)
        return token

    def _peaked(self, token: int, position: int) -> list[tuple[int, float]]:
        alternatives = [i for i in _alternative_ids() if i != token][:5]
        logits = [9.0] + [_score(self.base & 0xFFFFFFFF, position, -3, i) for i in alternatives]
        return _log_softmax([token, *alternatives], logits, self.temperature)

    def _plan_sentence(self) -> None:
        index = self.sentences
        self.sentences += 1
        tokens: list[int] = []
        dists: list[list[tuple[int, float]]] = []
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
            first_of_text = index == 0 and slot == 0 and not self._continues_text
            lead = "" if first_of_text or (slot == 0 and starts_paragraph) else " "
            if self.logprobs:
                forms = [lead + (w[:1].upper() + w[1:] if slot == 0 else w) for w in words]
                scores = [_score(self.base & 0xFFFFFFFF, index, slot, prev, i) for i in range(len(words))]
                while len(dists) < len(tokens):
                    dists.append(self._peaked(tokens[len(dists)], self.emitted + len(dists)))
                dists.append(_log_softmax([tok.word_id(f) for f in forms], scores, self.temperature))
            if slot == 0:
                word = word[:1].upper() + word[1:]
            tokens.append(tok.word_id(lead + word))
            prev = tokens[-1]
        if self.logprobs:
            while len(dists) < len(tokens):
                dists.append(self._peaked(tokens[len(dists)], self.emitted + len(dists)))
        self._pending = tokens
        self._pending_dists = dists

    def _choose(self, n: int, sentence: int, slot: int, prev: int) -> int:
        logits = [_score(self.base & 0xFFFFFFFF, sentence, slot, prev, i) for i in range(n)]
        if self.rng is None:
            return max(range(n), key=logits.__getitem__)
        top = max(logits)
        weights = [math.exp((x - top) / self.temperature) for x in logits]
        order = sorted(range(n), key=weights.__getitem__, reverse=True)
        if self.top_k > 0:
            order = order[: self.top_k]
        if self.min_p > 0:  # weights are relative to the best candidate's, which is 1
            order = [i for i in order if weights[i] >= self.min_p] or order[:1]
        total = sum(weights[i] for i in order)
        kept, mass = [], 0.0
        for i in order:
            kept.append(i)
            mass += weights[i] / total
            if mass >= self.top_p:
                break
        return self.rng.choices(kept, weights=[weights[i] for i in kept])[0]


def _log_softmax(ids: list[int], logits: list[float], temperature: float) -> list[tuple[int, float]]:
    """[(id, logprob)] best first (greedy decoding reports the T=1 distribution)."""
    t = temperature if temperature > 0 else 1.0
    scaled = [x / t for x in logits]
    top = max(scaled)
    log_total = top + math.log(sum(math.exp(x - top) for x in scaled))
    # The same token can appear twice (two words with one form); keep its first, highest entry.
    seen: dict[int, float] = {}
    for i, x in sorted(zip(ids, scaled, strict=True), key=lambda p: -p[1]):
        seen.setdefault(i, min(0.0, x - log_total))
    return list(seen.items())


def _alternative_ids() -> list[int]:
    return [tok.IM_END_ID] + [tok.word_id(p) for p in (".", ",", " the", " and", "\n", " a")]
