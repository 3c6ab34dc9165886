"""Every language the product offers is whole: each catalogue entry translated (none fuzzy, placeholders
kept), the compiled .mo files committed match their .po files, and the pages a person sees, rendered in
each language, show no English sentence that has a translation.

The chat's scripts' strings (djangojs) are checked in the browser by tests/e2e/test_languages.py.
"""

from __future__ import annotations

import gettext
import html
import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.utils import translation
from django.utils.translation import to_locale

from accounts.models import User
from chat.generation.run import STOPPED_BY_SUSPENSION
from chat.models import Message
from chat.serializers import message_json
from tests.chat.factories import conversation_for, exchange
from tests.support.accounts import make_user

LOCALE = Path(settings.BASE_DIR) / "locale"
LANGUAGES = [code for code, _ in settings.LANGUAGES if code != settings.LANGUAGE_CODE]
DOMAINS = ["django", "djangojs"]


def locale_dir(language: str) -> Path:
    """Django's name for a language's folder: pt-br -> pt_BR, zh-hans -> zh_Hans."""
    return LOCALE / to_locale(language) / "LC_MESSAGES"


def catalogue(path: Path) -> dict:
    with path.open("rb") as compiled:
        return dict(gettext.GNUTranslations(compiled)._catalog)  # the one way to read them all


def gettext_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("language", LANGUAGES)
def test_every_entry_is_translated_and_checks_out(language, domain):
    po = locale_dir(language) / f"{domain}.po"
    assert po.exists(), f"{po} is missing: run `make messages` and translate it"
    checked = gettext_tool("msgfmt", "--check", "--statistics", "-o", "/dev/null", str(po))
    assert checked.returncode == 0, checked.stderr  # placeholders kept, plural forms right, headers sound
    untranslated = gettext_tool("msgattrib", "--untranslated", "--no-obsolete", str(po)).stdout
    fuzzy = gettext_tool("msgattrib", "--only-fuzzy", "--no-obsolete", str(po)).stdout
    assert not re.findall(r'^msgid "(.+)"$', untranslated, re.M), f"untranslated in {po}:\n{untranslated[:2000]}"
    assert not re.findall(r'^msgid "(.+)"$', fuzzy, re.M), f"fuzzy (unchecked) in {po}:\n{fuzzy[:2000]}"


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("language", LANGUAGES)
def test_the_committed_mo_files_are_compiled_from_the_po_files(language, domain, tmp_path):
    po, mo = locale_dir(language) / f"{domain}.po", locale_dir(language) / f"{domain}.mo"
    assert mo.exists(), f"{mo} is missing: run `make messages`"
    fresh = tmp_path / "fresh.mo"
    assert gettext_tool("msgfmt", "-o", str(fresh), str(po)).returncode == 0
    assert catalogue(mo) == catalogue(fresh), f"{mo} is older than {po}: run `make messages`"


# --- the pages, rendered ------------------------------------------------------------------------------

HIDDEN = re.compile(r"<(script|style)\b.*?</\1>", re.S | re.I)
TAG = re.compile(r"<[^>]+>")
SHOWN_ATTRIBUTES = re.compile(r'\b(?:aria-label|title|placeholder|alt|value)="([^"]*)"')


def shown_text(page: str) -> str:
    """What a person reads: the text, and the labels a screen reader or a tooltip says."""
    without_code = HIDDEN.sub(" ", page)
    attributes = " ".join(SHOWN_ATTRIBUTES.findall(without_code))
    return html.unescape(" ".join(TAG.sub(" ", without_code).split()) + " " + attributes)


def english_left(text: str, translations: dict, *, fewest_words: int = 3) -> list[str]:
    """The English sentences of the catalogue that appear as they are, though translated otherwise."""
    left = []
    for msgid, msgstr in translations.items():
        if not isinstance(msgid, str) or not msgid or msgid == msgstr or "%(" in msgid or "{" in msgid:
            continue
        words = " ".join(TAG.sub(" ", html.unescape(msgid)).split())
        # A word alone ("Plans", "OK") is often the same in another language; a sentence never is.
        if len(words.split()) >= fewest_words and words in text:
            left.append(words)
    return left


@pytest.fixture
def person(db, settings):
    settings.PAYMENT_PROVIDER = "dev"
    user = make_user("lea@example.com", display_name="Léa")
    conversation = conversation_for(user, title="Zyx")
    exchange(conversation, "Qwx?", "Vbn.")
    return user


SIGNED_IN_PAGES = [
    "/",
    "/settings/",
    "/billing/",
    "/billing/plans/",
    "/billing/usage/",
    "/accounts/api-keys/",
    "/accounts/files/",
    "/accounts/shared-links/",
    "/accounts/data/",
    "/accounts/email/",
    "/accounts/password/change/",
    "/no-such-page/",
]
ANONYMOUS_PAGES = ["/", "/accounts/login/", "/accounts/signup/", "/accounts/password/reset/"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_pages_a_person_sees_have_no_english_left(person, language):
    translations = catalogue(locale_dir(language) / "django.mo")
    signed_in = Client()
    signed_in.force_login(person)
    User.objects.filter(pk=person.pk).update(language=language)
    anonymous = Client(headers={"Accept-Language": language})
    found = {}
    for client, paths in ((signed_in, SIGNED_IN_PAGES), (anonymous, ANONYMOUS_PAGES)):
        for path in paths:
            response = client.get(path, follow=True)
            assert response.status_code in (200, 404), (path, response.status_code)
            assert response["Content-Language"] == language, path
            left = english_left(shown_text(response.content.decode()), translations)
            if left:
                found[path] = left
    assert not found, f"English left in {language}: {found}"


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_note_saved_with_an_answer_is_read_in_the_persons_language(person, language):
    """The runner saves an answer's note in English (it runs outside any request); the page reads it in
    the person's language."""
    answer = Message.objects.filter(role=Message.Role.ASSISTANT).get()
    answer.status, answer.error = Message.Status.STOPPED, STOPPED_BY_SUSPENSION
    answer.save()
    expected = catalogue(locale_dir(language) / "django.mo")[STOPPED_BY_SUSPENSION]
    with translation.override(language):
        assert message_json(answer)["error"] == expected != STOPPED_BY_SUSPENSION
