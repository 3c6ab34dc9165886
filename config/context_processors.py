from django.conf import settings


def site(request):
    """Values every page's shell needs."""
    return {
        "SITE_NAME": settings.SITE_NAME,
        "DEBUG": settings.DEBUG,
        # Single sign-on is configured (OIDC_CLIENT_ID): only then do accounts have others to connect.
        "SINGLE_SIGN_ON": bool(settings.SOCIALACCOUNT_PROVIDERS),
    }
