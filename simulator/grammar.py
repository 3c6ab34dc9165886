"""Constrained output for the simulated model: JSON Schema, regular expressions and EBNF (GBNF).

SGLang compiles a request's grammar (xgrammar by default) and masks the logits so that only tokens
the grammar allows can be sampled. The simulated model has no logits over a real vocabulary, so it
does the equivalent in one go: it compiles the grammar, refusing what xgrammar refuses with
SGLang's ``Failed to compile <kind> grammar: <reason>`` (the reason text is the simulator's own),
then writes one string of the grammar's language, choosing at each branch with a seeded random
generator. The string is what the model then emits token by token, so a ``length`` stop still cuts
it short as it would on a real engine.

Supported (and documented in docs/inference.md):

- JSON Schema: ``type`` (also a list), ``properties``, ``required``, ``additionalProperties`` (no extra
  keys are ever written), ``items``, ``prefixItems``, ``minItems``/``maxItems``, ``enum``, ``const``,
  ``minLength``/``maxLength``, ``pattern`` (through the regex subset below), ``format`` (date,
  time, date-time, email, uuid, uri, ipv4, ipv6, hostname, duration), ``minimum``/``maximum`` and
  their exclusive forms, ``anyOf``/``oneOf``, ``allOf`` of objects, ``$ref`` into ``$defs`` or
  ``definitions`` (as Pydantic emits them). Refused as xgrammar refuses them: ``if``/``then``/``else``,
  ``not``, ``contains``, ``multipleOf``, ``uniqueItems``, ``dependentRequired``, unknown ``format``.
- Regex: literals, ``.``, classes ``[a-z_]`` and ``[^...]``, escapes ``\\d \\w \\s \\D \\W \\S`` and
  escaped punctuation, groups ``( )``, ``(?: )``, ``(?P<name> )``, alternation, ``? * +``,
  ``{m}``, ``{m,}``, ``{m,n}`` (lazy forms too), anchors ``^ $``. Lookaround and backreferences are refused.
- EBNF as xgrammar reads GBNF: ``name ::= ...`` rules (``root`` required), quoted literals with
  escapes, character classes, rule references, grouping, ``|``, ``? * +`` and ``{m,n}``, ``#``
  comments. Recursion is bounded: past a depth the cheapest alternative is taken.
"""

from __future__ import annotations

