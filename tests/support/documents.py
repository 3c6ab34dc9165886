"""Small real files for the documents tests and the browser tests: PDFs written by hand (pypdf reads but
cannot lay out text, and reportlab is a heavy dependency for a few lines), Word files made with
python-docx, and the facts they hold, so a test can ask about page 3 and know the answer."""

from __future__ import annotations

import io

#: One fact per page of `fact_pdf`; the third is the one the browser test asks about.
PAGE_FACTS = [
    "The lighthouse keeper on Varnholm Island keeps eleven brass lanterns polished every morning.",
    "The ferry to Varnholm leaves the harbour at seven and returns before the evening tide.",
    "The secret ingredient of the Varnholm fish soup is smoked juniper, added at the very end.",
]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf_bytes(pages: list[list[str]] | list[str | None]) -> bytes:
    """A valid PDF whose pages hold these lines of text (Helvetica, one line each). A page given as None
    is drawn with a filled rectangle and no text at all: what a scanned page looks like to a reader."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in once the page tree's number is known
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for page in pages:
        lines = [page] if isinstance(page, str) else page
        if lines is None:
            content = b"0.5 g 72 72 468 648 re f"
        else:
            ops = ["BT", "/F1 12 Tf", "16 TL", "72 720 Td"]
            for line in lines:
                ops += [f"({_escape(line)}) Tj", "T*"]
            ops.append("ET")
            content = "\n".join(ops).encode("cp1252")
        stream = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> "
                b"/Contents %d 0 R >>" % (tree, font, stream)
            )
        )
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, catalog, xref))
    return out.getvalue()


def fact_pdf() -> bytes:
    """Three pages, each with a heading-like first line and one fact of PAGE_FACTS."""
    return pdf_bytes([[f"Chapter {n}", "", fact] for n, fact in enumerate(PAGE_FACTS, start=1)])


def scanned_pdf(pages: int = 2) -> bytes:
    return pdf_bytes([None] * pages)


def encrypted_pdf(password: str = "s3cret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(fact_pdf())))
    writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(items: list[tuple[str, str]]) -> bytes:
    """A Word file of (style, text) items: style "h1".."h3" for headings, "p" for a paragraph, "table"
    for a table whose text is rows separated by newlines and cells by "|"."""
    import docx

    document = docx.Document()
    for style, text in items:
        if style.startswith("h"):
            document.add_heading(text, level=int(style[1:]))
        elif style == "table":
            rows = [row.split("|") for row in text.split("\n")]
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell.strip()
        else:
            document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
