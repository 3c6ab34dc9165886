"""Text out of a person's file: paragraphs in reading order, each with its page and the headings above it.

Formats, chosen by the file's extension (`kind_of`): PDF, Word (.docx), HTML, Markdown, plain text and
source code. What each keeps:

- **PDF** with `pypdf`: pure Python (no system library, nothing to compile, so the embedded default and
  the wheel stay as they are), BSD-licensed, actively released, and it reads text per page, which is
  what citations need. PyMuPDF extracts layout better but is AGPL and a large binary; pdfminer.six is
  slower and its page API is lower level; pdfplumber sits on pdfminer. Pages are numbered from 1. A
  PDF carries no reliable headings, so none are guessed.
- **Word** with `python-docx` (MIT, the long-standing reader of the format, only lxml under it):
  paragraphs and tables in body order; "Heading N" and "Title" styles are headings. A .docx has no
  pages until a word processor lays it out, so page is None.
- **HTML** with the standard library's html.parser: h1-h6 are headings; script, style and similar
  elements are skipped; block elements end paragraphs.
- **Markdown**: ATX headings (`#` to `######`) outside fenced code; fenced code stays one paragraph.
- **Plain text and code**: paragraphs split at blank lines, no headings.

Every failure the owner can act on is an `ExtractionFailed` carrying a sentence for them (encrypted
PDF, a scanned PDF with no text layer, an unsupported type, a corrupt file). Extraction is pure: bytes
in, paragraphs out, no database.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import PurePath

from django.utils.translation import gettext, gettext_noop

#: Extensions read as plain text: prose and source code (what people attach to ask about).
TEXT_EXTENSIONS = {".txt", ".text", ".log", ".csv", ".tsv", ".rst", ".org"}
CODE_EXTENSIONS = {
    ".py", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".java", ".kt", ".scala", ".c", ".h", ".cc", ".cpp", ".hpp",
    ".cs", ".go", ".rs", ".rb", ".php", ".swift", ".m", ".sh", ".bash", ".zsh", ".ps1", ".sql", ".r", ".lua",
    ".pl", ".hs", ".ex", ".exs", ".erl", ".clj", ".dart", ".vue", ".svelte", ".css", ".scss", ".json",
    ".yaml", ".yml", ".toml", ".ini", ".cfg", ".xml", ".proto", ".graphql", ".tf", ".dockerfile",
}  # fmt: skip
KINDS = {".pdf": "pdf", ".docx": "docx", ".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown"}
KINDS |= dict.fromkeys(TEXT_EXTENSIONS, "text") | dict.fromkeys(CODE_EXTENSIONS, "code")
#: Files named without an extension that are still plain text.
TEXT_NAMES = {"dockerfile", "makefile", "readme", "license", "changelog"}

#: Said when a type is refused: the families, not all the extensions.
SUPPORTED_WORDS = "PDF, Word (.docx), HTML, Markdown, plain text and source code files"

#: Below this many characters of text per page on average, a PDF is taken to be scanned images.
MIN_CHARS_PER_PAGE = 20


class ExtractionFailed(Exception):
    """A file that cannot be read, with the sentence its owner sees. Files are read outside any request
    (documents.runner), and the sentence is saved with the file: it is kept in English, marked for the
    catalogue (gettext_noop), so the page can show it translated."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Block:
    """A paragraph (or a table, or a code fence) in reading order."""

    text: str
    #: The page it is on (PDF, from 1); None for formats without pages.
    page: int | None = None
    #: The headings it sits under, outermost first.
    headings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Extracted:
    blocks: list[Block]
    #: Pages in the file (PDF); None for formats without pages.
    pages: int | None = None

    @property
    def characters(self) -> int:
        return sum(len(block.text) for block in self.blocks)


def kind_of(name: str) -> str | None:
    """The format of a file called `name` ("pdf", "docx", "html", "markdown", "text", "code"), or None."""
    path = PurePath(name.lower())
    if path.suffix in KINDS:
        return KINDS[path.suffix]
    if not path.suffix and path.name in TEXT_NAMES:
        return "text"
    return None


