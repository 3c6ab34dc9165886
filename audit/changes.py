"""What an admin edit changed, from what to what: each changed field's old and new value, kept in the
admin's own log entry (a `values` part beside Django's `changed`) and copied into the audit entry
(`details["values"]`). Every ModelAdmin of the console has it (console.site.ConsoleSite.register).

A secret is never written down, old or new: a password box, or a field whose name ends in "password",
"secret", "token" or "key" (`api_key`, `hashed_key`; not `max_api_keys` or `tokens_per_month`), is
recorded as changed, its values "(hidden)", and only when its value did change."""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from decimal import Decimal

from django import forms
from django.db import models

HIDDEN = "(hidden)"
SECRET_NAME = re.compile(r"(^|_)(password|secret|token|key)$")


def _secret(name: str, field: forms.Field) -> bool:
    return isinstance(field.widget, forms.PasswordInput) or bool(SECRET_NAME.search(name))


def _plain(value, field: forms.Field):
    """A value as the log can keep it (JSON), readable by a person: a related row by its name."""
    if isinstance(field, forms.ModelChoiceField) and not isinstance(
        value, models.Model | models.QuerySet | list | tuple
    ):
        value = field.queryset.filter(pk=value).first() if value not in (None, "") else None
    if isinstance(value, models.Model):
        return str(value)
    if isinstance(value, list | tuple | set | models.QuerySet):
        return [_plain(item, field) for item in value]
    if isinstance(value, datetime | date | Decimal):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool | dict):
        return value
    return str(value)


def changed_values(form: forms.BaseForm) -> dict[str, dict]:
    """{field name: {"label", "from", "to"}} for each field whose value the form changed."""
    values = {}
    for name in form.changed_data:
        field = form.fields[name]
        label = str(field.label or name.replace("_", " ").capitalize())
        old, new = _plain(form[name].initial, field), _plain(form.cleaned_data.get(name), field)
        if old == new:  # a form may call a field changed whose value is the same (JSON re-encoded, a key kept)
            continue
        secret = _secret(name, field)
        values[name] = {"label": label, "from": HIDDEN if secret else old, "to": HIDDEN if secret else new}
    return values


class ChangedValues:
    """ModelAdmin mixin: the change message also holds each changed field's old and new value."""

    def construct_change_message(self, request, form, formsets, add=False):
        message = super().construct_change_message(request, form, formsets, add)
        if not add and form is not None and form.changed_data:
            message.append({"values": changed_values(form)})
        return message


def values_of(change_message: str) -> dict:
    """The `values` part of a LogEntry's change message, if it has one."""
    try:
        parts = json.loads(change_message or "[]")
    except ValueError:
        return {}
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and "values" in part:
            return part["values"]
    return {}


def summary(values: dict) -> str:
    """'Requests per minute: 60 → 99; API key: changed' for the log's list."""
    said = []
    for change in values.values():
        if change.get("from") == HIDDEN:
            said.append(f"{change['label']}: changed")
        else:
            said.append(f"{change['label']}: {_short(change.get('from'))} → {_short(change.get('to'))}")
    return "; ".join(said)


def _short(value, limit: int = 60) -> str:
    text = "—" if value in (None, "", []) else (", ".join(map(str, value)) if isinstance(value, list) else str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"
