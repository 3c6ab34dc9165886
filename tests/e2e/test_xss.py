"""The XSS corpus (tests/e2e/xss_payloads.py) through every place a person's text is shown: messages as
typed and as streamed back by the engine, history after a reload, conversation titles, display names,
shared pages, and the staff console's flags, users and conversations.

Each page is checked twice: as users get it, under the Content-Security-Policy, and with the browser
told to ignore the policy, so the sanitizer and Django's escaping have to hold on their own (a test
under the policy alone would pass with a broken sanitizer). Either way: no payload ran (`__xss` is
a binding that records every call, dialogs are recorded too), no request left for anywhere but the
product, and nothing script-bearing is in the page.
"""

from __future__ import annotations

import re

import pytest
from allauth.mfa.totp.internal.auth import generate_totp_secret
from playwright.sync_api import expect

from billing.models import Plan
from billing.seed import seed_plans
from chat.models import Message
from chat.sharing import services as sharing
from moderation.models import Flag
from tests.chat.factories import conversation_for, exchange
from tests.conftest import make_user
from tests.e2e.chatpage import TIMEOUT
from tests.e2e.test_console import sign_in_with_code
from tests.e2e.xss_payloads import PAYLOADS
from tests.support.accounts import make_staff

pytestmark = [pytest.mark.e2e, pytest.mark.hostile_content]

#: Display names are at most 150 characters: the payloads that fit.
NAMES = [payload for payload in PAYLOADS if len(payload) <= 150]

# Anything in the whole document that could run script or load a page: an event handler attribute, a
# javascript:/vbscript:/data:text/html URL, an inline script the server did not nonce (its JSON data
# blocks do not run), a frame, a base or a refresh. The product's own markup has none (the policy would refuse it).
SCRIPT_BEARING = r"""() => {
  const bad = [];
  const urls = /^\s*(javascript|vbscript|data:\s*text\/html)/i;
  for (const el of document.querySelectorAll("*")) {
    const tag = el.tagName.toLowerCase();
    for (const attr of el.attributes) {
      const name = attr.name.toLowerCase();
      if (name.startsWith("on")) bad.push(`${tag} ${name}`);
      if (name === "srcdoc") bad.push(`${tag} srcdoc`);
      const value = attr.value.replace(/[\u0000-\u0020]/g, "");
      if (urls.test(value) && /(href|src|action|data|formaction)$/.test(name)) bad.push(`${tag} ${name}=${attr.value}`);
    }
    if (tag === "script" && !el.src && !el.nonce && !/json/i.test(el.type)) bad.push(`inline script: ${el.textContent.slice(0, 60)}`);
    if (["iframe", "frame", "object", "embed", "base"].includes(tag)) bad.push(tag);
    if (tag === "meta" && /refresh/i.test(el.httpEquiv || "")) bad.push("meta refresh");
  }
  return bad;
}"""


class Watch:
    """What hostile text managed in one browser context: calls of `__xss`, requests to other hosts,
    dialogs."""

    def __init__(self, context, base_url: str):
        self.ran: list = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        context.expose_function("__xss", lambda n=None: self.ran.append(n))
        context.on("request", self._request)
        context.on("page", lambda page: page.on("dialog", self._dialog))
        self.base_url = base_url

    def _request(self, request) -> None:
        if request.url.startswith(("http:", "https:")) and not request.url.startswith(self.base_url):
            self.requests.append(request.url)

    def _dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def assert_inert(self, page, where: str) -> None:
        page.wait_for_load_state("load")
        assert page.evaluate(SCRIPT_BEARING) == [], where
        assert self.ran == [], f"payloads ran on {where}: {self.ran}"
        assert self.requests == [], f"requests left {where} for {self.requests}"
        assert self.dialogs == [], f"dialogs on {where}: {self.dialogs}"


@pytest.fixture(params=["under the policy", "without the policy"])
def bypass_csp(request) -> bool:
    return request.param == "without the policy"


@pytest.fixture
def corpus(chat_user):
    """The corpus as history: every payload a conversation's title, and one conversation where each is
    a question and its answer. The user's display name is a payload too."""
    chat_user.display_name = NAMES[27]
    chat_user.save(update_fields=["display_name"])
    for payload in PAYLOADS:
        conversation_for(chat_user, title=payload[:200])
    conversation = conversation_for(chat_user, title="XSS corpus " + PAYLOADS[0])
    parent = None
    for payload in PAYLOADS:
        _, parent = exchange(conversation, payload, payload, parent=parent)
    return conversation


