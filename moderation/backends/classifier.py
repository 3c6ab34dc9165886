"""The `classifier` backend: alt-profanity-check, a linear offensive-language classifier.

It runs on the CPU with the trained model shipped inside the package (no download); install it with
the optional extra `pip install -e '.[moderation]'`. It gives one probability that a text is
offensive; at or above MODERATION_THRESHOLD it blocks, as the category "offensive language".
"""

from __future__ import annotations

from django.conf import settings

from moderation.backends import BackendError, Hit

CATEGORY = "offensive language"


class ClassifierBackend:
    name = "classifier"
    blocking = True  # scikit-learn: keep it off the event loop

    def __init__(self) -> None:
        self._predict = None

    def prepare(self, stage: str) -> None:
        if self._predict is None:
            try:
                from profanity_check import predict_prob
            except ImportError as exc:
                raise BackendError("alt-profanity-check is not installed (pip install alt-profanity-check)") from exc
            self._predict = predict_prob

    def screen(self, text: str, stage: str) -> list[Hit]:
        self.prepare(stage)
        score = float(self._predict([text])[0])
        if score >= settings.MODERATION_THRESHOLD:
            return [Hit(category=CATEGORY, block=True, score=round(score, 4), backend=self.name)]
        return []


def backend() -> ClassifierBackend:
    return ClassifierBackend()
