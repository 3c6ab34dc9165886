from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from accounts.models import User
from config.http import JSON, refusal_response, speaks
from config.refusals import BadInput, Refusal
from config.text import whole_number


def suspended_response(request: HttpRequest, user, refusal: Refusal) -> HttpResponse:
    """Refuse a suspended user (403) and say why: the JSON error to a script, the page to a person.

    A signed-in user stays signed in (the page offers to sign out): ended silently, their session
    would only tell them "Sign in to continue", never the reason.
    """
    return refusal_response(
        request,
        refusal,
        template="accounts/suspended.html",
        context={"refusal": refusal, "suspended_at": user.suspended_at},
    )


# The key just made, between the POST that made it and the page that shows it once. Post/redirect/get
# means a reload cannot make a second key; the key leaves the session as soon as it is shown.
NEW_KEY_SESSION_KEY = "accounts.new_api_key"


@login_required
def api_keys(request: HttpRequest) -> HttpResponse:
    """List the user's API keys; create one (shown once) or revoke one."""
    from accounts import api_keys as keys
    from billing.services import effective_plan

    refused = None
    if request.method == "POST":
        try:
            if "revoke" in request.POST:
                # Sent by a keys page from before revoking asked first: ask now (api_key_revoke).
                return _see_other(reverse("account_api_key_revoke", args=[_int(request.POST["revoke"])]))
            days = request.POST.get("expires_in_days", "").strip()
            expires_at = keys.expiry_after(_int(days, _("The expiry is a number of days.")) if days else None)
            _key, raw = keys.create_api_key(request.user, request.POST.get("name", ""), expires_at=expires_at)
            request.session[NEW_KEY_SESSION_KEY] = raw
            return _see_other(reverse("account_api_keys"))  # the page that shows the key, fetched with a GET
        except Refusal as refusal:
            refused = refusal
    new_key = request.session.pop(NEW_KEY_SESSION_KEY, None) if request.method == "GET" else None
    context = {
        "keys": request.user.api_keys.all(),
        "new_key": new_key,
        "error": refused.message if refused else None,
        "plan": effective_plan(request.user),
        "typed": request.POST if refused else {},
    }
    if refused is not None:  # the page again, the refusal beside the form
        return refusal_response(request, refused, template="accounts/api_keys.html", context=context)
    return render(request, "accounts/api_keys.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def api_key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    """Revoking a key asks first (it cannot be undone): GET is the question, its form's POST revokes.
    A page of its own, as Django's admin asks before deleting: it needs no script and no dialog."""
    from accounts import api_keys as keys
    from accounts.selectors import api_key_of

    if request.method == "POST":
        revoked = keys.revoke_api_key(request.user, key_id)
        messages.success(
            request,
            _("Revoked the key “%(name)s” (%(prefix)s…). Programs using it no longer work.")
            % {"name": revoked.name, "prefix": revoked.prefix},
        )
        return _see_other(reverse("account_api_keys"))
    return render(request, "accounts/api_key_revoke.html", {"key": api_key_of(request.user, key_id)})


def _see_other(url: str) -> HttpResponseRedirect:
    """A redirect the browser follows with a GET (303), so a reload cannot send the form again."""
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return response


def _int(value: str, what: str | None = None) -> int:
    # Not int(value): it reads Arabic-Indic digits as digits, and "1_0" as 10 (config.text.whole_number).
    number = whole_number(value.strip())
    if number is None:
        raise BadInput(what or _("That is not a key id."))
    return number


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """The signed-in person's settings: display name, theme, default model, custom instructions,
    and the keyboard shortcuts. One form; saved all at once (post/redirect/get) or not at all."""
    from accounts import preferences

    refused, typed = None, None
    if request.method == "POST":
        typed = {
            name: request.POST.get(name, "")
            for name in ("display_name", "theme", "language", "default_model", "custom_instructions")
        }
        try:
            preferences.update_settings(request.user, **typed)
        except Refusal as refusal:
            refused = refusal
            request.user.refresh_from_db()  # the page shows what is saved beside what was typed
        else:
            translation.activate(preferences.language_of(request.user, request))  # said in the language chosen
            messages.success(request, _("Settings saved."))
            see_other = HttpResponseRedirect(reverse("settings"))
            see_other.status_code = 303
            return see_other
    user = request.user
    values = typed or {
        "display_name": user.display_name,
        "theme": user.theme,
        "language": user.language,
        "default_model": user.default_model,
        "custom_instructions": user.custom_instructions,
    }
    choices = preferences.model_choices(user)
    saved_model_unavailable = bool(user.default_model) and not any(
        choice.model.id == user.default_model and choice.allowed for choice in choices
    )
    context = {
        "values": values,
        "error": {"field": refused.details.get("param"), "message": refused.message} if refused else None,
        "themes": User.Theme.choices,
        "languages": settings.LANGUAGES,
        "model_choices": choices,
        "saved_model_unavailable": saved_model_unavailable,
        "instructions_max": preferences.CUSTOM_INSTRUCTIONS_MAX,
        "display_name_max": preferences.DISPLAY_NAME_MAX,
    }
    if refused is not None:  # the page again, the refusal beside the field it concerns
        return refusal_response(request, refused, template="accounts/settings.html", context=context)
    return render(request, "accounts/settings.html", context)


@login_required
@require_POST
@speaks(JSON)
def save_theme(request: HttpRequest) -> HttpResponse:
    """The light/dark toggle in every page's header saves the choice here (204; 400 with a sentence)."""
    from accounts import preferences

    try:
        preferences.set_theme(request.user, request.POST.get("theme"))
    except Refusal as refusal:
        return refusal_response(request, refusal)
    return HttpResponse(status=204)
