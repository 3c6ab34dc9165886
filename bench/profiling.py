"""The profile phase of `make bench`: where Daphne's time goes while 50 web streams run.

py-spy samples the matrix's Daphne (bench/matrix.py, `instant`) at 100 Hz while 50 web streams run
against it, counting only the thread that holds the GIL (CPU, not waits); the raw stacks stay in
bench/results/logs/ and the top frames, by own time and (for the product's own code) including what
they call, go into its section of docs/PERFORMANCE.md.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load, matrix

if TYPE_CHECKING:
    from bench.run import Bench

#: The product's own code, as py-spy names its files.
REPO_DIRS = ("chat/", "api/", "inference/", "billing/", "accounts/", "config/", "moderation/", "simulator/")


def run(bench: Bench) -> None:
    matrix.instant(bench)
    seconds = 10 if bench.args.quick else 15
    out = bench.logs / "profile-web-50.txt"
    spy = [
        str(Path(sys.executable).with_name("py-spy")),
        "record",
        "--pid",
        str(bench.daphne.proc.pid),
        "--duration",
        str(seconds),
        "--rate",
        "100",
        "--format",
        "raw",
        "--nonblocking",
        "--gil",  # CPU only: a thread waiting (on the network, a lock, the database) is not counted
        "--output",
        str(out),
    ]
    result = {"path": "web", "concurrency": 50, "seconds": seconds, "tool": "py-spy 100 Hz, --nonblocking --gil"}
    try:
        out.unlink(missing_ok=True)
        recorder = subprocess.Popen(spy, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1)
        loaded = asyncio.run(profiled_load(bench, seconds + 1))
        output, _ = recorder.communicate(timeout=60)
        if recorder.returncode != 0 or not out.exists():
            raise RuntimeError(f"py-spy failed ({recorder.returncode}): {output.strip()[-300:]}")
        result |= top_frames(out.read_text(), seconds=seconds, rate=100)
        result["answers"] = sum(1 for s in loaded.samples if s.ok)
        result["raw"] = str(out.relative_to(bench.root))
    except Exception as exc:
        result["error"] = bench.failure(exc)
    bench.results["phases"]["profile"] = result
    bench.log(text(result))
    bench.drain(30)


async def profiled_load(bench: Bench, seconds: float) -> load.Run:
    accounts = bench.accounts["load"]
    async with load.http_client(bench.timeout) as client:
        return await load.closed_loop(
            min(50, len(accounts)),
            10**9,
            seconds,
            bench.timeout,
            lambda slot, n: load.web_turn(client, bench.daphne.url, accounts[slot], n),
        )


_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?)(?::\d+)?\)$")


def _short_frame(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "/lib/python3.11/", "/lib/python3.12/", "/lib/python3.13/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        for directory in (*REPO_DIRS, "bench/"):
            index = path.find("/" + directory)
            if index >= 0:
                path = path[index + 1 :]
                break
    return f"{match['func']} ({path})"


def top_frames(raw: str, *, seconds: float, rate: int, count: int = 10) -> dict:
    """Own and inclusive time per frame from py-spy's raw (collapsed) stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        weight = int(n)
        frames = [_short_frame(f) for f in stack.split(";") if f.strip()]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        samples += weight
        own[frames[-1]] += weight
        for frame in set(frames):
            inclusive[frame] += weight
    total = max(samples, 1)
    product = [(f, n) for f, n in inclusive.most_common() if any(f"({d}" in f for d in REPO_DIRS)]
    return {
        "samples": samples,
        "busy_pct": round(samples / (seconds * rate) * 100),
        "top_self": [{"frame": f, "self_pct": round(n / total * 100, 1)} for f, n in own.most_common(count)],
        "top_product_inclusive": [{"frame": f, "total_pct": round(n / total * 100, 1)} for f, n in product[:count]],
    }


# -- its console text and its part of the doc -----------------------------------------------------


def text(result: dict) -> str:
    if "error" in result:
        return f"\nProfile: failed: {result['error']}"
    lines = [
        f"\nProfile of the 50-stream web run ({result['seconds']} s, {result['samples']} samples, "
        f"{result['answers']} answers): top frames by own time"
    ]
    lines += [f"  {f['self_pct']:5.1f}%  {f['frame']}" for f in result["top_self"]]
    return "\n".join(lines)


def markdown(results: dict, rel: dict[str, Path]) -> list[str]:
    p = results["phases"].get("profile") or {}
    out = ["", "## Where Daphne's time goes: profile of the 50-stream web run", ""]
    if not p or "skipped" in p or "error" in p:
        return [*out, f"Not measured: {p.get('skipped') or p.get('error') or 'not run'}."]
    out += [
        f"py-spy sampled the Daphne process at 100 Hz for {p['seconds']} s while 50 web streams ran "
        f"({p['answers']} answers), counting only the thread holding the GIL (`--gil`: CPU, not waits): "
        f"{p['samples']} samples ({p['busy_pct']}% of one core's worth of samples). The raw stacks stay on the machine that ran it, in "
        f"`{p.get('raw')}` (collapsed format, which speedscope and flamegraph.pl read; not committed).",
        "",
        "Top ten frames by own time:",
        "",
        "| own | frame |",
        "|---|---|",
    ]
    out += [f"| {f['self_pct']}% | `{f['frame']}` |" for f in p["top_self"]]
    out += [
        "",
        "Top ten frames of the product's own code, by time including what they call:",
        "",
        "| total | frame |",
        "|---|---|",
    ]
    out += [f"| {f['total_pct']}% | `{f['frame']}` |" for f in p["top_product_inclusive"]]
    return out
