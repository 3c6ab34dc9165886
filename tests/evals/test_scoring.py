"""Each scorer, on answers that pass and answers that fail, with the sentence that says why."""

import pytest

from evals import scoring


def test_exact_ignores_case_and_spacing_only():
    assert scoring.exact("  The answer is\n4 ", "the ANSWER is 4").passed
    failed = scoring.exact("The answer is 4.", "The answer is 4")
    assert not failed.passed and failed.value == 0.0 and failed.detail == "The answer is not the reference answer."


def test_contains_finds_the_reference_anywhere():
    assert scoring.contains("Paris is the capital of France.", "capital of  france").passed
    assert not scoring.contains("Lyon is a city.", "Paris").passed


def test_regex_searches_and_can_be_anchored():
    assert scoring.regex("The total is 42 euros.", r"\b42\b").passed
    assert not scoring.regex("The total is 42 euros.", r"^\d+$").passed
    assert scoring.regex("42", r"^\d+$").passed


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "answer",
    ['{"city": "Brest", "population": 139000}', '```json\n{"city": "Brest", "population": 139000}\n```'],
    ids=["bare", "fenced"],
)
def test_json_schema_accepts_valid_json_bare_or_fenced(answer):
    assert scoring.json_schema(answer, SCHEMA) == scoring.Score(1.0, True, "The answer is JSON the schema accepts.")


def test_json_schema_says_where_and_why_it_refuses():
    not_json = scoring.json_schema("Brest, about 139,000 people", SCHEMA)
    assert not not_json.passed and not_json.detail.startswith("The answer is not JSON (")
    wrong = scoring.json_schema('{"city": "Brest", "population": -3}', SCHEMA)
    assert not wrong.passed and wrong.detail.startswith("The schema refuses the answer at population:")
    missing = scoring.json_schema('{"city": "Brest"}', SCHEMA)
    assert "at the top level" in missing.detail and "'population' is a required property" in missing.detail


def test_schemas_and_patterns_are_checked_before_a_run():
    assert scoring.check_schema(SCHEMA) is None
    assert scoring.check_schema({"type": "no-such-type"}).startswith("it is not a valid JSON schema")
    assert scoring.check_schema(["not", "an", "object"]) == "a JSON schema is an object"
    assert scoring.check_pattern(r"\d+") is None
    assert scoring.check_pattern("(unclosed").startswith("it is not a regular expression")


def test_the_judge_is_asked_for_the_documented_format_and_read_from_it():
    prompt = scoring.judge_prompt("What is 2 + 2?", "4", "Correct and brief.")
    assert "VERDICT: PASS or FAIL" in prompt and "Correct and brief." in prompt and prompt.endswith("4")

    assert scoring.read_verdict("VERDICT: PASS\nSCORE: 8\nREASON: Right, and short.") == scoring.Score(
        0.8, True, "Judge: pass. Right, and short."
    )
    failed = scoring.read_verdict("verdict: fail\nscore: 2/10\nreason: It says 5.")
    assert failed == scoring.Score(0.2, False, "Judge: fail. It says 5.")
    assert scoring.read_verdict("VERDICT: PASS").value == 1.0  # no score: the verdict's
    assert scoring.read_verdict("VERDICT: PASS\nSCORE: 99").value == 1.0  # at most 10 / 10


def test_a_judge_that_repeats_its_instructions_or_writes_prose_gives_no_verdict():
    for reply in (scoring.judge_prompt("Q", "A", "R"), "The answer looks fine to me.", ""):
        verdict = scoring.read_verdict(reply)
        assert verdict == scoring.Score(
            0.0, False, "The judge's reply was not in the format it was asked for (no VERDICT line)."
        )


def test_similarity_is_the_cosine_and_passes_from_the_items_threshold():
    same = scoring.similarity([0.6, 0.8], [0.6, 0.8], None)
    assert same.passed and same.value == pytest.approx(1.0) and "cosine 1.00, at least 0.80" in same.detail
    apart = scoring.similarity([1.0, 0.0], [0.6, 0.8], None)
    assert not apart.passed and apart.value == pytest.approx(0.6)
    assert apart.detail == "Not similar enough to the reference answer (cosine 0.60, under 0.80)."
    assert scoring.similarity([1.0, 0.0], [0.6, 0.8], 0.5).passed  # the item's own threshold
    assert scoring.similarity([1.0, 0.0], [-1.0, 0.0], None).value == 0.0  # opposite: no similarity, not negative
