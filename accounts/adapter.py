from allauth.account.adapter import DefaultAccountAdapter
from django.contrib.sites.shortcuts import get_current_site
from django.http import HttpRequest, HttpResponse

from accounts import tasks
from accounts.selectors import signed_in_recently
from accounts.standing import AccountSuspended, account_refusal
from accounts.views import suspended_response


class AccountAdapter(DefaultAccountAdapter):
    def send_mail(self, template_prefix: str, email: str, context: dict) -> None:
        """Render here (the templates need the request), deliver from a Celery task."""
        request = context.get("request") or self.request
        ctx = {"request": request, "email": email, **context}
        ctx.setdefault("current_site", get_current_site(request))
        message = self.render_mail(template_prefix, email, ctx)
        html = next((body for body, mime in getattr(message, "alternatives", []) if mime == "text/html"), None)
        if message.content_subtype == "html":
            body, html = message.body, message.body
        else:
            body = message.body
        tasks.send_email.delay(message.subject, body, message.from_email, list(message.to), html)

    def pre_login(self, request: HttpRequest, user, **kwargs) -> HttpResponse | None:
        # A suspended account is told why; a deactivated one gets allauth's own "inactive" page.
        refusal = account_refusal(user)
        if isinstance(refusal, AccountSuspended):
            return suspended_response(request, user, refusal)
        return super().pre_login(request, user, **kwargs)

    def is_reauthentication_required(self, *, app: str, **kwargs) -> bool:
        """Not within a few minutes of a fresh sign-in (staff enrolling two-factor come straight from it)."""
        if self.request is not None and signed_in_recently(self.request):
            return False
        return super().is_reauthentication_required(app=app, **kwargs)