def unsupported_sentence(name: str) -> str:
    """Two sentences, in the language active (the upload's refusal; English where files are read)."""
    suffix = PurePath(name).suffix
    if suffix:
        refused = gettext("%(suffix)s files cannot be read.") % {"suffix": suffix}
    else:
        refused = gettext("Files without an extension cannot be read.")
    # The same families as SUPPORTED_WORDS.
    supported = gettext("Supported are PDF, Word (.docx), HTML, Markdown, plain text and source code files.")
    return f"{refused} {supported}"


def extract(name: str, data: bytes) -> Extracted:
    """The paragraphs of the file `name` holding `data`. Raises ExtractionFailed with the owner's sentence."""
    kind = kind_of(name)
    if kind is None:
        raise ExtractionFailed(unsupported_sentence(name))
    if kind == "pdf":
        return _pdf(data)
    if kind == "docx":
        return _docx(data)
    text = decode_text(data)
    if kind == "html":
        return _checked(Extracted(_html(text)))
    if kind == "markdown":
        return _checked(Extracted(_markdown(text)))
    return _checked(Extracted([Block(p) for p in paragraphs(text)]))


def _checked(extracted: Extracted) -> Extracted:
    if not extracted.blocks:
        raise ExtractionFailed(gettext_noop("This file has no text in it."))
    return extracted


# --- text and paragraphs --------------------------------------------------------------------------------

_BLANK_LINES = re.compile(r"\n[ \t]*\n+")


def decode_text(data: bytes) -> str:
    """Text from bytes: UTF-8 (with or without BOM), UTF-16 with its BOM, else Windows-1252; a file with
    NUL bytes in it is binary, not text."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    if b"\x00" in data[:8192]:
        raise ExtractionFailed(
            gettext_noop("This file does not contain text: it looks like a binary file under a text name.")
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def paragraphs(text: str) -> list[str]:
    """Paragraphs of `text`: split at blank lines, trailing spaces trimmed, empty ones dropped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [p.strip("\n").rstrip() for p in _BLANK_LINES.split(text) if p.strip()]


# --- PDF ------------------------------------------------------------------------------------------------


def _pdf(data: bytes) -> Extracted:
    # pypdf and python-docx (with lxml) load only where files are read (workers), not in every web process.
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError, PyPdfError

    corrupt = ExtractionFailed(gettext_noop("This PDF cannot be read: the file is damaged or is not really a PDF."))
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # Many PDFs are encrypted with an empty password only to restrict printing or copying; those open.
            try:
                opened = reader.decrypt("")
            except (DependencyError, NotImplementedError, PyPdfError):
                opened = 0
            if not opened:
                raise ExtractionFailed(
                    gettext_noop(
                        "This PDF is protected by a password, so its text cannot be read. "
                        "Save a copy without the password and upload that."
                    )
                )
        blocks: list[Block] = []
        count = len(reader.pages)
        for number, page in enumerate(reader.pages, start=1):
            blocks += [Block(p, page=number) for p in paragraphs(page.extract_text() or "")]
    except ExtractionFailed:
        raise
    except FileNotDecryptedError as exc:
        raise ExtractionFailed(
            gettext_noop("This PDF is protected by a password, so its text cannot be read.")
        ) from exc
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise corrupt from exc
    if count == 0:
        raise corrupt
    characters = sum(len(b.text) for b in blocks)
    if characters < MIN_CHARS_PER_PAGE * count:
        if blocks:
            scanned = gettext_noop(
                "This PDF has no text layer to speak of: its pages look like scanned images. "
                "Run it through text recognition (OCR) and upload the result."
            )
        else:
            scanned = gettext_noop(
                "This PDF has no text layer: its pages look like scanned images. "
                "Run it through text recognition (OCR) and upload the result."
            )
        raise ExtractionFailed(scanned)
    return Extracted(blocks, pages=count)


# --- Word -----------------------------------------------------------------------------------------------

_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)


