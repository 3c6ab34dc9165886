"""Hypothesis strategies for what a client may send: JSON values of every kind, and raw bodies and frames
that are not what they claim to be (nested thousands deep, not JSON, not UTF-8, NUL, lone surrogates)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
#: Numbers and ids as a program might get them wrong: huge, negative, in words, as lists.
ids = (
    st.integers(-3, 50)
    | st.integers(2**63 - 2, 2**70)
    | st.sampled_from(["1", "²", "٣", "9" * 30, True, [1], {"id": 1}])
    | json_scalars
)


@st.composite
def deeply_nested(draw) -> str:
    """JSON text nested deeper than the product accepts (objects and lists, up to 5,000 levels)."""
    depth = draw(st.integers(60, 5000))
    inner = json.dumps(draw(json_scalars))
    if draw(st.booleans()):
        return "[" * depth + inner + "]" * depth
    key = json.dumps(draw(st.text(max_size=20)))
    return ("{" + key + ":") * depth + inner + "}" * depth


def raw_texts(values) -> st.SearchStrategy[str]:
    """JSON text of `values` (with \\uXXXX escapes, as Python sends lone surrogates), or text that is
    not JSON at all, or JSON nested too deep."""
    return (
        values.map(json.dumps)
        | deeply_nested()
        | st.text(max_size=60)
        | st.sampled_from(['{"a": "\\u0000"}', '{"a": "\\ud800"}', '{"\\udfff": 1}', "", "{", "[1,]"])
    )


def raw_bodies(values) -> st.SearchStrategy[bytes]:
    """As `raw_texts`, in UTF-8, or bytes that are not UTF-8 (a surrogate encoded, a stray byte)."""
    return raw_texts(values).map(lambda text: text.encode("utf-8", "surrogatepass")) | st.sampled_from(
        [b'{"a": "\xed\xa0\x80"}', b'{"a": "\xff"}', b"\x00", b'"\xc3']
    )