import json
import math
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class GrammarError(ValueError):
    """The grammar does not compile; ``str()`` is SGLang's whole message."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"Failed to compile {kind} grammar: {reason}")


# -- words the model writes into free-form strings ------------------------------------------------------

_FILLER = [
    "river",
    "stone",
    "lantern",
    "meadow",
    "copper",
    "harbor",
    "window",
    "garden",
    "signal",
    "orchard",
    "valley",
    "thread",
    "marble",
    "compass",
    "beacon",
    "willow",
    "granite",
    "ember",
    "canvas",
]


def pick_words(rng: random.Random, words: list[str], n: int) -> str:
    source = words or _FILLER
    return " ".join(rng.choice(source) for _ in range(max(1, n)))


# == JSON Schema ===========================================================================================

_REFUSED_KEYWORDS = ("if", "then", "else", "not", "contains", "multipleOf", "uniqueItems", "dependentRequired")
_FORMATS = ("date", "time", "date-time", "email", "uuid", "uri", "ipv4", "ipv6", "hostname", "duration")
_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


def check_json_schema(schema: Any) -> None:
    """Refuse what xgrammar refuses (raises GrammarError)."""
    _check(schema, schema, "#", set())


def _check(node: Any, root: Any, where: str, seen_refs: set[str]) -> None:
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise GrammarError("json", f"schema at {where} must be an object or a boolean, got {json.dumps(node)}")
    for key in _REFUSED_KEYWORDS:
        if key in node:
            raise GrammarError("json", f"keyword '{key}' at {where} is not supported")
    fmt = node.get("format")
    if fmt is not None and fmt not in _FORMATS:
        raise GrammarError("json", f"string format '{fmt}' at {where} is not supported")
    types = node.get("type")
    for t in types if isinstance(types, list) else [types] if types is not None else []:
        if t not in _TYPES:
            raise GrammarError("json", f"unknown type {json.dumps(t)} at {where}")
    if "$ref" in node:
        ref = node["$ref"]
        if ref not in seen_refs:
            _check(_resolve(ref, root), root, ref, seen_refs | {ref})
    if "pattern" in node:
        try:
            compile_regex(node["pattern"])
        except GrammarError as exc:
            raise GrammarError("json", f"pattern at {where}: {str(exc).split(': ', 1)[1]}") from None
    for key in ("properties", "$defs", "definitions"):
        for name, sub in (node.get(key) or {}).items():
            _check(sub, root, f"{where}/{key}/{name}", seen_refs)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(node.get(key) or []):
            _check(sub, root, f"{where}/{key}/{i}", seen_refs)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _check(node[key], root, f"{where}/{key}", seen_refs)
    lo, hi = node.get("minItems", 0), node.get("maxItems")
    if hi is not None and hi < lo:
        raise GrammarError("json", f"minItems {lo} is greater than maxItems {hi} at {where}")
    lo, hi = node.get("minLength", 0), node.get("maxLength")
    if hi is not None and hi < lo:
        raise GrammarError("json", f"minLength {lo} is greater than maxLength {hi} at {where}")


def _resolve(ref: Any, root: Any) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise GrammarError("json", f"only local references are supported, got {json.dumps(ref)}")
    node = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise GrammarError("json", f"reference {ref} cannot be resolved")
        node = node[part]
    return node


#: Property names whose value is best taken from the user's own words.
_TEXTUAL = ("city", "location", "place", "query", "q", "search", "topic", "name", "title", "subject", "keyword", "text")


@dataclass
class JsonWriter:
    """Writes one value valid for a schema; ``words`` are the user's words, for plausible strings."""

    root: Any
    rng: random.Random
    words: list[str] = field(default_factory=list)
    max_depth: int = 6

    def value(self, node: Any, depth: int = 0, key: str | None = None) -> Any:
        rng = self.rng
        if node is True or node == {}:
            return self._any(depth, key)
        if node is False:
            return None  # no value is valid; nothing better to write
        if "$ref" in node:
            extra = {k: v for k, v in node.items() if k != "$ref"}
            return self.value({**_resolve(node["$ref"], self.root), **extra}, depth, key)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return rng.choice(node["enum"])
        for key_name in ("anyOf", "oneOf"):
            if node.get(key_name):
                options = node[key_name]
                if depth >= self.max_depth:  # prefer a branch that ends: not an object or array
                    flat = [o for o in options if isinstance(o, dict) and o.get("type") not in ("object", "array")]
                    options = flat or options
                return self.value(rng.choice(options), depth, key)
        if node.get("allOf"):
            merged: dict[str, Any] = {}
            for part in node["allOf"]:
                part = _resolve(part["$ref"], self.root) if isinstance(part, dict) and "$ref" in part else part
                for k, v in (part or {}).items():
                    if k == "properties":
                        merged.setdefault("properties", {}).update(v)
                    elif k == "required":
                        merged["required"] = [*merged.get("required", []), *v]
                    else:
                        merged[k] = v
            return self.value(merged, depth, key)
        kind = node.get("type")
        if isinstance(kind, list):
            if depth >= self.max_depth and any(t not in ("object", "array") for t in kind):
                kind = [t for t in kind if t not in ("object", "array")]
            kind = rng.choice(kind)
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else None
            if kind is None:
                return self._any(depth, key)
        return getattr(self, "_" + kind)(node, depth, key)

    def _any(self, depth: int, key: str | None) -> Any:
        return self._string({}, depth, key) if depth else self._object({"type": "object"}, depth, key)

    def _object(self, node: dict, depth: int, key: str | None) -> dict:
        props: dict[str, Any] = node.get("properties") or {}
        required = [k for k in node.get("required") or [] if isinstance(k, str)]
        out: dict[str, Any] = {}
        if not props and not required:
            if depth >= self.max_depth or node.get("additionalProperties") is False:
                return {}
            # A free object (`json_object`): a few plausible keys.
            extra = node.get("additionalProperties")
            sub = extra if isinstance(extra, dict) else None
            out["answer"] = self.value(sub, depth + 1, "answer") if sub else pick_words(self.rng, self.words, 4)
            if sub is None:
                out["confidence"] = round(self.rng.uniform(0.5, 1.0), 2)
            return out
        for name, sub in props.items():
            if name in required or self.rng.random() < 0.6:
                out[name] = self.value(sub, depth + 1, name)
        for name in required:
            if name not in out:
                out[name] = self._any(depth + 1, name)
        return out

    def _array(self, node: dict, depth: int, key: str | None) -> list:
        prefix = node.get("prefixItems") or []
        lo = max(int(node.get("minItems", 0)), len(prefix) if node.get("items") is False else 0)
        hi = node.get("maxItems")
        default_hi = lo if depth >= self.max_depth else lo + 3
        hi = default_hi if hi is None else min(int(hi), max(lo, default_hi))
        count = self.rng.randint(lo, max(lo, hi))
        if depth < self.max_depth and count == 0 and lo == 0 and (hi or 0) > 0:
            count = 1
        items = node.get("items")
        out = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items if isinstance(items, dict) else {}
            out.append(self.value(sub, depth + 1, key))
        return out

    def _string(self, node: dict, depth: int, key: str | None) -> str:
        rng = self.rng
        fmt = node.get("format")
        if fmt:
            return _format_value(fmt, rng)
        if "pattern" in node:
            return generate_regex(compile_regex(node["pattern"]), rng)
        lo, hi = int(node.get("minLength", 0)), node.get("maxLength")
        lowered = (key or "").lower()
        if self.words and any(hint == lowered or lowered.endswith("_" + hint) for hint in _TEXTUAL):
            text = _phrase_for(lowered, self.words, rng)
        else:
            text = pick_words(rng, self.words, rng.randint(1, 4))
        while len(text) < lo:
            text += " " + pick_words(rng, [], 1)
        if hi is not None:
            text = text[: int(hi)].rstrip() if len(text[: int(hi)].rstrip()) >= lo else text[: int(hi)]
        return text

    def _integer(self, node: dict, depth: int, key: str | None) -> int:
        lo, hi = _bounds(node, integer=True)
        return self.rng.randint(lo, hi)

    def _number(self, node: dict, depth: int, key: str | None) -> float | int:
        lo, hi = _bounds(node, integer=False)
        value = round(self.rng.uniform(lo, hi), 2)
        ex_lo, ex_hi = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
        if not lo <= value <= hi or (ex_lo is not None and value <= ex_lo) or (ex_hi is not None and value >= ex_hi):
            value = (lo + hi) / 2
        return value

    def _boolean(self, node: dict, depth: int, key: str | None) -> bool:
        return self.rng.random() < 0.5

    def _null(self, node: dict, depth: int, key: str | None) -> None:
        return None


