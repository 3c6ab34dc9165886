"""The scorers: how an eval item's answer is scored, from 0 to 1, with a sentence that says why.

- exact: the reference answer, ignoring case, surrounding whitespace and how whitespace is run together;
- contains: the reference answer appears in the answer (the same leniency);
- regex: the pattern is found in the answer (`re.search`; anchor it with ^ and $ for the whole answer);
- json_schema: the answer is JSON (a Markdown code fence around it is allowed) that the schema accepts;
- similarity: the cosine between the embeddings of the answer and of the reference answer (the retrieval
  embedding model's, RETRIEVAL_EMBEDDING_MODEL), passing from the item's threshold (DEFAULT_THRESHOLD);
- judge: a judge model grades the answer against the item's rubric and replies in the format below
  (`judge_prompt` asks for it, `read_verdict` reads it):

      VERDICT: PASS or FAIL
      SCORE: an integer from 0 to 10
      REASON: one sentence

  The score is SCORE / 10 (1 or 0 from the verdict when SCORE is missing); an answer not in this
  format scores 0 and says so. With the simulated engine a judge writes prose, never this format:
  its scores, like every score of a simulated model, measure nothing about a real one.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

#: A scorer's sentence is kept with the result (EvalResult.detail); longer ones are cut.
DETAIL_CHARS = 500


@dataclass(frozen=True)
class Score:
    value: float
    passed: bool
    detail: str


def _plain(text: str) -> str:
    return " ".join(text.split()).casefold()


def exact(answer: str, reference: str) -> Score:
    if _plain(answer) == _plain(reference):
        return Score(1.0, True, "The answer is the reference answer.")
    return Score(0.0, False, "The answer is not the reference answer.")


def contains(answer: str, reference: str) -> Score:
    if _plain(reference) in _plain(answer):
        return Score(1.0, True, "The answer contains the reference answer.")
    return Score(0.0, False, "The answer does not contain the reference answer.")


def regex(answer: str, pattern: str) -> Score:
    if re.search(pattern, answer, flags=re.DOTALL):
        return Score(1.0, True, "The answer matches the pattern.")
    return Score(0.0, False, "The answer does not match the pattern.")


_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*)\n\s*```\s*$", re.DOTALL)


def json_schema(answer: str, schema: dict[str, Any]) -> Score:
    fenced = _FENCE.match(answer)
    text = fenced.group(1) if fenced else answer
    try:
        value = json.loads(text)
    except ValueError as exc:
        return Score(0.0, False, f"The answer is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}).")
    error = next(iter(Draft202012Validator(schema).iter_errors(value)), None)
    if error is None:
        return Score(1.0, True, "The answer is JSON the schema accepts.")
    where = "/".join(str(p) for p in error.absolute_path) or "the top level"
    return Score(0.0, False, f"The schema refuses the answer at {where}: {error.message}"[:DETAIL_CHARS])


#: A similarity item's threshold when it sets none.
DEFAULT_THRESHOLD = 0.8


def similarity(answer_vector: list[float], reference_vector: list[float], threshold: float | None) -> Score:
    """Two embeddings' cosine as the score; it passes from `threshold`."""
    dot = sum(a * b for a, b in zip(answer_vector, reference_vector, strict=True))
    norms = math.sqrt(sum(a * a for a in answer_vector)) * math.sqrt(sum(b * b for b in reference_vector))
    cosine = max(dot / norms, 0.0) if norms else 0.0
    bar = DEFAULT_THRESHOLD if threshold is None else threshold
    if cosine >= bar:
        return Score(cosine, True, f"Similar to the reference answer (cosine {cosine:.2f}, at least {bar:.2f}).")
    return Score(cosine, False, f"Not similar enough to the reference answer (cosine {cosine:.2f}, under {bar:.2f}).")


def check_schema(schema: object) -> str | None:
    """Why `schema` is not a JSON schema a run can use, or None when it is."""
    if not isinstance(schema, dict):
        return "a JSON schema is an object"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"it is not a valid JSON schema: {exc.message}"
    return None


def check_pattern(pattern: str) -> str | None:
    """Why `pattern` is not a regular expression a run can use, or None when it is."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"it is not a regular expression: {exc}"
    return None


JUDGE_PROMPT = """You grade an answer to a question against a rubric. Read them, then reply with exactly \
these three lines and nothing else:
VERDICT: PASS or FAIL
SCORE: an integer from 0 to 10
REASON: one sentence

Rubric:
{rubric}

Question:
{question}

Answer:
{answer}"""

# Whole lines: an answer that repeats the instructions ("VERDICT: PASS or FAIL") has given no verdict.
_VERDICT = re.compile(r"^\s*VERDICT\s*:\s*(PASS|FAIL)\s*\.?\s*$", re.IGNORECASE | re.MULTILINE)
_SCORE = re.compile(r"^\s*SCORE\s*:\s*(\d+)\s*(?:/\s*10)?\s*$", re.IGNORECASE | re.MULTILINE)
_REASON = re.compile(r"^\s*REASON\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)


def judge_prompt(question: str, answer: str, rubric: str) -> str:
    return JUDGE_PROMPT.format(rubric=rubric.strip(), question=question.strip(), answer=answer.strip())


def read_verdict(reply: str) -> Score:
    """The judge's reply in the documented format, as a score."""
    verdict = _VERDICT.search(reply)
    if verdict is None:
        return Score(0.0, False, "The judge's reply was not in the format it was asked for (no VERDICT line).")
    passed = verdict.group(1).upper() == "PASS"
    found = _SCORE.search(reply)
    value = min(int(found.group(1)), 10) / 10 if found else (1.0 if passed else 0.0)
    reason = _REASON.search(reply)
    said = reason.group(1).strip() if reason else "The judge gave no reason."
    return Score(value, passed, f"Judge: {'pass' if passed else 'fail'}. {said}"[:DETAIL_CHARS])


def score(scorer: str, answer: str, *, reference: str = "", schema: dict | None = None) -> Score:
    """An answer's score by one of the scorers that need no model (the judge's is `read_verdict`, the
    similarity's `similarity`)."""
    if scorer == "exact":
        return exact(answer, reference)
    if scorer == "contains":
        return contains(answer, reference)
    if scorer == "regex":
        return regex(answer, reference)
    if scorer == "json_schema":
        return json_schema(answer, schema or {})
    raise ValueError(f"{scorer} is not a scorer that needs no model")
