from django.utils.deprecation import MiddlewareMixin

from config.http import refusal_response
from config.refusals import Refusal


class RefusalMiddleware(MiddlewareMixin):
    """A Refusal that escapes a view becomes its status and message (config.http: the refusal page for
    a person, JSON for a program).

    (A MiddlewareMixin with only process_exception costs nothing on the way in or out, sync or async.)
    """

    def process_exception(self, request, exception):
        if not isinstance(exception, Refusal):
            return None
        return refusal_response(request, exception)