def _bounds(node: dict, *, integer: bool) -> tuple[Any, Any]:
    lo, hi = node.get("minimum"), node.get("maximum")
    ex_lo, ex_hi = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
    step = 1 if integer else 0.01
    if isinstance(ex_lo, int | float) and not isinstance(ex_lo, bool):
        lo = ex_lo + step if lo is None else max(lo, ex_lo + step)
    if isinstance(ex_hi, int | float) and not isinstance(ex_hi, bool):
        hi = ex_hi - step if hi is None else min(hi, ex_hi - step)
    if lo is None and hi is None:
        lo, hi = 0, 100
    elif lo is None:
        lo = hi - 100
    elif hi is None:
        hi = lo + 100
    if integer:
        lo, hi = math.ceil(lo), math.floor(hi)
    return lo, max(lo, hi)


def _phrase_for(key: str, words: list[str], rng: random.Random) -> str:
    """A value for a `city`/`query`-like property: capitalised words of the user's text for places and
    names, the user's content words for queries."""
    content = [w for w in words if len(w) > 3 and w.lower() not in _STOPWORDS] or words
    if key in ("city", "location", "place") or key.endswith(("_city", "_location")):
        capitals = [w for w in words if w[:1].isupper() and w.lower() not in _STOPWORDS]
        return rng.choice(capitals) if capitals else content[-1].capitalize()
    start = rng.randrange(max(1, len(content) - 2))
    return " ".join(content[start : start + 3])


_STOPWORDS = set(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "and",
        "or",
        "but",
        "what",
        "whats",
        "which",
        "who",
        "how",
        "when",
        "where",
        "why",
        "please",
        "can",
        "could",
        "would",
        "should",
        "will",
        "do",
        "does",
        "did",
        "me",
        "my",
        "you",
        "your",
        "i",
        "it",
        "its",
        "this",
        "that",
        "with",
        "about",
        "from",
        "tell",
        "show",
        "give",
        "get",
        "find",
        "like",
        "today",
        "now",
        "there",
    ]
)


