"""Screenshots of the chat page and the landing page in light and dark, on a desktop and a phone.

They go to a temporary directory, or to docs/screenshots/ (committed) with E2E_SCREENSHOTS=1:

    E2E_SCREENSHOTS=1 .venv/bin/pytest tests/e2e/test_screenshots.py

Also the rate-limit notice counting down, in both themes at both sizes, and an answer with math and an
aligned table.
"""

import pytest
from playwright.sync_api import expect

from billing.models import Plan
from billing.seed import seed_plans
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import TIMEOUT
from tests.e2e.conftest import DESKTOP, PHONE
from tests.support.plans import put_on_plan
from tests.support.rate_limits import requests_made

pytestmark = pytest.mark.e2e

QUESTION = "How does prefix caching make a chat faster? A short example in Python, please."
ANSWER = """**Prefix caching** keeps the attention state (the KV cache) of prompts the engine has already
seen, so a new request that *starts the same way* skips that part of the work.

### Why chats benefit

1. Every request begins with the same system prompt.
2. Each turn repeats the whole conversation so far, plus one new message.
3. Only the new tokens need a prefill, so the first token arrives sooner.

```python
def shared_prefix(cached: list[int], prompt: list[int]) -> int:
    \"\"\"How many leading tokens of `prompt` are already cached.\"\"\"
    n = 0
    for a, b in zip(cached, prompt):
        if a != b:
            break
        n += 1
    return n
```

| Turn | Prompt tokens | From cache |
|---:|---:|---:|
| 1 | 420 | 0 |
| 2 | 610 | 420 |
| 3 | 845 | 610 |

SGLang does this with a radix tree over token ids (see the [docs](https://docs.sglang.ai))."""
OTHERS = [
    "Weekend trip to Lisbon",
    "SQL window functions",
    "Birthday card ideas",
    "Rust lifetimes explained",
    "Explain Kubernetes probes",
    "Sourdough starter schedule",
]


@pytest.fixture
def showcase(chat_user):
    for title in OTHERS:
        conversation_for(chat_user, title=title)
    conversation_for(chat_user, title="Release checklist", pinned=True)
    conversation = conversation_for(chat_user, title="Prefix caching in SGLang")
    exchange(conversation, QUESTION, ANSWER)
    return conversation


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_screenshots_desktop(open_chat, showcase, screenshot_dir, theme):
    chat = open_chat(f"/c/{showcase.pk}/", theme=theme)
    expect(chat.answers().first.locator(".code-block")).to_be_visible()
    expect(chat.sidebar.locator("li.conv-item")).to_have_count(len(OTHERS) + 2)
    chat.page.locator("#messages").evaluate("el => el.scrollTop = 0")
    chat.page.screenshot(path=screenshot_dir / f"chat-desktop-{theme}.png")

    chat.page.get_by_role("button", name="New chat", exact=True).click()
    expect(chat.page.get_by_role("heading", name="How can I help, Ada?")).to_be_visible()
    chat.page.screenshot(path=screenshot_dir / f"chat-new-desktop-{theme}.png")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_screenshots_phone(open_chat, showcase, screenshot_dir, theme):
    chat = open_chat(f"/c/{showcase.pk}/", viewport=PHONE, theme=theme)
    expect(chat.answers().first.locator(".code-block")).to_be_visible()
    chat.page.locator("#messages").evaluate("el => el.scrollTop = 0")
    chat.page.screenshot(path=screenshot_dir / f"chat-phone-{theme}.png")

    chat.page.get_by_role("button", name="Show conversations").click()
    expect(chat.sidebar).to_be_in_viewport(ratio=0.9)
    chat.page.screenshot(path=screenshot_dir / f"chat-phone-sidebar-{theme}.png")


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize(("device", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_screenshots_rate_limit_notice(open_chat, showcase, chat_user, screenshot_dir, device, viewport, theme):
    plan = put_on_plan(chat_user, "free")
    chat = open_chat(f"/c/{showcase.pk}/", viewport=viewport, theme=theme)
    expect(chat.answers().first.locator(".code-block")).to_be_visible()
    chat.prompt.fill("And how large should the cache be?")
    # The whole minute's allowance was used 18 s ago: the notice counts down from about 42 s.
    requests_made(chat_user, plan, seconds_ago=18, count=plan.requests_per_minute)
    chat.prompt.press("Enter")
    expect(chat.notice.locator(".notice-text")).to_contain_text("Try again in", timeout=30_000)
    expect(chat.send_button).to_be_disabled()
    chat.page.screenshot(path=screenshot_dir / f"rate-limit-{device}-{theme}.png")


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize(("device", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_screenshots_landing(open_page, screenshot_dir, transactional_db, theme, device, viewport):
    seed_plans(Plan)
    page = open_page("/", viewport=viewport, theme=theme)
    expect(page.locator("[data-plan]")).to_have_count(Plan.objects.filter(is_public=True).count())
    page.screenshot(path=screenshot_dir / f"landing-{device}-{theme}.png", full_page=True)


MATH_QUESTION = "What does the compound interest formula say, and what does $1,000 become at 5% over 3 years?"
MATH_ANSWER = r"""With a yearly rate $r$ compounded $n$ times a year, a principal $P$ grows in $t$ years to

$$
A = P\left(1 + \frac{r}{n}\right)^{nt}
$$

Compounded once a year ($n = 1$), \(P = 1000\) at \(r = 0.05\) gives $A = 1000 \cdot 1.05^{3} \approx 1157.63$.

| Year | Interest | Balance |
|:-----|---------:|--------:|
| 1 | 50.00 | 1,050.00 |
| 2 | 52.50 | 1,102.50 |
| 3 | 55.13 | 1,157.63 |

The interest grows each year because it is paid on the interest already earned: $\Delta A_t = r\,A_{t-1}$."""


@pytest.mark.parametrize(("device", "viewport", "theme"), [("desktop", DESKTOP, "light"), ("phone", PHONE, "dark")])
def test_screenshots_math_and_table(open_chat, chat_user, screenshot_dir, device, viewport, theme):
    conversation = conversation_for(chat_user, title="Compound interest")
    exchange(conversation, MATH_QUESTION, MATH_ANSWER)
    chat = open_chat(f"/c/{conversation.pk}/", viewport=viewport, theme=theme)
    answer = chat.answers().first
    expect(answer.locator(".md .katex")).to_have_count(10, timeout=TIMEOUT)  # KaTeX loads on first math
    chat.page.wait_for_function("() => document.fonts.check('1em KaTeX_Main')")
    chat.page.evaluate("document.fonts.ready")
    chat.page.locator("#messages").evaluate("el => el.scrollTop = 0")
    chat.page.screenshot(path=screenshot_dir / f"answer-math-table-{device}-{theme}.png")
