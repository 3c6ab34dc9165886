"""`{% user_overview user %}`: one person at a glance on their console page (console.selectors)."""

from django import template

from console.selectors import user_overview as overview

register = template.Library()


@register.inclusion_tag("admin/accounts/user/overview.html")
def user_overview(user) -> dict:
    return overview(user)
