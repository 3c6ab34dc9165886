"""Moderation's data: the rule categories staff edit, and the flags staff review."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


class Category(models.Model):
    """A named set of word lists and patterns, screened by the `rules` backend."""

    class Action(models.TextChoices):
        BLOCK = "block", "Block the text"
        FLAG = "flag", "Let it through and open a flag"

    class AppliesTo(models.TextChoices):
        BOTH = "both", "What users type and what models answer"
        INPUT = "input", "Only what users type"
        OUTPUT = "output", "Only what models answer"

    name = models.CharField(max_length=60, unique=True, help_text="Shown to the user when it blocks, and on flags.")
    description = models.TextField(blank=True)
    words = models.TextField(
        blank=True,
        help_text="One word or phrase per line, matched as whole words, ignoring case and extra spaces.",
    )
    patterns = models.TextField(
        blank=True,
        help_text="One regular expression (Python syntax) per line, matched ignoring case.",
    )
    action = models.CharField(max_length=10, choices=Action.choices, default=Action.BLOCK)
    applies_to = models.CharField(max_length=10, choices=AppliesTo.choices, default=AppliesTo.BOTH)
    enabled = models.BooleanField(default=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "categories"

    def __str__(self) -> str:
        return self.name

    def word_list(self) -> list[str]:
        return [" ".join(line.split()) for line in self.words.splitlines() if line.strip()]

    def pattern_list(self) -> list[str]:
        return [line.strip() for line in self.patterns.splitlines() if line.strip()]

    def clean(self) -> None:
        for number, pattern in enumerate(self.pattern_list(), start=1):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValidationError({"patterns": f"Line {number} is not a valid regular expression: {exc}."}) from exc


class Flag(models.Model):
    """Something staff should look at: a blocked input or answer, or an answer a user reported."""

    class Source(models.TextChoices):
        INPUT = "input", "User input"
        OUTPUT = "output", "Model output"
        USER_REPORT = "user_report", "User report"

    class State(models.TextChoices):
        OPEN = "open", "Open"
        UPHELD = "upheld", "Upheld"
        DISMISSED = "dismissed", "Dismissed"

    message = models.ForeignKey("chat.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="flags")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="flags",
        help_text="Whose text it is (for an answer: who asked).",
    )
    reporter = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who reported it (user reports only).",
    )
    source = models.CharField(max_length=16, choices=Source.choices)
    category = models.CharField(max_length=60, blank=True)
    score = models.FloatField(null=True, blank=True)
    backend = models.CharField(max_length=30, blank=True, help_text="Which backend decided (empty for reports).")
    blocked = models.BooleanField(default=False, help_text="The text was refused or cut.")
    text = models.TextField(blank=True, help_text="The text as screened: for staff only, never shown to users.")
    reason = models.TextField(blank=True, help_text="What the reporting user wrote.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    notes = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["state", "-created"]), models.Index(fields=["user", "state"])]
        constraints = [
            # One open report per user and answer: reporting twice does not queue it twice.
            models.UniqueConstraint(
                fields=["message", "reporter"],
                condition=models.Q(source="user_report"),
                name="one_report_per_user_and_message",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_source_display()} flag #{self.pk} ({self.category or 'uncategorised'})"


class AccountWarning(models.Model):
    """A warning staff gave a user about what they wrote: shown on the chat page until they read it,
    and emailed to them."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="warnings")
    flag = models.ForeignKey(Flag, null=True, blank=True, on_delete=models.SET_NULL, related_name="warnings")
    text = models.TextField(help_text="What the user reads, word for word.")
    issued_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    seen_at = models.DateTimeField(null=True, blank=True, help_text="When the user dismissed it on the chat page.")

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["user"], condition=models.Q(seen_at__isnull=True), name="warning_unseen")]

    def __str__(self) -> str:
        return f"Warning #{self.pk} to {self.user}"
