"""Text the database cannot store: NUL and lone surrogates, refused at the door with a sentence.

PostgreSQL's text cannot hold NUL (U+0000), and a lone surrogate (U+D800 to U+DFFF, which JSON can
spell as "\\ud800") is not Unicode at all: it cannot be encoded as UTF-8. Either would fail deep in a
service as a 500, or cut a socket. Every transport asks here first, so the person is told which
field to fix (400) and nothing is stored half-way: the chat's JSON endpoints (`chat.http.json_body`),
the API (`api.views`), the WebSocket (`chat.consumers`), and query strings and forms
(`UnstorableTextMiddleware`). Everything else (right-to-left overrides, emoji, any script) is text
like any other and is kept exactly as sent.
"""

from __future__ import annotations

from collections.abc import Iterator

from config.refusals import BadInput


def _bad_character(text: str) -> str | None:
    if "\x00" in text:
        return "\x00"
    for character in text:
        if 0xD800 <= ord(character) <= 0xDFFF:
            return character
    return None


def _strings(value: object, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, path)
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def unstorable_text(value: object) -> BadInput | None:
    """The refusal for the first NUL or lone surrogate anywhere in `value` (strings, dicts, lists)."""
    for path, text in _strings(value, ""):
        bad = _bad_character(text)
        if bad is None:
            continue
        where = f"The field {path}" if path else "The request"
        if bad == "\x00":
            message = f"{where} contains a NUL character (U+0000), which cannot be stored. Remove it and try again."
        else:
            message = (
                f"{where} contains a lone surrogate (U+{ord(bad):04X}), which is not valid Unicode. "
                "Send whole characters (in JSON, a surrogate must come in a pair) and try again."
            )
        return BadInput(message, param=path or None)
    return None


class UnstorableTextMiddleware:
    """400 with a sentence for a query string or form that carries a NUL (a form cannot carry a lone
    surrogate: undecodable bytes arrive as U+FFFD). Checked after the CSRF check, before the view."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        from config.request_limits import refusal_response

        values = {key: request.GET.getlist(key) for key in request.GET}
        if request.method == "POST" and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            values.update({key: request.POST.getlist(key) for key in request.POST})
        refusal = unstorable_text(values)
        return refusal_response(request, refusal) if refusal is not None else None
