"""Request data the product cannot take, refused at the door with a sentence: NUL, lone surrogates, and
JSON nested deeper than anything the product sends or reads.

PostgreSQL's text cannot hold NUL (U+0000), and a lone surrogate (U+D800 to U+DFFF, which JSON can
spell as "\\ud800") is not Unicode at all: it cannot be encoded as UTF-8. Either would fail deep in a
service as a 500, or cut a socket. Every transport asks here first, so the person is told which
field to fix (400) and nothing is stored half-way: the chat's JSON endpoints (`chat.http.json_body`),
the API (`api.views`), the WebSocket (`chat.consumers`), the Stripe webhook, and query strings and
forms (`UnstorableTextMiddleware`). Everything else (right-to-left overrides, emoji, any script) is
text like any other and is kept exactly as sent.

Cost matters as much as the answer: this runs on the event loop, for bodies of up to
REQUEST_MAX_BYTES. So JSON deeper than MAX_DEPTH is refused before it is parsed (`_nests_too_deep`, a few
passes of C over the bytes; Python's parser would recurse into it, and fail at its recursion limit
as a 500), the walk over parsed data is iterative and builds no strings (the path of a field is
written out only for the one field that is refused), and parsed JSON is walked only when its bytes
hold an escape or an encoded surrogate that could have become NUL or a lone surrogate. What is
left is Python's own parser, in C, for callers who passed the cheaper checks first (a key, a
session).
"""

from __future__ import annotations

import gc
import json
import re
from contextlib import contextmanager
from itertools import accumulate

from django.utils.deprecation import MiddlewareMixin
from django.utils.formats import number_format

from config.on_the_loop import OnTheLoop, parses_a_multipart_body
from config.refusals import BadInput

#: How deep objects and lists may nest in a request (the product's own requests nest three or four deep).
MAX_DEPTH = 64
#: Longest key shown in a refusal's field path, and longest client value quoted in a message.
SHOWN_CHARS = 40

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: In UTF-8 JSON, the only ways to NUL or a lone surrogate: a \u escape of either, or a surrogate
#: encoded as UTF-8 bytes (which `json.loads` lets through, decoding with "surrogatepass").
_MAY_BE_UNSTORABLE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])|\xed[\xa0-\xbf]")
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
#: Brackets become +1 and -1 (as signed bytes); everything else goes.
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[{]}"))


def grouped(number: int) -> str:
    """A whole number with its thousands grouped as the active language writes them: 4,096 in English,
    4 096 in French, 4.096 in German. (The API activates no language: English.)"""
    return number_format(number, force_grouping=True)


def shortened(text: str) -> str:
    """A client's text (a key, a name) cut short for a message: a sentence, not an echo of the body."""
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def shown(value: object) -> str:
    """A client's value of any kind, quoted (`repr`) and cut short for a message."""
    return shortened(repr(value))


def nested_too_deep(what: str = "request") -> BadInput:
    return BadInput(
        f"The {what} nests objects and lists more than {MAX_DEPTH} deep, which nothing here needs. Send flatter data."
    )


def _nests_too_deep(data: bytes) -> bool:
    """Whether the brackets of JSON text nest deeper than MAX_DEPTH, strings aside, without parsing it:
    passes of C over the bytes (escapes out, then strings, then all but brackets), then the deepest
    point of a running sum of +1 and -1."""
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return False  # the common case costs two counts
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)  # now no quote is left inside a string
    structure = _STRING.sub(b"", data).translate(_BRACKETS, _NOT_BRACKETS)
    return max(accumulate(memoryview(structure).cast("b")), default=0) > MAX_DEPTH


def _utf8(raw: bytes | str) -> bytes:
    """JSON text as UTF-8 bytes (what every client sends; UTF-16 and UTF-32, which `json.loads` also
    reads, are converted), so the scans above see every bracket and escape."""
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogatepass")
    encoding = json.detect_encoding(raw)
    return raw if encoding == "utf-8" else raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")