def _format_value(fmt: str, rng: random.Random) -> str:
    y, mo, d = rng.randint(2000, 2030), rng.randint(1, 12), rng.randint(1, 28)
    h, mi, s = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
    word = rng.choice(_FILLER)
    return {
        "date": f"{y:04d}-{mo:02d}-{d:02d}",
        "time": f"{h:02d}:{mi:02d}:{s:02d}Z",
        "date-time": f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z",
        "email": f"{word}@example.com",
        "uuid": "-".join(f"{rng.getrandbits(b * 4):0{b}x}" for b in (8, 4, 4, 4, 12)),
        "uri": f"https://example.com/{word}",
        "ipv4": ".".join(str(rng.randint(1, 254)) for _ in range(4)),
        "ipv6": ":".join(f"{rng.getrandbits(16):x}" for _ in range(8)),
        "hostname": f"{word}.example.com",
        "duration": f"P{rng.randint(1, 9)}D",
    }[fmt]


def json_from_schema(schema: Any, rng: random.Random, words: list[str] | None = None) -> str:
    check_json_schema(schema)
    return json.dumps(JsonWriter(schema, rng, words or []).value(schema), ensure_ascii=False)


# == Regular expressions ===================================================================================

_PRINTABLE = [c for c in string.printable if c not in "\t\n\r\x0b\x0c"]
_CLASS_ESCAPES = {
    "d": set(string.digits),
    "w": set(string.ascii_letters + string.digits + "_"),
    "s": {" ", "\t", "\n"},
}


@dataclass
class _Node:
    kind: str  # "lit" | "set" | "alt" | "seq" | "rep"
    chars: frozenset[str] = frozenset()
    parts: list[_Node] = field(default_factory=list)
    lo: int = 0
    hi: int | None = None


class _RegexParser:
    def __init__(self, pattern: str) -> None:
        self.p, self.i = pattern, 0

    def fail(self, reason: str) -> GrammarError:
        return GrammarError("regex", f"{reason} at position {self.i} of {json.dumps(self.p)}")

    def peek(self) -> str | None:
        return self.p[self.i] if self.i < len(self.p) else None

    def parse(self) -> _Node:
        node = self.alt()
        if self.i != len(self.p):
            raise self.fail("unbalanced ')'")
        return node

    def alt(self) -> _Node:
        options = [self.seq()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.seq())
        return options[0] if len(options) == 1 else _Node("alt", parts=options)

    def seq(self) -> _Node:
        items: list[_Node] = []
        while self.peek() not in (None, "|", ")"):
            atom = self.atom()
            if atom is None:
                continue
            items.append(self.quantified(atom))
        return _Node("seq", parts=items)

    def quantified(self, atom: _Node) -> _Node:
        c = self.peek()
        if c in ("?", "*", "+"):
            self.i += 1
            lo, hi = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c]
        elif c == "{" and self._brace_ahead():
            end = self.p.index("}", self.i)
            body = self.p[self.i + 1 : end]
            self.i = end + 1
            lo_s, _, hi_s = body.partition(",")
            lo = int(lo_s or 0)
            hi = lo if "," not in body else (int(hi_s) if hi_s else None)
            if hi is not None and hi < lo:
                raise self.fail("numbers out of order in {} quantifier")
        else:
            return atom
        if self.peek() == "?":  # lazy: same language
            self.i += 1
        elif self.peek() == "+":
            raise self.fail("possessive quantifiers are not supported")
        if self.peek() in ("?", "*", "+"):
            raise self.fail("multiple repeat")
        return _Node("rep", parts=[atom], lo=lo, hi=hi)

    def _brace_ahead(self) -> bool:
        end = self.p.find("}", self.i)
        body = self.p[self.i + 1 : end] if end > 0 else ""
        return bool(body) and all(ch.isdigit() or ch == "," for ch in body) and body.count(",") <= 1 and body[0] != ","

    def atom(self) -> _Node | None:
        c = self.p[self.i]
        self.i += 1
        if c in "^$":
            return None  # anchors: the whole output is matched anyway
        if c == ".":
            return _Node("set", chars=frozenset(_PRINTABLE))
        if c in "*+?":
            raise self.fail("nothing to repeat")
        if c == "(":
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.p.startswith("?P<", self.i):
                end = self.p.find(">", self.i)
                if end < 0:
                    raise self.fail("unterminated group name")
                self.i = end + 1
            elif self.peek() == "?":
                raise self.fail("lookaround and inline flags are not supported")
            inner = self.alt()
            if self.peek() != ")":
                raise self.fail("missing ')'")
            self.i += 1
            return inner
        if c == "[":
            return self.char_class()
        if c == "\\":
            return _Node("set", chars=frozenset(self.escape(in_class=False)))
        return _Node("lit", chars=frozenset(c))

    def escape(self, *, in_class: bool) -> set[str]:
        if self.i >= len(self.p):
            raise self.fail("bad escape (end of pattern)")
        c = self.p[self.i]
        self.i += 1
        if c.lower() in _CLASS_ESCAPES:
            chars = _CLASS_ESCAPES[c.lower()]
            return chars if c.islower() else set(_PRINTABLE) - chars
        simple = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
        if c in simple:
            return {simple[c]}
        if c.isdigit() or c in "bBAZzkpP":
            raise self.fail(f"escape \\{c} is not supported")
        if c == "u":
            code = self.p[self.i : self.i + 4]
            if len(code) != 4 or not all(h in string.hexdigits for h in code):
                raise self.fail("bad \\u escape")
            self.i += 4
            return {chr(int(code, 16))}
        if c.isalnum():
            raise self.fail(f"bad escape \\{c}")
        return {c}

    def char_class(self) -> _Node:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        chars: set[str] = set()
        first = True
        while True:
            c = self.peek()
            if c is None:
                raise self.fail("unterminated character set")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            self.i += 1
            if c == "\\":
                got = self.escape(in_class=True)
                if len(got) > 1:
                    chars |= got
                    continue
                c = next(iter(got))
            if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                self.i += 1
                end = self.p[self.i]
                self.i += 1
                if end == "\\":
                    end = next(iter(self.escape(in_class=True)))
                if ord(end) < ord(c):
                    raise self.fail("bad character range")
                chars |= {chr(o) for o in range(ord(c), ord(end) + 1)}
            else:
                chars.add(c)
        if negate:
            chars = set(_PRINTABLE) - chars
        if not chars:
            raise self.fail("empty character set")
        return _Node("set", chars=frozenset(chars))


