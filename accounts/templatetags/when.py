"""How long ago something happened, in words a person reads at a glance."""

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.timesince import timesince
from django.utils.translation import gettext as _

register = template.Library()


@register.filter
def ago(moment: datetime | None) -> str:
    """'just now' within the last minute (not '0 minutes ago'), else the largest unit: '5 minutes ago'."""
    if moment is None:
        return ""
    if timezone.now() - moment < timedelta(minutes=1):
        return _("just now")
    return _("%(time)s ago") % {"time": timesince(moment, depth=1)}
