"""Stored responses of the Responses API do not live forever: the nightly beat job deletes those older
than API_RESPONSES_RETENTION_DAYS, and nothing newer."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from api import tasks
from api.models import StoredResponse
from config.celery import app


def stored(user, name: str, age: timedelta) -> StoredResponse:
    return StoredResponse.objects.create(
        pk=f"resp_{name}", user=user, model="sim-small", messages=[], body={}, created_at=timezone.now() - age
    )


@pytest.mark.django_db
def test_responses_past_their_retention_are_purged_and_no_others(user, other_user):
    days = settings.API_RESPONSES_RETENTION_DAYS
    stored(user, "old", timedelta(days=days, minutes=1))
    stored(other_user, "older", timedelta(days=days * 3))
    stored(user, "young", timedelta(days=days, minutes=-1))

    assert tasks.purge_expired_responses.delay().get() == 2
    assert list(StoredResponse.objects.values_list("pk", flat=True)) == ["resp_young"]


def test_the_beat_schedule_runs_the_purge():
    entries = [entry for entry in settings.CELERY_BEAT_SCHEDULE.values() if entry["task"].startswith("api.")]
    assert [entry["task"] for entry in entries] == ["api.tasks.purge_expired_responses"]
    assert entries[0]["task"] in app.tasks