def compile_regex(pattern: Any) -> _Node:
    if not isinstance(pattern, str):
        raise GrammarError("regex", f"the pattern must be a string, got {json.dumps(pattern)}")
    return _RegexParser(pattern).parse()


def _pick_char(chars: frozenset[str], rng: random.Random) -> str:
    preferred = sorted(c for c in chars if c.isalnum()) or sorted(c for c in chars if c == " ") or sorted(chars)
    return rng.choice(preferred)


def generate_regex(node: _Node, rng: random.Random, depth: int = 0) -> str:
    if node.kind == "lit":
        return next(iter(node.chars))
    if node.kind == "set":
        return _pick_char(node.chars, rng)
    if node.kind == "seq":
        return "".join(generate_regex(p, rng, depth) for p in node.parts)
    if node.kind == "alt":
        return generate_regex(rng.choice(node.parts), rng, depth)
    hi = node.hi if node.hi is not None else node.lo + (3 if depth < 4 else 0)
    count = rng.randint(node.lo, max(node.lo, min(hi, node.lo + 6)))
    return "".join(generate_regex(node.parts[0], rng, depth + 1) for _ in range(count))


def text_from_regex(pattern: Any, rng: random.Random) -> str:
    return generate_regex(compile_regex(pattern), rng)


# == EBNF (GBNF, as xgrammar reads it) =====================================================================


@dataclass
class _Grammar:
    rules: dict[str, _Node]
    cost: dict[str, int]


