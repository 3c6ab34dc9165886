"""The `classifier` backend: alt-profanity-check's model, on the CPU, with the configured threshold."""

import pytest

from moderation import services
from moderation.backends import INPUT, OUTPUT, BackendError
from moderation.backends.classifier import ClassifierBackend

pytest.importorskip("profanity_check", reason="the optional extra alt-profanity-check is not installed")


def test_offensive_language_is_blocked_and_ordinary_text_passes(settings):
    settings.MODERATION_THRESHOLD = 0.8
    backend = ClassifierBackend()
    hits = backend.screen("you are a stupid idiot", INPUT)
    assert [(h.category, h.block, h.backend) for h in hits] == [("offensive language", True, "classifier")]
    assert hits[0].score >= 0.8
    assert backend.screen("The lighthouse keeper climbs the stairs at dusk.", OUTPUT) == []


def test_the_threshold_is_the_operator_s(settings):
    backend = ClassifierBackend()
    settings.MODERATION_THRESHOLD = 1.01  # nothing is that sure
    assert backend.screen("you are a stupid idiot", INPUT) == []


def test_without_the_package_it_is_a_backend_error_and_the_fail_mode_decides(settings, monkeypatch, db, user):
    import builtins

    real_import = builtins.__import__

    def no_profanity_check(name, *args, **kwargs):
        if name == "profanity_check":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_profanity_check)
    with pytest.raises(BackendError, match="not installed"):
        ClassifierBackend().prepare(INPUT)

    monkeypatch.setattr(services, "load", lambda name: ClassifierBackend())
    settings.MODERATION_BACKENDS = ["classifier"]
    settings.MODERATION_FAIL_MODE = "open"
    assert services.judge("anything", INPUT).allowed
    settings.MODERATION_FAIL_MODE = "closed"
    assert services.judge("anything", INPUT).unavailable
