"""The Settings page's rules: what a person may choose for themselves (writes and the reads that go with them).

Display name, theme, language, the model new chats start with, and custom instructions (a personal system
prompt the web chat adds after the product's own prompt; see chat.generation.assemble). Which
models a plan allows is billing's to decide: this module asks it and never decides it itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest
from django.utils import translation
from django.utils.translation import gettext as _

from accounts.models import User
from billing import services as billing
from config.refusals import BadInput, NotAllowed
from config.text import grouped
from inference.catalogue import ModelInfo, available_models, get_model

DISPLAY_NAME_MAX = 150
#: About 750 tokens: room is left for the question even in a small plan's window.
CUSTOM_INSTRUCTIONS_MAX = 3000
THEMES = tuple(User.Theme.values)


@dataclass(frozen=True)
class ModelChoice:
    model: ModelInfo
    allowed: bool


def model_choices(user: User) -> list[ModelChoice]:
    """Every offered model, and whether the user's plan allows it (billing's answer)."""
    allowed = set(billing.allowed_models(user))
    return [ModelChoice(model, model.id in allowed) for model in available_models()]


def clean_theme(theme: object) -> str:
    if theme not in THEMES:
        raise BadInput(_("Choose a theme: light, dark, or the same as the device."), param="theme")
    return str(theme)


def set_theme(user: User, theme: object) -> User:
    """Save the theme (the page's light/dark toggle saves through here too)."""
    user.theme = clean_theme(theme)
    user.save(update_fields=["theme"])
    return user


def update_settings(
    user: User,
    *,
    display_name: object,
    theme: object,
    default_model: object,
    custom_instructions: object,
    language: object = "",
) -> User:
    """Save everything on the Settings page at once, or nothing: each refusal names its field."""
    if not isinstance(display_name, str):
        raise BadInput(_("The display name must be text."), param="display_name")
    name = " ".join(display_name.split())
    if len(name) > DISPLAY_NAME_MAX:
        raise BadInput(
            _("Keep the display name under %(most)s characters.") % {"most": DISPLAY_NAME_MAX}, param="display_name"
        )
    chosen_theme = clean_theme(theme)
    chosen_language = clean_language(language)
    model = _clean_default_model(user, default_model)
    if not isinstance(custom_instructions, str):
        raise BadInput(_("Custom instructions must be text."), param="custom_instructions")
    instructions = custom_instructions.strip().replace("\r\n", "\n")
    if len(instructions) > CUSTOM_INSTRUCTIONS_MAX:
        raise BadInput(
            _("Custom instructions are %(length)s characters long; keep them under %(most)s.")
            % {"length": grouped(len(instructions)), "most": grouped(CUSTOM_INSTRUCTIONS_MAX)},
            param="custom_instructions",
        )
    user.display_name, user.theme, user.default_model, user.custom_instructions, user.language = (
        name,
        chosen_theme,
        model,
        instructions,
        chosen_language,
    )
    user.save(update_fields=["display_name", "theme", "default_model", "custom_instructions", "language"])
    return user


def clean_language(language: object) -> str:
    """ "" (the browser's language) or one of the product's languages."""
    if language in (None, ""):
        return ""
    if not isinstance(language, str) or language not in dict(settings.LANGUAGES):
        raise BadInput(_("Choose one of the languages listed."), param="language")
    return language


def _clean_default_model(user: User, model_id: object) -> str:
    """ "" (the plan's own default) or a model the user's plan allows; billing refuses the others (403)."""
    if model_id in (None, ""):
        return ""
    model = get_model(model_id) if isinstance(model_id, str) else None
    if model is None:
        raise BadInput(_("There is no model called %(model)s.") % {"model": repr(model_id)}, param="default_model")
    try:
        billing.check_model_allowed(billing.effective_plan(user), model.id)
    except NotAllowed as refusal:
        raise NotAllowed(refusal.message, param="default_model", **refusal.details) from refusal
    return model.id


def language_of(user: User, request: HttpRequest) -> str:
    """The language to speak to `user`: their own choice (Settings), else what their browser asks for
    (the language cookie, then Accept-Language), as Django's LocaleMiddleware reads it."""
    if user.is_authenticated and user.language:
        return user.language
    return translation.get_language_from_request(request)


def socket_language(user: User, scope: dict) -> str:
    """language_of for a WebSocket: the browser's headers as they were when it connected."""
    request = HttpRequest()
    request.COOKIES = dict(scope.get("cookies") or {})
    for name, value in scope.get("headers") or ():
        if name.lower() == b"accept-language":
            request.META["HTTP_ACCEPT_LANGUAGE"] = value.decode("latin-1")
    return language_of(user, request)


def own_language(user: User) -> str | None:
    """The language `user` chose in Settings, for what is written for them outside their own request (an
    e-mail sent from staff's, a title saved by a task); None (English) when they follow their browser's."""
    if not user.language:
        return None
    try:
        return translation.get_supported_language_variant(user.language)
    except LookupError:
        return None