class _EbnfParser:
    def __init__(self, text: str) -> None:
        self.t, self.i = text, 0

    def fail(self, reason: str) -> GrammarError:
        line = self.t.count("\n", 0, self.i) + 1
        return GrammarError("ebnf", f"{reason} at line {line}")

    def skip(self, newlines: bool = True) -> None:
        while self.i < len(self.t):
            c = self.t[self.i]
            if c == "#":
                while self.i < len(self.t) and self.t[self.i] != "\n":
                    self.i += 1
            elif c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            else:
                break

    def name(self) -> str:
        start = self.i
        while self.i < len(self.t) and (self.t[self.i].isalnum() or self.t[self.i] in "-_."):
            self.i += 1
        if start == self.i:
            raise self.fail("expected a rule name")
        return self.t[start : self.i]

    def grammar(self) -> dict[str, _Node]:
        rules: dict[str, _Node] = {}
        self.skip()
        while self.i < len(self.t):
            name = self.name()
            self.skip()
            if not self.t.startswith("::=", self.i):
                raise self.fail(f"expected '::=' after rule name '{name}'")
            self.i += 3
            if name in rules:
                raise self.fail(f"rule '{name}' is defined more than once")
            rules[name] = self.alt()
            self.skip()
        return rules

    def alt(self) -> _Node:
        options = [self.seq()]
        while True:
            self.skip()
            if self.t.startswith("|", self.i):
                self.i += 1
                options.append(self.seq())
            else:
                break
        return options[0] if len(options) == 1 else _Node("alt", parts=options)

    def _rule_starts_here(self) -> bool:
        j = self.i
        while j < len(self.t) and (self.t[j].isalnum() or self.t[j] in "-_."):
            j += 1
        k = j
        while k < len(self.t) and self.t[k] in " \t":
            k += 1
        return j > self.i and self.t.startswith("::=", k)

    def seq(self) -> _Node:
        items: list[_Node] = []
        while True:
            self.skip(newlines=False)
            if self.i < len(self.t) and self.t[self.i] == "\n":
                # A rule may go on over lines; a new `name ::=` ends it.
                save = self.i
                self.skip()
                if self.i >= len(self.t) or self._rule_starts_here() or self.t[self.i] in "|)":
                    if self.i < len(self.t) and self.t[self.i] in "|)":
                        continue
                    self.i = save
                    break
            c = self.t[self.i] if self.i < len(self.t) else None
            if c is None or c in "|)":
                break
            items.append(self.quantified(self.term()))
        return _Node("seq", parts=items)

    def term(self) -> _Node:
        c = self.t[self.i]
        if c in "\"'":
            return self.literal(c)
        if c == "[":
            end = self._class_end()
            try:
                node = compile_regex(self.t[self.i : end + 1])
            except GrammarError as exc:
                raise self.fail(str(exc).split(": ", 1)[1]) from None
            self.i = end + 1
            return node
        if c == "(":
            self.i += 1
            inner = self.alt()
            self.skip()
            if not self.t.startswith(")", self.i):
                raise self.fail("expected ')'")
            self.i += 1
            return inner
        if c.isalnum() or c in "-_":
            return _Node("ref", parts=[], chars=frozenset([self.name()]))
        raise self.fail(f"unexpected character {json.dumps(c)}")

    def _class_end(self) -> int:
        j = self.i + 1
        if j < len(self.t) and self.t[j] == "^":
            j += 1
        if j < len(self.t) and self.t[j] == "]":
            j += 1
        while j < len(self.t) and self.t[j] != "]":
            j += 2 if self.t[j] == "\\" else 1
        if j >= len(self.t):
            raise self.fail("unterminated character class")
        return j

    def literal(self, quote: str) -> _Node:
        self.i += 1
        out = []
        while True:
            if self.i >= len(self.t):
                raise self.fail("unterminated string literal")
            c = self.t[self.i]
            self.i += 1
            if c == quote:
                break
            if c == "\\":
                e = self.t[self.i]
                self.i += 1
                out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}.get(e, e))
            else:
                out.append(c)
        return _Node("seq", parts=[_Node("lit", chars=frozenset(ch)) for ch in out])

    def quantified(self, atom: _Node) -> _Node:
        c = self.t[self.i] if self.i < len(self.t) else None
        if c in ("?", "*", "+"):
            self.i += 1
            lo, hi = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c]
            return _Node("rep", parts=[atom], lo=lo, hi=hi)
        if c == "{":
            end = self.t.find("}", self.i)
            body = self.t[self.i + 1 : end].replace(" ", "") if end > 0 else ""
            lo_s, comma, hi_s = body.partition(",")
            if not lo_s.isdigit() or (hi_s and not hi_s.isdigit()):
                raise self.fail("bad repetition range")
            self.i = end + 1
            lo = int(lo_s)
            return _Node("rep", parts=[atom], lo=lo, hi=(int(hi_s) if hi_s else None) if comma else lo)
        return atom


