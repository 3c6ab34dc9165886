"""JSON as the server streams it (config.wire): orjson's speed, json's tolerance, and every data: line
one line for any reader."""

import json

from config.wire import json_bytes


def test_line_separators_a_model_may_write_are_escaped_and_the_text_survives():
    text = "one\u2028two\u2029three\x85four — déjà vu"
    written = json_bytes({"content": text})
    assert b"\n" not in written and len(written.decode().splitlines()) == 1
    assert json.loads(written) == {"content": text}
    assert "déjà".encode() in written  # other characters stay as they are (UTF-8)


def test_what_orjson_refuses_is_written_as_json_writes_it():
    schema = {"type": "integer", "maximum": 18446744073709551616}  # past 64 bits: a program's own schema
    assert json.loads(json_bytes(schema)) == schema
