"""`{% user_overview user %}`: one person at a glance on their console page (console.selectors)."""

from django import template

from console.selectors import user_overview as overview

register = template.Library()


@register.inclusion_tag("admin/accounts/user/overview.html", takes_context=True)
def user_overview(context, user) -> dict:
    staff = context["request"].user
    # Plan, usage and the ledger are billing's: shown to staff who may see billing (not moderators).
    return {**overview(user), "sees_billing": staff.has_perm("billing.view_subscription")}
