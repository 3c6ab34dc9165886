"""The product in the person's language: chosen from the browser's Accept-Language, changed in Settings,
and in a right-to-left language the layout mirrors, on a desktop and on a phone."""

import pytest
from django.conf import settings
from playwright.sync_api import expect

from accounts.models import User
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import TIMEOUT
from tests.e2e.conftest import DESKTOP, PHONE
from tests.test_translations import LANGUAGES, catalogue, english_left, locale_dir

pytestmark = pytest.mark.e2e

FITS_SIDEWAYS = "document.scrollingElement.scrollWidth <= window.innerWidth"


def box(locator) -> dict:
    found = locator.bounding_box()
    assert found is not None, f"{locator} is not on screen"
    return found


def test_in_arabic_the_chat_mirrors_on_a_desktop(open_chat, chat_user):
    User.objects.filter(pk=chat_user.pk).update(language="ar")
    conversation = conversation_for(chat_user, title="مرحبا")
    exchange(conversation, "مرحبا، كيف حالك؟", "بخير، شكرا لك.")
    chat = open_chat(f"/c/{conversation.pk}/", viewport=DESKTOP)
    page = chat.page

    expect(page.locator("html")).to_have_attribute("dir", "rtl")
    expect(page.locator("html")).to_have_attribute("lang", "ar")
    # The chats' list is on the right, the conversation on its left.
    sidebar, conversation_pane = box(page.locator("#sidebar, .sidebar").first), box(page.locator(".convo"))
    assert sidebar["x"] > conversation_pane["x"]
    # The person's own message sits on the left (the end side); the answer's text starts from the right.
    thread = box(page.locator("#thread"))
    question = box(chat.questions().first.locator(".bubble"))
    assert question["x"] - thread["x"] < (thread["x"] + thread["width"]) - (question["x"] + question["width"])
    paragraph = chat.answers().first.locator(".md p").first
    assert paragraph.evaluate("(p) => getComputedStyle(p).direction") == "rtl"
    assert page.evaluate(FITS_SIDEWAYS)


def test_in_arabic_the_phone_drawers_come_from_the_right(open_chat, chat_user):
    User.objects.filter(pk=chat_user.pk).update(language="ar")
    chat = open_chat("/", viewport=PHONE)
    page = chat.page
    expect(page.locator("html")).to_have_attribute("dir", "rtl")
    drawer = page.locator(".sidebar")
    expect(drawer).not_to_be_in_viewport()
    assert page.evaluate(FITS_SIDEWAYS)

    page.locator("#sidebar-toggle").click()
    # It comes to rest against the right edge (once its slide has ended).
    page.wait_for_function(
        "() => Math.abs(document.querySelector('.sidebar').getBoundingClientRect().right - window.innerWidth) <= 1",
        timeout=TIMEOUT,
    )
    expect(drawer).to_be_in_viewport(ratio=0.9)
    assert page.evaluate(FITS_SIDEWAYS)


def test_the_language_follows_the_browser_and_then_the_persons_own_choice(open_page, chat_user):
    """No choice of one's own: the browser's Accept-Language. Chosen in Settings: that one, whatever the
    browser says, on the next page and from then on."""
    page = open_page("/settings/", user=chat_user, viewport=PHONE, locale="de-DE")
    expect(page.locator("html")).to_have_attribute("lang", "de")
    page.locator("#language").select_option("ja")
    page.locator("form.settings-form button[type=submit]").last.click()
    expect(page.locator("html")).to_have_attribute("lang", "ja", timeout=TIMEOUT)
    expect(page.locator("#language")).to_have_value("ja")
    assert User.objects.get(pk=chat_user.pk).language == "ja"
    page.goto("/")
    expect(page.locator("html")).to_have_attribute("lang", "ja")
    # Back to the browser's.
    page.goto("/settings/")
    page.locator("#language").select_option("")
    page.locator("form.settings-form button[type=submit]").last.click()
    expect(page.locator("html")).to_have_attribute("lang", "de", timeout=TIMEOUT)


