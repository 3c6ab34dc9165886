"""config.settings with every job of Celery beat's schedule due each second, for the live test of the
in-process beat (tests/test_embedded_beat.py); everything else is the product's own settings."""

from config.settings import *  # noqa: F403
from config.settings import CELERY_BEAT_SCHEDULE

CELERY_BEAT_SCHEDULE = {name: {**entry, "schedule": 1.0} for name, entry in CELERY_BEAT_SCHEDULE.items()}