def _min_costs(rules: dict[str, _Node]) -> dict[str, int]:
    """How deep each rule must go at least to end (a fixpoint); unreachable ends stay large."""
    big = 10**6
    cost = dict.fromkeys(rules, big)

    def node_cost(n: _Node) -> int:
        if n.kind in ("lit", "set"):
            return 0
        if n.kind == "ref":
            return cost[next(iter(n.chars))] + 1
        if n.kind == "seq":
            return max((node_cost(p) for p in n.parts), default=0)
        if n.kind == "alt":
            return min(node_cost(p) for p in n.parts)
        return 0 if n.lo == 0 else node_cost(n.parts[0])

    changed = True
    while changed:
        changed = False
        for name, node in rules.items():
            c = node_cost(node)
            if c < cost[name]:
                cost[name], changed = c, True
    return cost


def compile_ebnf(text: Any) -> _Grammar:
    if not isinstance(text, str):
        raise GrammarError("ebnf", f"the grammar must be a string, got {json.dumps(text)}")
    rules = _EbnfParser(text).grammar()
    if "root" not in rules:
        raise GrammarError("ebnf", 'the root rule with name "root" is not found')

    def refs(n: _Node) -> list[str]:
        return [next(iter(n.chars))] if n.kind == "ref" else [r for p in n.parts for r in refs(p)]

    for name, node in rules.items():
        for ref in refs(node):
            if ref not in rules:
                raise GrammarError("ebnf", f"rule '{ref}' is not defined (used by '{name}')")
    cost = _min_costs(rules)
    if cost["root"] >= 10**6:
        raise GrammarError("ebnf", "the root rule never ends (every derivation recurses forever)")
    return _Grammar(rules, cost)


def _ebnf_gen(g: _Grammar, n: _Node, rng: random.Random, depth: int, out: list[str]) -> None:
    limit = 12
    if n.kind == "lit":
        out.append(next(iter(n.chars)))
    elif n.kind == "set":
        out.append(_pick_char(n.chars, rng))
    elif n.kind == "seq":
        for p in n.parts:
            _ebnf_gen(g, p, rng, depth, out)
    elif n.kind == "ref":
        _ebnf_gen(g, g.rules[next(iter(n.chars))], rng, depth + 1, out)
    elif n.kind == "alt":
        if depth >= limit:
            costs = [_branch_cost(g, p) for p in n.parts]
            best = min(costs)
            options = [p for p, c in zip(n.parts, costs, strict=True) if c == best]
        else:
            options = [p for p in n.parts if _branch_cost(g, p) < 10**6] or n.parts
        _ebnf_gen(g, rng.choice(options), rng, depth, out)
    else:
        extra = 0 if depth >= limit else 2
        hi = n.lo + extra if n.hi is None else min(n.hi, n.lo + extra)
        for _ in range(rng.randint(n.lo, max(n.lo, hi))):
            _ebnf_gen(g, n.parts[0], rng, depth + 1, out)


def _branch_cost(g: _Grammar, n: _Node) -> int:
    if n.kind in ("lit", "set"):
        return 0
    if n.kind == "ref":
        return g.cost[next(iter(n.chars))] + 1
    if n.kind == "seq":
        return max((_branch_cost(g, p) for p in n.parts), default=0)
    if n.kind == "alt":
        return min(_branch_cost(g, p) for p in n.parts)
    return 0 if n.lo == 0 else _branch_cost(g, n.parts[0])


def text_from_ebnf(text: Any, rng: random.Random) -> str:
    g = compile_ebnf(text)
    out: list[str] = []
    _ebnf_gen(g, g.rules["root"], rng, 0, out)
    return "".join(out)


def grammar_plan(kind: str, spec: str, user_text: str) -> Callable[[random.Random], str]:
    """Compile a request's grammar now (raising GrammarError) and return the model's plan for it."""
    if kind == "json":
        try:
            schema = json.loads(spec)
        except ValueError as exc:
            raise GrammarError("json", f"the schema is not valid JSON: {exc}") from None
        check_json_schema(schema)
        words = _WORDS.findall(user_text)
        return lambda rng: json.dumps(JsonWriter(schema, rng, words).value(schema), ensure_ascii=False)
    if kind == "regex":
        node = compile_regex(spec)
        return lambda rng: generate_regex(node, rng)
    if kind == "ebnf":
        grammar = compile_ebnf(spec)

        def write(rng: random.Random) -> str:
            out: list[str] = []
            _ebnf_gen(grammar, grammar.rules["root"], rng, 0, out)
            return "".join(out)

        return write
    raise GrammarError(kind, f"{kind} grammars are not supported by the simulated engine")


_WORDS = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")