def _docx(data: bytes) -> Extracted:
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
        blocks: list[Block] = []
        path: list[tuple[int, str]] = []
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in item.rows]
                text = "\n".join(row for row in rows if row.strip(" |"))
                if text:
                    blocks.append(Block(text, headings=tuple(h for _, h in path)))
                continue
            text = item.text.strip()
            if not text:
                continue
            style = (item.style.name if item.style is not None else "") or ""
            level = 1 if style.lower() == "title" else None
            match = _HEADING_STYLE.match(style)
            if match:
                level = int(match.group(1))
            if level is not None:
                path = [(lvl, h) for lvl, h in path if lvl < level] + [(level, text)]
                continue
            blocks.append(Block(text, headings=tuple(h for _, h in path)))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ExtractionFailed(
            gettext_noop("This Word file cannot be read: it is damaged or is not a .docx file.")
        ) from exc
    return _checked(Extracted(blocks))


# --- HTML -----------------------------------------------------------------------------------------------

_SKIPPED = {"script", "style", "noscript", "template", "head", "svg", "canvas", "iframe", "object"}
_BLOCKS = {
    "p", "div", "li", "ul", "ol", "br", "tr", "table", "section", "article", "header", "footer", "nav", "aside",
    "main", "blockquote", "pre", "dl", "dt", "dd", "figure", "figcaption", "hr", "form", "fieldset", "address",
}  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


class _HtmlText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.path: list[tuple[int, str]] = []
        self.buffer: list[str] = []
        self.skipping = 0
        self.heading: int | None = None
        self.pre = 0

    def _flush(self) -> None:
        raw = "".join(self.buffer)
        self.buffer = []
        text = raw.strip("\n") if self.pre else re.sub(r"\s+", " ", raw).strip()
        if not text.strip():
            return
        if self.heading is not None:
            self.path = [(lvl, h) for lvl, h in self.path if lvl < self.heading] + [(self.heading, text)]
        else:
            self.blocks.append(Block(text, headings=tuple(h for _, h in self.path)))

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in _SKIPPED:
            self.skipping += 1
        elif tag in _HEADINGS:
            self._flush()
            self.heading = _HEADINGS[tag]
        elif tag in _BLOCKS:
            self._flush()
            if tag == "pre":
                self.pre += 1
        elif tag in ("td", "th") and self.buffer:
            self.buffer.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self.skipping = max(0, self.skipping - 1)
        elif tag in _HEADINGS:
            self._flush()
            self.heading = None
        elif tag in _BLOCKS:
            self._flush()
            if tag == "pre":
                self.pre = max(0, self.pre - 1)

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.buffer.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def _html(text: str) -> list[Block]:
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    return parser.blocks


# --- Markdown -------------------------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$|^ {0,3}(#{1,6})[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _markdown(text: str) -> list[Block]:
    blocks: list[Block] = []
    path: list[tuple[int, str]] = []
    lines: list[str] = []
    fence: str | None = None

    def flush() -> None:
        for paragraph in paragraphs("\n".join(lines)):
            blocks.append(Block(paragraph, headings=tuple(h for _, h in path)))
        lines.clear()

    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        opening = _FENCE.match(line)
        if fence is not None:
            lines.append(line)
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
                # A code fence is one paragraph, blank lines inside it included.
                blocks.append(Block("\n".join(lines), headings=tuple(h for _, h in path)))
                lines.clear()
            continue
        if opening:
            flush()
            fence = opening.group(1)
            lines.append(line)
            continue
        heading = _ATX.match(line)
        if heading:
            flush()
            level = len(heading.group(1) or heading.group(3))
            title = (heading.group(2) or "").strip()
            if title:
                path = [(lvl, h) for lvl, h in path if lvl < level] + [(level, title)]
            continue
        lines.append(line)
    if fence is not None:
        # An unclosed fence: keep its text, blank lines and all, as one paragraph.
        blocks.append(Block("\n".join(lines).strip("\n"), headings=tuple(h for _, h in path)))
    else:
        flush()
    return [b for b in blocks if b.text.strip()]