def test_the_corpus_typed_and_streamed_back_stays_text(open_chat, bypass_csp):
    chat = open_chat(None, bypass_csp=bypass_csp)
    watch = Watch(chat.page.context, chat.base_url)
    chat.open("/")
    text = "\n\n".join(PAYLOADS)
    answer = chat.send(text)
    assert chat.wait_for_status(answer, "completed", "stopped", "failed") == "completed"
    saved = Message.objects.get(pk=chat.message_id(answer))
    assert saved.content.strip() == text.strip()  # the engine really streamed every payload back
    # Typed text is shown as typed: every payload is there, as text.
    bubble = chat.questions().first.locator(".bubble")
    for payload in PAYLOADS:
        expect(bubble).to_contain_text(payload.strip())
    watch.assert_inert(chat.page, "the chat page, streamed")
    chat.reload()
    expect(chat.answers()).to_have_count(1, timeout=TIMEOUT)
    watch.assert_inert(chat.page, "the chat page, from history")
    assert chat.dialogs == []


def test_the_corpus_in_history_titles_and_names_stays_text(open_chat, corpus, bypass_csp):
    chat = open_chat(None, bypass_csp=bypass_csp)
    watch = Watch(chat.page.context, chat.base_url)
    chat.open(f"/c/{corpus.pk}/")
    expect(chat.answers()).to_have_count(len(PAYLOADS), timeout=TIMEOUT)
    # Titles are text in the sidebar, and the page's title is the conversation's.
    for payload in PAYLOADS[:5]:
        expect(chat.sidebar).to_contain_text(payload.strip()[:40])
    expect(chat.page).to_have_title(re.compile(re.escape("XSS corpus")))
    watch.assert_inert(chat.page, "a conversation of payloads")
    # A conversation whose title is the payload, opened on its own.
    titled = corpus.owner.conversations.get(title=PAYLOADS[0])
    chat.open(f"/c/{titled.pk}/")
    watch.assert_inert(chat.page, "a conversation titled with a payload")
    chat.page.goto("/accounts/settings/")
    watch.assert_inert(chat.page, "the settings page")


def test_the_corpus_on_a_shared_page_stays_text(open_chat, chat_user, corpus, bypass_csp):
    link, _ = sharing.share_conversation(chat_user, corpus.pk, show_owner_name=True)
    reader = open_chat(None, signed_in=False, bypass_csp=bypass_csp)
    watch = Watch(reader.page.context, reader.base_url)
    assert reader.page.goto(f"/s/{link.token}/").status == 200
    reader.wait_ready()
    expect(reader.page.locator("#thread article.msg-assistant")).to_have_count(len(PAYLOADS), timeout=TIMEOUT)
    expect(reader.page.get_by_role("heading", level=1)).to_have_text(corpus.title)
    expect(reader.page.locator("body")).to_contain_text(NAMES[27].strip()[:20])  # the owner's name, as text
    watch.assert_inert(reader.page, "the shared page")


def test_the_corpus_in_the_console_stays_text(open_page, e2e_server, chat_user, corpus, bypass_csp):
    seed_plans(Plan)  # a transactional test starts from an emptied database
    secret = generate_totp_secret()
    staff = make_staff("moderator@example.com", secret=secret, is_superuser=True, display_name="Moderator")
    answers = list(Message.objects.filter(conversation=corpus, role="assistant").order_by("pk"))
    flags = []
    for n, (payload, answer) in enumerate(zip(PAYLOADS, answers, strict=True)):
        flags.append(
            Flag.objects.create(
                message=answer,
                user=chat_user,
                source="user_report" if n % 2 else "output",
                reporter=make_user(f"reporter{n}@example.com", display_name=NAMES[n % len(NAMES)]) if n % 2 else None,
                category=payload[:60],
                text=payload,
                reason=payload,
                blocked=bool(n % 3),
            )
        )

    page = open_page(None, bypass_csp=bypass_csp)
    watch = Watch(page.context, e2e_server.base_url)
    sign_in_with_code(page, staff.email, secret)
    expect(page).to_have_url(re.compile(r"/admin/$"))
    pages = [
        "/admin/moderation/flag/",
        f"/admin/moderation/flag/{flags[0].pk}/change/",
        f"/admin/moderation/flag/{flags[1].pk}/change/",
        f"/admin/moderation/flag/{flags[20].pk}/change/",
        f"/admin/moderation/flag/{flags[0].pk}/act/warn/",
        f"/admin/moderation/flag/{flags[1].pk}/act/ban/",
        "/admin/accounts/user/",
        f"/admin/accounts/user/{chat_user.pk}/change/",
        "/admin/chat/conversation/",
        f"/admin/chat/conversation/{corpus.pk}/change/",
    ]
    for path in pages:
        response = page.goto(path)
        assert response.status == 200, (path, response.status)
        watch.assert_inert(page, path)
    page.goto("/admin/moderation/flag/")
    expect(page.locator("#result_list tbody tr")).to_have_count(len(PAYLOADS))
    expect(page.locator("#result_list")).to_contain_text(PAYLOADS[1][:20])  # shown, as text
