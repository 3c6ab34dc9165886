from django.shortcuts import render
from django.utils.deprecation import MiddlewareMixin

from config.refusals import Refusal


class RefusalMiddleware(MiddlewareMixin):
    """A Refusal that escapes a page view becomes a page with its status and message.

    (A MiddlewareMixin with only process_exception costs nothing on the way in or out, sync or async.)
    """

    def process_exception(self, request, exception):
        if not isinstance(exception, Refusal):
            return None
        response = render(request, "refusal.html", {"refusal": exception}, status=exception.status)
        if exception.retry_after is not None:
            response["Retry-After"] = str(exception.retry_after)
        return response
