"""Answers rendered as people expect: math typeset, tables aligned as written, right-to-left text
read right to left, on a desktop and on a phone.

The engine echoes the prompt, so each answer is the markdown the test sent. Every test here also fails
on a JavaScript error or a Content-Security-Policy violation (the fixtures), which is how KaTeX is shown
to work under the page's policy.
"""

import pytest
from playwright.sync_api import expect

from tests.e2e.chatpage import TIMEOUT
from tests.e2e.conftest import DESKTOP, PHONE

pytestmark = pytest.mark.e2e

SCREENS = [pytest.param(DESKTOP, id="desktop"), pytest.param(PHONE, id="phone")]

MATH = (
    "Einstein wrote $E = mc^2$, with a thin space in $a\\,b$ and \\(x_1 + x_2\\) in brackets.\n\n"
    "$$\n\\int_0^1 x^2\\,dx = \\frac{1}{3} + \\sum_{n=1}^{\\infty} \\frac{1}{n^2} - \\frac{\\pi^2}{6}"
    " + \\sqrt{a^2 + b^2 + c^2 + d^2 + e^2 + f^2 + g^2 + h^2}\n$$\n\n"
    "Also \\[ \\alpha + \\beta \\] on its own. Prices of $5 and $10 stay prices, as does `$x$` in code.\n\n"
)

# The TeX each formula was typeset from, as KaTeX keeps it in its MathML annotation.
TEX_OF_FORMULAS = """(answer) => [...answer.querySelectorAll('.md .katex annotation[encoding="application/x-tex"]')]
  .map((a) => a.textContent.trim())"""


@pytest.mark.parametrize("screen", SCREENS)
def test_math_is_typeset_and_prices_and_code_are_left_alone(open_chat, screen):
    chat = open_chat(viewport=screen)
    answer = chat.send(MATH)
    assert chat.wait_for_status(answer, "completed") == "completed"

    formulas = answer.locator(".md .katex")
    expect(formulas).to_have_count(5, timeout=TIMEOUT)
    tex = answer.evaluate(TEX_OF_FORMULAS)
    # "\," reaches TeX (markdown's escaping would have eaten the backslash).
    assert tex[:3] == ["E = mc^2", "a\\,b", "x_1 + x_2"]
    assert tex[3].startswith("\\int_0^1 x^2\\,dx")
    assert tex[4] == "\\alpha + \\beta"
    # The $$ block and \[ \] are display math; the others sit in the sentence.
    expect(answer.locator(".md .katex-display")).to_have_count(2)
    # Currency is text, and TeX inside code is code.
    expect(answer.locator(".md")).to_contain_text("Prices of $5 and $10 stay prices")
    expect(answer.locator(".md code")).to_have_text("$x$")
    # Typeset with KaTeX's own fonts, which the policy lets the page load.
    chat.page.wait_for_function("() => document.fonts.check('1em KaTeX_Main')", timeout=TIMEOUT)
    # A long display formula scrolls inside the answer; the page itself never gets wider than the screen.
    assert chat.page.evaluate("document.scrollingElement.scrollWidth") <= screen["width"]

    # History renders the same after a reload.
    chat.reload()
    expect(chat.answers().first.locator(".md .katex")).to_have_count(5, timeout=TIMEOUT)


def test_a_formula_is_typeset_once_while_the_answer_streams(open_chat):
    """Repainting a streaming answer keeps the formulas already typeset (no flicker, no rebuilding)."""
    chat = open_chat()
    answer = chat.send("$$\\frac{a}{b}$$\n\n" + "More words after the formula keep streaming in. " * 40)
    first = answer.locator(".md .katex").first
    expect(first).to_be_visible(timeout=TIMEOUT)
    assert answer.get_attribute("data-status") in ("pending", "streaming"), (
        "the answer ended before the test could watch it"
    )
    first.evaluate("(node) => { window.firstFormula = node; }")
    assert chat.wait_for_status(answer, "completed") == "completed"
    assert chat.page.evaluate("window.firstFormula.isConnected"), "the formula was rebuilt during the stream"


def test_table_columns_are_aligned_as_the_markdown_says(open_chat):
    chat = open_chat()
    answer = chat.send("| Item | Price | Note |\n|:-----|------:|:----:|\n| Tea | 3.50 | hot |\n| Cake | 12.00 | new |")
    assert chat.wait_for_status(answer, "completed") == "completed"
    cells = answer.locator(".md tbody tr").first.locator("td")
    aligns = [cells.nth(i).evaluate("(td) => getComputedStyle(td).textAlign") for i in range(3)]
    assert aligns == ["left", "right", "center"]


@pytest.mark.parametrize("screen", SCREENS)
def test_right_to_left_text_reads_right_to_left(open_chat, screen):
    chat = open_chat(viewport=screen)
    arabic = "مرحبا، كيف حالك اليوم؟"
    answer = chat.send(
        f"{arabic}\n\nThe second paragraph is English.\n\n1. البند الأول\n2. البند الثاني\n\n"
        "```python\nprint(1)\n```\n\n| الاسم | العدد |\n|---|---|\n| أ | 1 |"
    )
    assert chat.wait_for_status(answer, "completed") == "completed"

    def direction(locator) -> str:
        return locator.evaluate("(node) => getComputedStyle(node).direction")

    # The question as typed, and each paragraph of the answer by its own first letter.
    assert direction(chat.questions().first.locator(".bubble")) == "rtl"
    paragraphs = answer.locator(".md > p")
    assert direction(paragraphs.nth(0)) == "rtl"
    assert direction(paragraphs.nth(1)) == "ltr"
    # A list and a table in Arabic read right to left as wholes: numbers on the right, the first column
    # on the right, nothing beyond the answer's edge.
    assert direction(answer.locator(".md > ol")) == "rtl"
    assert direction(answer.locator(".md > table")) == "rtl"
    first, second = (answer.locator(".md th").nth(i).bounding_box() for i in range(2))
    assert first["x"] > second["x"]
    md = answer.locator(".md").bounding_box()
    ol = answer.locator(".md > ol").bounding_box()
    assert ol["x"] + ol["width"] <= md["x"] + md["width"] + 1
    # The composer follows what is typed into it.
    chat.prompt.fill(arabic)
    assert direction(chat.prompt) == "rtl"
    chat.prompt.fill("")
    # A chat titled in Arabic (its title is the question's first words at first) reads right to left.
    title = chat.page.locator(".conv-title", has_text="مرحبا")  # in the drawer, closed on a phone
    expect(title).to_have_count(1, timeout=TIMEOUT)
    assert direction(title) == "rtl"
