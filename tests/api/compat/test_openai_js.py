"""The JavaScript `openai` package, unmodified (tests/api/compat/js/scenario.mjs): a tool call with
its round trip, a streamed answer with usage, and a streamed tool call through its stream helper.
Runs where Node and the package are present (scripts/ensure-test-deps installs it with npm)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).parent / "js"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (JS / "node_modules" / "openai").is_dir(),
    reason="Node or the openai npm package is not installed (scripts/ensure-test-deps)",
)


def test_tools_and_streaming_from_javascript(api):
    base_url, key = api
    done = subprocess.run(
        ["node", "scenario.mjs"],
        cwd=JS,
        env={**os.environ, "BASE_URL": base_url, "API_KEY": key},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["finish"] == "tool_calls" and result["name"] == "get_weather"
    assert isinstance(result["arguments"]["city"], str)
    assert result["answer"]
    streamed = result["streamed"]
    assert streamed["text"] and streamed["pieces"] > 1
    assert (
        streamed["usage"]["total_tokens"] == streamed["usage"]["prompt_tokens"] + streamed["usage"]["completion_tokens"]
    )
    assert result["streamed_call"]["name"] == "get_weather" and json.loads(result["streamed_call"]["arguments"])["city"]
