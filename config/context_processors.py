from django.conf import settings


def site(request):
    """Values every page's shell needs."""
    return {"SITE_NAME": settings.SITE_NAME, "DEBUG": settings.DEBUG}
