"""`{% trace_link message.trace_id %}`: an answer's trace id, linked to the trace backend's page for it
when TRACE_URL_TEMPLATE names one (config/tracing.py)."""

from django import template
from django.conf import settings
from django.utils.html import format_html

register = template.Library()


@register.simple_tag
def trace_link(trace_id: str) -> str:
    if not trace_id:
        return ""
    if not settings.TRACE_URL_TEMPLATE:
        return format_html("<code>{}</code>", trace_id)
    url = settings.TRACE_URL_TEMPLATE.replace("{trace_id}", trace_id)
    return format_html('<a href="{}" target="_blank" rel="noopener"><code>{}</code></a>', url, trace_id)