@contextmanager
def _cycle_collector_paused():
    """JSON cannot make reference cycles, yet the cycle collector runs again and again while the parser
    makes containers: for 2.5 MB of small lists, in a process with Django loaded, over ten times the
    parse itself (1.2 s against 90 ms). The parser holds the GIL throughout, so no other thread's
    objects go uncollected meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_json(raw: bytes | str, what: str = "request body") -> object:
    """JSON a client sent: BadInput (400, a sentence) when it is not JSON, nests deeper than MAX_DEPTH,
    or holds NUL or a lone surrogate anywhere. The one way request JSON is read."""
    value = parse_json(raw, what)
    refusal = unstorable_json_text(raw, value)
    if refusal is not None:
        raise refusal
    return value


def parse_json(raw: bytes | str, what: str = "request body") -> object:
    """The first half of `read_json`, for a caller that needs the value to answer a refusal of its
    text (the WebSocket echoes the frame's `ref`): BadInput when it is not JSON or nests too deep.
    Then ask `unstorable_json_text`."""
    try:
        data = _utf8(raw)
    except UnicodeError as exc:
        raise BadInput(f"The {what} is not valid JSON: {exc}.") from exc
    if _nests_too_deep(data):
        raise nested_too_deep(what)
    try:
        with _cycle_collector_paused():
            return json.loads(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise BadInput(f"The {what} is not valid JSON: {exc}.") from exc


def unstorable_json_text(raw: bytes | str, value: object) -> BadInput | None:
    """The second half of `read_json`: the refusal for NUL or a lone surrogate in `value`, parsed from
    `raw`. The walk runs only when the bytes hold an escape or encoding that could have made one."""
    return request_data_refusal(value) if _MAY_BE_UNSTORABLE.search(_utf8(raw)) else None


def _path(where: tuple | None) -> str:
    """The field path (`messages[0].content`) from the chain of (parent, key) links the walk keeps."""
    keys = []
    while where is not None:
        where, key = where
        keys.append(key)
    path = ""
    for key in reversed(keys):
        if isinstance(key, int):
            path += f"[{key}]"
        else:
            path = f"{path}.{shortened(key)}" if path else shortened(key)
    return path


def _unstorable(character: str, where: tuple | None) -> BadInput:
    path = _path(where)
    field = f"The field {path}" if path else "The request"
    if character == "\x00":
        message = f"{field} contains a NUL character (U+0000), which cannot be stored. Remove it and try again."
    else:
        message = (
            f"{field} contains a lone surrogate (U+{ord(character):04X}), which is not valid Unicode. "
            "Send whole characters (in JSON, a surrogate must come in a pair) and try again."
        )
    return BadInput(message, param=path or None)


def request_data_refusal(value: object) -> BadInput | None:
    """The refusal for the first NUL or lone surrogate anywhere in `value` (strings, dict keys and
    values, lists), or for nesting deeper than MAX_DEPTH; None when there is nothing to refuse.

    Iterative, with one iterator per level of nesting, and no path written out until something is
    found, so its cost is one pass over the data and its memory is bounded by the depth."""
    if isinstance(value, str):
        found = _UNSTORABLE.search(value)
        return _unstorable(found.group(), None) if found else None
    if not isinstance(value, dict | list):
        return None
    # Each level: the items still to visit as (key, item) pairs, and where the container is.
    stack: list[tuple] = [(_items(value), None)]
    while stack:
        items, where = stack[-1]
        step = next(items, None)
        if step is None:
            stack.pop()
            continue
        key, item = step
        if isinstance(key, str):
            found = _UNSTORABLE.search(key)
            if found:
                return _unstorable(found.group(), where)
        if isinstance(item, str):
            found = _UNSTORABLE.search(item)
            if found:
                return _unstorable(found.group(), (where, key))
        elif isinstance(item, dict | list):
            if len(stack) >= MAX_DEPTH:
                return nested_too_deep()
            stack.append((_items(item), (where, key)))
    return None


def _items(container: dict | list):
    return iter(container.items()) if isinstance(container, dict) else enumerate(container)


def whole_number(value: str, most: int = 2**63 - 1) -> int | None:
    """`value` (from a query string or a form) as a whole number from 0 to `most`, or None. Only ASCII
    digits: `str.isdigit` also accepts "²", which `int` refuses, and "٣", which `int` reads as 3; and
    `int` refuses more than 4,300 digits."""
    if not value or len(value) > len(str(most)) or not (value.isascii() and value.isdigit()):
        return None
    number = int(value)
    return number if number <= most else None


class UnstorableTextMiddleware(OnTheLoop, MiddlewareMixin):
    """400 with a sentence for a query string or form that carries a NUL (a form cannot carry a lone
    surrogate: undecodable bytes arrive as U+FFFD). Checked after the CSRF check, before the view."""

    def on_the_loop_for(self, request) -> bool:
        return not parses_a_multipart_body(request)  # its form is parsed (to a file) on a thread

    def process_view(self, request, view_func, view_args, view_kwargs):
        from config.http import refusal_response

        values = {key: request.GET.getlist(key) for key in request.GET}
        if request.method == "POST" and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            values.update({key: request.POST.getlist(key) for key in request.POST})
        refusal = request_data_refusal(values)
        return refusal_response(request, refusal) if refusal is not None else None
