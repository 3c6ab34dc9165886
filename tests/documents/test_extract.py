"""Text out of each format, with pages and headings, and a sentence for each file that cannot be read.
Every file is a real one, made here (tests/support/documents.py)."""

import pytest

from documents.extract import ExtractionFailed, extract, kind_of
from tests.support.documents import PAGE_FACTS, docx_bytes, encrypted_pdf, fact_pdf, pdf_bytes, scanned_pdf


def test_a_pdf_keeps_each_page_number_with_its_text():
    extracted = extract("notes.pdf", fact_pdf())
    assert extracted.pages == 3
    by_page = {block.page: block.text for block in extracted.blocks}
    assert set(by_page) == {1, 2, 3}
    assert PAGE_FACTS[2] in by_page[3] and PAGE_FACTS[2] not in by_page[2]


def test_a_pdf_locked_by_a_password_says_so():
    with pytest.raises(ExtractionFailed, match="protected by a password"):
        extract("locked.pdf", encrypted_pdf())


def test_a_pdf_encrypted_without_a_user_password_is_read():
    """Encrypted only to restrict printing or copying: it opens with the empty password."""
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(fact_pdf())))
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    assert PAGE_FACTS[0] in extract("restricted.pdf", out.getvalue()).blocks[0].text


def test_a_scanned_pdf_has_no_text_layer():
    with pytest.raises(ExtractionFailed, match=r"no text layer.*OCR"):
        extract("scan.pdf", scanned_pdf())


def test_a_damaged_pdf_is_called_damaged():
    with pytest.raises(ExtractionFailed, match="damaged"):
        extract("broken.pdf", fact_pdf()[:200])
    with pytest.raises(ExtractionFailed, match="damaged"):
        extract("fake.pdf", b"just some text")


def test_a_word_file_keeps_heading_paths_and_tables_and_has_no_pages():
    data = docx_bytes(
        [
            ("h1", "Harbour"),
            ("p", "Boats come in at dawn."),
            ("h2", "Fees"),
            ("table", "Boat | Fee\nSmall | 5\nLarge | 20"),
            ("h1", "Town"),
            ("p", "The market opens at nine."),
        ]
    )
    blocks = extract("guide.docx", data).blocks
    assert [(b.headings, b.page) for b in blocks] == [
        (("Harbour",), None),
        (("Harbour", "Fees"), None),
        (("Town",), None),
    ]
    assert "Large | 20" in blocks[1].text


def test_a_damaged_word_file_says_so():
    with pytest.raises(ExtractionFailed, match="Word file cannot be read"):
        extract("broken.docx", b"PK\x03\x04 not really a zip")


def test_html_headings_nest_and_scripts_are_skipped():
    html = (
        "<html><head><title>t</title><style>p{}</style></head><body><h1>Guide</h1><p>Intro &amp; more</p>"
        "<script>alert(1)</script><h2>Rules</h2><ul><li>One</li><li>Two</li></ul><h2>Map</h2><p>North</p>"
        "</body></html>"
    )
    blocks = extract("page.html", html.encode()).blocks
    assert [(b.text, b.headings) for b in blocks] == [
        ("Intro & more", ("Guide",)),
        ("One", ("Guide", "Rules")),
        ("Two", ("Guide", "Rules")),
        ("North", ("Guide", "Map")),
    ]


def test_markdown_headings_but_not_hashes_inside_code():
    text = "# Top\n\nFirst para\nstill first.\n\n## Code\n\n```python\n# a comment\n\nx = 1\n```\n\n# Next #\nLast."
    blocks = extract("readme.md", text.encode()).blocks
    assert [(b.text, b.headings) for b in blocks] == [
        ("First para\nstill first.", ("Top",)),
        ("```python\n# a comment\n\nx = 1\n```", ("Top", "Code")),
        ("Last.", ("Next",)),
    ]


def test_text_and_code_split_at_blank_lines_in_any_common_encoding():
    assert [b.text for b in extract("a.txt", "café\r\n\r\nnext".encode("utf-16")).blocks] == ["café", "next"]
    assert [b.text for b in extract("a.py", b"def f():\n    pass\n\n\nx = 2\n").blocks] == [
        "def f():\n    pass",
        "x = 2",
    ]
    assert extract("old.txt", "naïve".encode("cp1252")).blocks[0].text == "naïve"


@pytest.mark.parametrize(
    ("name", "data", "sentence"),
    [
        ("photo.png", b"\x89PNG", r"\.png files cannot be read\. Supported are PDF, Word \(\.docx\), HTML"),
        ("data.txt", b"\x00\x01\x02binary", "looks like a binary file"),
        ("empty.md", b"\n \n", "has no text in it"),
        ("blank.pdf", pdf_bytes([[" "]]), "no text layer"),
    ],
)
def test_files_that_cannot_be_read_say_why(name, data, sentence):
    with pytest.raises(ExtractionFailed, match=sentence):
        extract(name, data)


def test_kinds_by_extension():
    assert [kind_of(n) for n in ["A.PDF", "b.docx", "c.htm", "d.markdown", "e.rs", "Makefile", "f.doc", "g"]] == [
        "pdf",
        "docx",
        "html",
        "markdown",
        "code",
        "text",
        None,
        None,
    ]
