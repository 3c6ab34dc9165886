"""config.text, the one reader of what clients send: its rules on their own, without a server.

The live tests (test_nested_bodies.py, test_malformed_input.py, test_unicode.py, the fuzz) show what
each transport answers; these pin the reader's edges: exactly how deep is too deep, what counts as
nesting, which texts are refused, and that walking costs memory by depth, not by the length of keys.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from config.refusals import BadInput
from config.text import MAX_DEPTH, read_json, request_data_refusal, whole_number


def _lists(depth: int) -> str:
    return "[" * depth + "]" * depth


def _objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _refusal(raw) -> str:
    with pytest.raises(BadInput) as refused:
        read_json(raw)
    return refused.value.message


@pytest.mark.parametrize("nested", [_lists, _objects], ids=["lists", "objects"])
def test_nesting_up_to_the_limit_is_read_and_one_more_is_refused_before_parsing(nested):
    assert read_json(nested(MAX_DEPTH)) is not None
    assert "more than 64 deep" in _refusal(nested(MAX_DEPTH + 1))
    assert "more than 64 deep" in _refusal(nested(100_000))  # Python's parser would recurse into it


def test_objects_and_lists_count_together_and_brackets_in_strings_do_not():
    mixed = '{"a":[' * 32 + "1" + "]}" * 32  # 64 deep
    assert read_json(mixed) is not None
    assert "deep" in _refusal("[" + mixed + "]")
    inside = json.dumps(["[" * 500, '\\"[[[[', "{" * 500, "\\"])  # escaped quotes and backslashes too
    assert read_json(inside) == ["[" * 500, '\\"[[[[', "{" * 500, "\\"]


def test_json_in_utf_16_is_checked_as_strictly():
    assert "deep" in _refusal(_lists(MAX_DEPTH + 1).encode("utf-16"))
    assert "NUL" in _refusal(json.dumps({"a": "x\x00"}).encode("utf-16"))
    assert read_json(json.dumps({"a": "é"}).encode("utf-16")) == {"a": "é"}


@pytest.mark.parametrize(
    "raw, param",
    [
        (b'{"a": "\\u0000"}', "a"),
        (b'{"a": {"b": ["ok", "\\uD800"]}}', "a.b[1]"),
        (b'{"a": "\\udFfF"}', "a"),
        (b'{"a": "\xed\xa0\x80"}', "a"),  # a surrogate encoded as UTF-8, which json.loads lets through
        (b'{"\\u0000": 1}', None),  # in a key: named by where the key is
    ],
)
def test_nul_and_lone_surrogates_are_refused_wherever_and_however_they_are_written(raw, param):
    with pytest.raises(BadInput) as refused:
        read_json(raw)
    assert refused.value.details.get("param") == param


def test_whole_characters_and_escaped_pairs_are_text_like_any_other():
    assert read_json(b'{"a": "\\ud83d\\ude00 \\\\u0000"}') == {"a": "\U0001f600 \\u0000"}
    assert read_json('{"a": "\u202e\U0001f600"}') == {"a": "\u202e\U0001f600"}


def test_the_path_of_a_refused_field_names_long_keys_briefly():
    key = "k" * 10_000
    with pytest.raises(BadInput) as refused:
        read_json(json.dumps({key: {"b": "\x00"}}))
    assert len(refused.value.message) < 300
    assert refused.value.details["param"] == "k" * 39 + "….b"


def test_the_walk_costs_memory_by_depth_not_by_the_length_of_keys():
    """64 levels of 40,000-character keys: the path of each level, written out as the walk went down,
    held about 80 MB at the bottom; the path is now written out once, for the field refused."""
    data: object = "\x00"
    for _ in range(MAX_DEPTH):
        data = {"k" * 40_000: data}
    tracemalloc.start()
    try:
        refusal = request_data_refusal(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refusal is not None and "NUL" in refusal.message
    assert peak < 1_000_000, f"{peak:,} bytes"


def test_the_walk_does_not_recurse():
    data: object = "x"
    for _ in range(100_000):
        data = [data]
    assert "deep" in request_data_refusal(data).message  # no RecursionError


@pytest.mark.parametrize(
    "value, number",
    [
        ("0", 0),
        ("42", 42),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("9" * 5000, None),  # int() refuses more than 4,300 digits
        ("²", None),  # str.isdigit() says yes; int() refuses it
        ("٣", None),  # int() reads it as 3
        ("1_0", None),
        (" 1", None),
        ("-1", None),
        ("", None),
    ],
)
def test_a_whole_number_is_ascii_digits_within_bounds(value, number):
    assert whole_number(value) == number
