from django.shortcuts import render

from config.refusals import Refusal


class RefusalMiddleware:
    """A Refusal that escapes a page view becomes a page with its status and message."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, Refusal):
            return None
        response = render(request, "refusal.html", {"refusal": exception}, status=exception.status)
        if exception.retry_after is not None:
            response["Retry-After"] = str(exception.retry_after)
        return response
