"""Django for the OpenAI-compatible API (`/v1`): only the middleware a program's request needs, all of
it on the event loop.

`MIDDLEWARE` is the browser's chain: sessions, the CSRF check, signing in, messages, static files,
the staff two-factor rule, none of which a program uses. The API authenticates by key (its key
check asks accounts.standing, as the suspension middleware would), its views are CSRF-exempt, it
serves no page or static file, and config/edge.py gives every response the policy, nosniff and
framing headers. So config/asgi.py sends `/v1` to `APIHandler`, which builds its chain from
`API_MIDDLEWARE` (settings); everything else goes through `MIDDLEWARE`. `NOT_FOR_PROGRAMS` says why
each middleware of `MIDDLEWARE` that is not in `API_MIDDLEWARE` is left out (tests/test_api_handler.py
holds the two lists to it).

Like the browser's chain, it runs on the event loop (config.loop_handler.LoopHandler).
"""

from __future__ import annotations

from config.loop_handler import LoopHandler

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
    "django.middleware.locale.LocaleMiddleware": "the API answers in English, as OpenAI's does (programs read it)",
    "accounts.middleware.UserLanguageMiddleware": "the API answers in English, as OpenAI's does",
    "accounts.middleware.SuspendedUserMiddleware": "the key check refuses a suspended account",
    "accounts.middleware.StaffTwoFactorMiddleware": "a key is not a staff session",
}


class APIHandler(LoopHandler):
    """Django's ASGI handler for /v1: the chain API_MIDDLEWARE, every layer of it on the event loop."""

    middleware_setting = "API_MIDDLEWARE"