# What a person reads on the chat page once its scripts have run: the text, and what buttons and boxes say.
SHOWN = """() => [document.body.innerText,
  ...[...document.querySelectorAll('[aria-label], [title], [placeholder]')].flatMap((el) =>
    ['aria-label', 'title', 'placeholder'].map((name) => el.getAttribute(name) || ''))].join(' ')"""


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_chat_page_and_its_scripts_speak_the_persons_language(open_chat, chat_user, language):
    User.objects.filter(pk=chat_user.pk).update(language=language)
    conversation = conversation_for(chat_user, title="Zyx")
    exchange(conversation, "Qwx?", "Vbn.")
    translations = {
        **catalogue(locale_dir(language) / "django.mo"),
        **catalogue(locale_dir(language) / "djangojs.mo"),
    }
    chat = open_chat(f"/c/{conversation.pk}/", viewport=PHONE)
    page = chat.page
    expect(chat.answers()).to_have_count(1)
    expect(page.locator("html")).to_have_attribute("lang", language)
    left = {"conversation": english_left(" ".join(page.evaluate(SHOWN).split()), translations, fewest_words=2)}
    page.goto("/")  # a new chat's welcome and its suggestions
    expect(page.locator(".empty")).to_be_visible()
    left["new chat"] = english_left(" ".join(page.evaluate(SHOWN).split()), translations, fewest_words=2)
    assert not any(left.values()), f"English left in {dict(settings.LANGUAGES)[language]}: {left}"


ARABIC_QUESTION = "ما الفرق بين الذاكرة المؤقتة للبادئة والذاكرة المؤقتة للاستجابة؟"
ARABIC_ANSWER = """**الذاكرة المؤقتة للبادئة** تحفظ حالة الانتباه (KV cache) لبداية المطالبات التي رآها المحرك من قبل، فلا يعيد حسابها.

### متى تفيد كل واحدة

1. البادئة: كل طلب يبدأ بالتعليمات نفسها، وكل دور يكرر المحادثة السابقة.
2. الاستجابة: سؤال مكرر بالحرف، بدرجة حرارة 0، يُجاب من الإجابة الأولى دون أي عمل على GPU.

```python
def shared_prefix(cached: list[int], prompt: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(cached, prompt)) if a != b), min(len(cached), len(prompt)))
```

| الطلب | رموز المطالبة | من الذاكرة |
|---:|---:|---:|
| 1 | 420 | 0 |
| 2 | 610 | 420 |

والنسبة المحفوظة في الدور الثاني هي $\\frac{420}{610} \\approx 0.69$."""


@pytest.mark.parametrize(("device", "viewport", "theme"), [("desktop", DESKTOP, "light"), ("phone", PHONE, "dark")])
def test_screenshots_the_chat_in_arabic(open_chat, chat_user, screenshot_dir, device, viewport, theme):
    User.objects.filter(pk=chat_user.pk).update(language="ar")
    for title in ("رحلة إلى مراكش", "دوال النوافذ في SQL", "أفكار لبطاقة عيد ميلاد"):
        conversation_for(chat_user, title=title)
    conversation = conversation_for(chat_user, title="الذاكرة المؤقتة في SGLang")
    exchange(conversation, ARABIC_QUESTION, ARABIC_ANSWER)
    chat = open_chat(f"/c/{conversation.pk}/", viewport=viewport, theme=theme)
    expect(chat.answers().first.locator(".md .katex")).to_have_count(1, timeout=TIMEOUT)  # KaTeX loads on first math
    chat.page.wait_for_function("() => document.fonts.check('1em KaTeX_Main')")
    chat.page.locator("#messages").evaluate("el => el.scrollTop = 0")
    chat.page.screenshot(path=screenshot_dir / f"chat-arabic-{device}-{theme}.png")
