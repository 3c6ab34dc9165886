"""Django for the OpenAI-compatible API (`/v1`): only the middleware a program's request needs, all of
it on the event loop.

`MIDDLEWARE` is the browser's chain: sessions, the CSRF check, signing in, messages, static files,
the staff two-factor rule. Run for `/v1`, several of its middleware are sync-only, so Django takes
every request to a thread of its own and back, and each `MiddlewareMixin` hook to a thread again,
for nothing a program uses: the API authenticates by key (its key check asks accounts.standing,
as the suspension middleware would), its views are CSRF-exempt, it serves no page or static file,
and config/edge.py gives every response the policy, nosniff and framing headers. So config/asgi.py
sends `/v1` to `APIHandler`, which builds its chain from `API_MIDDLEWARE` (settings); everything else
goes through `MIDDLEWARE`. `NOT_FOR_PROGRAMS` says why each middleware of `MIDDLEWARE` that is not in
`API_MIDDLEWARE` is left out (tests/config/test_api_handler.py holds the two lists to it).

Every entry of `API_MIDDLEWARE` must be async-capable; a `process_view` runs inline when its class
says it runs on the loop (config.on_the_loop), otherwise on a thread as Django would run it.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.utils.module_loading import import_string

#: What each middleware of MIDDLEWARE that the API's chain leaves out would do there, and why it is not needed.
NOT_FOR_PROGRAMS = {
    "csp.middleware.CSPMiddleware": "the policy comes from config/edge.py (JSON has no script to give a nonce)",
    "whitenoise.middleware.WhiteNoiseMiddleware": "static files are not under /v1",
    "django.contrib.sessions.middleware.SessionMiddleware": "programs authenticate by API key, not session",
    "django.middleware.common.CommonMiddleware": "no slash to append: /v1 answers every path itself",
    "django.middleware.csrf.CsrfViewMiddleware": "every /v1 view is CSRF-exempt (a key, not a cookie)",
    "django.contrib.auth.middleware.AuthenticationMiddleware": "the key check finds the user",
    "django.contrib.messages.middleware.MessageMiddleware": "no page shows messages",
    "django.middleware.clickjacking.XFrameOptionsMiddleware": "the framing ban comes from config/edge.py",
    "allauth.account.middleware.AccountMiddleware": "no sign-in flow",
    "accounts.middleware.SuspendedUserMiddleware": "the key check refuses a suspended account",
    "accounts.middleware.StaffTwoFactorMiddleware": "a key is not a staff session",
}


def _inline(method):
    async def on_the_loop(*args, **kwargs):
        return method(*args, **kwargs)

    return on_the_loop


class APIHandler(ASGIHandler):
    """An ASGI handler like Django's, whose chain is API_MIDDLEWARE, every layer of it async."""

    def load_middleware(self, is_async=False):
        if not is_async:
            raise ImproperlyConfigured("APIHandler serves ASGI only.")
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response_async)
        for path in reversed(settings.API_MIDDLEWARE):
            middleware = import_string(path)
            if not getattr(middleware, "async_capable", False):
                raise ImproperlyConfigured(f"API_MIDDLEWARE holds {path}, which cannot run asynchronously.")
            instance = middleware(handler)
            if hasattr(instance, "process_view"):
                view_hook = instance.process_view
                on_the_loop = getattr(instance, "runs_on_the_loop", False)
                self._view_middleware.insert(
                    0, _inline(view_hook) if on_the_loop else self.adapt_method_mode(True, view_hook)
                )
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(
                    self.adapt_method_mode(True, instance.process_template_response)
                )
            if hasattr(instance, "process_exception"):
                # Django runs the exception hooks synchronously (on a thread, and only when a view raised).
                self._exception_middleware.append(self.adapt_method_mode(False, instance.process_exception))
            handler = convert_exception_to_response(instance)
        self._middleware_chain = handler
