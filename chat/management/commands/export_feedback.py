"""Write answer feedback as JSONL for offline evaluation (docs/chat-protocol.md, "Answer feedback")."""

from __future__ import annotations

import contextlib
import datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from chat.feedback.selectors import feedback_to_export
from chat.feedback.services import export_ratings


def _since(value: str) -> datetime.datetime:
    moment = parse_datetime(value)
    if moment is None:
        day = parse_date(value)
        if day is None:
            raise CommandError(f"--since {value!r} is not a date (2026-01-31) or a date and time (2026-01-31T12:00).")
        moment = datetime.datetime.combine(day, datetime.time.min)
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


class Command(BaseCommand):
    help = (
        "Write every answer rating (thumbs up/down and comment) as JSONL: one object per rating with the "
        "conversation's context up to the answer, the answer, model, node, rating, comment and dates. The "
        "export is recorded in the audit log with its row count and --reason."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--since",
            type=_since,
            help="Only ratings given or changed on or after this date "
            "(YYYY-MM-DD, or an ISO date and time; server time zone).",
        )
        parser.add_argument("--output", "-o", help="The file to write (standard output when omitted).")
        parser.add_argument(
            "--reason", default="", help="Why the ratings are exported: kept with the export's entry in the audit log."
        )

    def handle(self, *args, since=None, output=None, reason="", **options):
        # The records hold the conversations up to each answer: the export is in the audit log (the system's).
        lines = export_ratings(None, feedback_to_export(since=since), reason, via="manage.py export_feedback")
        count = 0
        with contextlib.ExitStack() as stack:
            if output:
                write = stack.enter_context(open(output, "w", encoding="utf-8")).write
            else:

                def write(line: str) -> None:
                    self.stdout.write(line, ending="")

            for line in lines:
                write(line)
                count += 1
        self.stderr.write(f"Wrote {count} rating{'s' if count != 1 else ''} to {output or 'standard output'}.")
