"""A deterministic, reversible tokenizer with a small word vocabulary and byte-chunk fallback.

Why not a real BPE vocabulary: the simulator must start fast with no files to download, and tests
must be able to compute token counts themselves. What matters for faithfulness is that

- the same text always gives the same ids, in any process (no hash randomisation),
- ordinary English costs about one token per word, like a real tokenizer,
- decoding generated ids and encoding the text again gives the same ids back, so a chat's next turn
  (which re-sends the previous answer as text) matches the radix cache all the way through it.

How text is split: first the special tokens (``<|im_start|>`` …) are cut out; the rest is
pre-tokenized GPT-2 style (a word with its leading space, a digit run of up to 3, a punctuation run,
whitespace). A piece found in the vocabulary is one token. Any other piece is cut into chunks of at
most 3 UTF-8 bytes, each one token whose id encodes the bytes themselves, so every text round-trips
and no table is needed to decode it. A chunk may end inside a multi-byte character; decoding then
holds the incomplete bytes back, exactly as an incremental detokenizer does.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
from functools import lru_cache

from simulator.vocab import PUNCTUATION, all_words

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]
ENDOFTEXT_ID = 0
IM_START_ID = 1
IM_END_ID = 2
END_HEADER_ID = 5
EOT_ID = 6
#: Ids that end a generation (the model's generation_config eos_token_id list).
EOS_TOKEN_IDS = frozenset({ENDOFTEXT_ID, IM_END_ID, EOT_ID})

WORD_BASE = 16
BYTE_BASE = 100_000
MAX_CHUNK = 3

_SPECIAL_RE = re.compile("|".join(re.escape(s) for s in SPECIAL_TOKENS))
_PIECE_RE = re.compile(r" ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|_+|\s+(?!\S)|\s+")


def _capitalize(word: str) -> str:
    return word[:1].upper() + word[1:]


@lru_cache(maxsize=1)
def _vocab() -> tuple[dict[str, int], dict[int, str]]:
    pieces: list[str] = []
    for word in all_words():
        pieces += [word, " " + word, _capitalize(word), " " + _capitalize(word)]
    for mark in PUNCTUATION:
        pieces += [mark] if mark.startswith("\n") else [mark, " " + mark]
    pieces.append(" ")
    encode: dict[str, int] = {}
    for piece in pieces:
        encode.setdefault(piece, WORD_BASE + len(encode))
    return encode, {i: p for p, i in encode.items()}


def word_id(piece: str) -> int:
    """The id of a vocabulary piece such as ``" cache"`` (KeyError if it is not one)."""
    return _vocab()[0][piece]


def vocab_size() -> int:
    return BYTE_BASE + ((MAX_CHUNK + 1) << 24)


def _chunk_ids(piece: str) -> Iterable[int]:
    data = piece.encode("utf-8")
    for i in range(0, len(data), MAX_CHUNK):
        chunk = data[i : i + MAX_CHUNK]
        yield BYTE_BASE + (len(chunk) << 24) + int.from_bytes(chunk, "big")


def encode(text: str) -> list[int]:
    """Text to token ids."""
    words, _ = _vocab()
    ids: list[int] = []
    pos = 0
    for special in _SPECIAL_RE.finditer(text):
        ids += _encode_plain(text[pos : special.start()], words)
        ids.append(SPECIAL_TOKENS.index(special.group()))
        pos = special.end()
    ids += _encode_plain(text[pos:], words)
    return ids


def _encode_plain(text: str, words: dict[str, int]) -> list[int]:
    ids: list[int] = []
    for piece in _PIECE_RE.findall(text):
        known = words.get(piece)
        if known is not None:
            ids.append(known)
        else:
            ids.extend(_chunk_ids(piece))
    return ids


def token_bytes(token_id: int, *, skip_special_tokens: bool = True) -> bytes:
    """The bytes one token stands for (b"" for a special token when skipping them, or an unknown id)."""
    if 0 <= token_id < len(SPECIAL_TOKENS):
        return b"" if skip_special_tokens else SPECIAL_TOKENS[token_id].encode()
    if token_id >= BYTE_BASE:
        packed = token_id - BYTE_BASE
        length, value = packed >> 24, packed & 0xFFFFFF
        if 1 <= length <= MAX_CHUNK and value < (1 << (8 * length)):
            return value.to_bytes(length, "big")
        return b""
    piece = _vocab()[1].get(token_id)
    return piece.encode() if piece is not None else b""


def decode(ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
    """Token ids to text; an incomplete trailing UTF-8 sequence is dropped."""
    data = b"".join(token_bytes(i, skip_special_tokens=skip_special_tokens) for i in ids)
    return data.decode("utf-8", errors="ignore")


class IncrementalDetokenizer:
    """Text as tokens arrive; bytes of an unfinished character wait for the next token."""

    def __init__(self, *, skip_special_tokens: bool = True) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._skip = skip_special_tokens
        self.text = ""

    def add(self, token_id: int) -> str:
        """Feed one token; return the text it completed (possibly "")."""
        new = self._decoder.decode(token_bytes(token_id, skip_special_tokens=self._skip))
        self.text += new
        return new
