"""How hard a turn looks, for Auto (chat.generation.auto_route): a score in [0, 1], higher for turns a
small model is likelier to answer worse than a large one.

A logistic regression over a few features of the question that cost microseconds on the CPU (its
length, code, mathematics, words that ask for reasoning, design or long writing, several questions at
once, words of a quick lookup or small talk, and how deep the conversation is), trained when first used
on the labelled examples in chat.generation.difficulty_examples (deterministic: the same weights in every
process). No model is called, so it adds no latency and works with no embedding model.

What it cannot know: whether the answer is hard for the model, only whether the question looks like
those labelled hard. A short question can be deep ("Is P equal to NP?"); a long one can be easy. That
is why Auto shows which model answered, offers "Retry with the larger model", and records both, and why
staff set the share sent to the large model rather than a fixed cut.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence

from chat.generation.difficulty_examples import EASY, HARD

_CODE = re.compile(
    r"```|\bdef |\bclass |\bfunction\b|#include|\breturn\b|=>|\(\)|;\s*$|\bSELECT\b|\bTraceback\b|\bimport "
    r"|\{[^}]*\}|\b(python|javascript|typescript|rust|c\+\+|java|sql|bash|dockerfile|kubernetes|regex)\b",
    re.IGNORECASE | re.MULTILINE,
)
_MATH = re.compile(
    r"\bprove\b|\bproof\b|\bderiv|\bintegral\b|\btheorem\b|\blemma\b|\bequation\b|\bsolve\b|\^|\\frac|\$"
    r"|\bcomplexity\b|\bO\(|\bprobability\b|\bexpected\b|\binduction\b",
    re.IGNORECASE,
)
_REASONING = re.compile(
    r"\bwhy\b|\bexplain\b|\bcompare\b|\banaly[sz]e\b|\bevaluate\b|\bassess\b|\bdesign\b|\barchitect|\btrade-?offs?\b"
    r"|\bimplications?\b|\bstep by step\b|\bdebug\b|\brefactor\b|\boptimi[sz]e\b|\bimplement\b|\bcritically\b"
    r"|\bstrateg|\bplan\b|\bpropos|\bpros and cons\b|\bdifferences?\b|\binvestigate\b|\bsystematic",
    re.IGNORECASE,
)
_LONG_FORM = re.compile(
    r"\bessay\b|\bstory\b|\barticle\b|\breport\b|\bproposal\b|\bdetailed\b|\boutline\b|\bcover letter\b"
    r"|\b\d[\d,]* words?\b|\bbusiness plan\b|\bstudy plan\b|\btests?\b",
    re.IGNORECASE,
)
_LOOKUP = re.compile(
    r"^\s*(hi|hello|hey|thanks|thank you|ok|okay)\b|\bwhat is the\b|\bwhat's the\b|\bwho (is|was|wrote|painted)\b"
    r"|\bhow many\b|\bdefine\b|\btranslate\b|\bsynonym\b|\bspell\b|\bconvert\b|\bwhat does .{1,20} (mean|stand for)"
    r"|\bwhich (is|planet|language)\b|\bcapital of\b|\bone (line|sentence)\b|\bquick\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w+")

#: The features' names, in the order `features` gives them (the bench prints the weights by name).
FEATURES = ("length", "code", "math", "reasoning", "long_form", "questions", "lookup", "depth")


def features(question: str, earlier_turns: int = 0) -> list[float]:
    """The question's features, each about in [0, 1]; `earlier_turns`: the turns before it in the prompt."""
    words = len(_WORD.findall(question))
    return [
        min(math.log1p(words) / math.log1p(120), 1.5),
        min(len(_CODE.findall(question)) / 2, 1.5),
        min(len(_MATH.findall(question)) / 2, 1.5),
        min(len(_REASONING.findall(question)) / 2, 1.5),
        min(len(_LONG_FORM.findall(question)), 1.5),
        min(max(question.count("?") - 1, 0) / 2 + question.count("\n") / 10, 1.5),
        min(len(_LOOKUP.findall(question)), 1.5),
        min(earlier_turns / 10, 1.0),
    ]


class Estimate:
    """A logistic regression fitted by gradient descent on labelled (question, hard) pairs."""

    def __init__(self, weights: Sequence[float], bias: float):
        self.weights = list(weights)
        self.bias = bias

    @classmethod
    def fitted(cls, examples: Sequence[tuple[str, bool]], *, rounds: int = 600, rate: float = 0.5, l2: float = 0.01):
        rows = [(features(text), 1.0 if hard else 0.0) for text, hard in examples]
        weights = [0.0] * len(FEATURES)
        bias = 0.0
        n = len(rows)
        for _ in range(rounds):
            grad_w = [0.0] * len(weights)
            grad_b = 0.0
            for x, y in rows:
                error = _sigmoid(bias + sum(w * v for w, v in zip(weights, x, strict=True))) - y
                for i, v in enumerate(x):
                    grad_w[i] += error * v
                grad_b += error
            weights = [w - rate * (g / n + l2 * w) for w, g in zip(weights, grad_w, strict=True)]
            bias -= rate * grad_b / n
        return cls(weights, bias)

    def score(self, question: str, earlier_turns: int = 0) -> float:
        x = features(question, earlier_turns)
        return _sigmoid(self.bias + sum(w * v for w, v in zip(self.weights, x, strict=True)))


def _sigmoid(z: float) -> float:
    if z < -60:
        return 0.0
    return 1.0 / (1.0 + math.exp(-z))


def labelled() -> list[tuple[str, bool]]:
    return [(text, False) for text in EASY] + [(text, True) for text in HARD]


_lock = threading.Lock()
_estimate: Estimate | None = None


def estimate() -> Estimate:
    """The estimate fitted on every labelled example (once per process, about 0.2 s)."""
    global _estimate
    with _lock:
        if _estimate is None:
            _estimate = Estimate.fitted(labelled())
        return _estimate


def score(question: str, earlier_turns: int = 0) -> float:
    return estimate().score(question, earlier_turns)
