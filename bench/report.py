"""Figures from samples, the targets beside them, and the three outputs: JSON, PNG plots, docs/PERFORMANCE.md."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from bench.load import Sample

PRODUCT_PATHS = ("api", "web", "ws")
#: The paths of the matrix, in the order of the doc's tables.
PATHS = {
    "engine": "engine direct",
    "smg": "SGLang Model Gateway (smg)",
    "litellm": "LiteLLM proxy (1 worker)",
    "api": "product: /v1/chat/completions",
    "web": "product: web send + SSE",
    "ws": "product: WebSocket",
}
REPO_DIRS = ("chat/", "api/", "inference/", "billing/", "accounts/", "config/", "moderation/", "simulator/")


# -- figures -----------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (already in the unit wanted)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def percentiles(seconds: list[float]) -> dict | None:
    if not seconds:
        return None
    ms = [s * 1000 for s in seconds]
    return {
        "p50": round(percentile(ms, 0.50), 1),
        "p95": round(percentile(ms, 0.95), 1),
        "p99": round(percentile(ms, 0.99), 1),
        "mean": round(sum(ms) / len(ms), 1),
        "n": len(ms),
    }


def summarize(
    samples: list[Sample], wall: float, *, server_cpu_s: float | None = None, client_cpu_s: float | None = None
) -> dict:
    ok = [s for s in samples if s.ok]
    errors = Counter(s.status for s in samples if not s.ok)
    refused = [s for s in samples if s.status == "503"]
    wall = max(wall, 1e-9)
    row = {
        "requests": len(samples),
        "ok": len(ok),
        "errors": dict(errors),
        "ttft_ms": percentiles([s.latency for s in ok]),
        "answer_ms": percentiles([s.total for s in ok]),
        "wall_s": round(wall, 2),
        "answers_per_s": round(len(ok) / wall, 1),
        "tokens_per_s": round(sum(s.tokens for s in ok) / wall, 0),
        "http_500": sum(
            n for status, n in errors.items() if status.isdigit() and status != "503" and int(status) >= 500
        ),
        "refusals": {
            "count": len(refused),
            "ms": percentiles([s.latency for s in refused]),
            "without_retry_after": sum(1 for s in refused if not s.retry_after),
        },
    }
    if server_cpu_s is not None:
        row["server_cpu_s"] = round(server_cpu_s, 2)
        row["cpu_ms_per_answer"] = round(server_cpu_s * 1000 / len(ok), 2) if ok else None
        row["server_cpu_pct"] = round(server_cpu_s / wall * 100)
    if client_cpu_s is not None:
        row["client_cpu_pct"] = round(client_cpu_s / wall * 100)
    examples = {}
    for s in samples:
        if not s.ok and s.status not in examples and s.detail:
            examples[s.status] = s.detail
    if examples:
        row["error_examples"] = examples
    return row


def added(results: dict, path: str, concurrency: int, q: str) -> float | None:
    """TTFT of ``path`` minus the engine's at the same concurrency (difference of the percentiles)."""
    mine = (results["matrix"].get(f"{path}@{concurrency}") or {}).get("ttft_ms")
    engine = (results["matrix"].get(f"engine@{concurrency}") or {}).get("ttft_ms")
    if not mine or not engine:
        return None
    return round(mine[q] - engine[q], 1)


# -- the targets ---------------------------------------------------------------------------------------


def _target(name: str, figure, target: str, met: bool | None, note: str = "") -> dict:
    return {"name": name, "figure": figure, "target": target, "met": met, "note": note}


def targets(results: dict) -> list[dict]:
    matrix, phases = results["matrix"], results["phases"]
    out = []
    label = {"api": "API", "web": "web send + SSE", "ws": "WebSocket"}
    for path, limit in (("api", 5), ("web", 10), ("ws", 10)):
        value = added(results, path, 1, "p50")
        out.append(
            _target(
                f"TTFT added at 1 stream, p50, {label[path]}",
                _ms(value),
                f"< {limit} ms",
                None if value is None else value < limit,
            )
        )
    for path in PRODUCT_PATHS:
        ttft = (matrix.get(f"{path}@50") or {}).get("ttft_ms")
        out.append(
            _target(
                f"TTFT at 50 streams, p50 / p99, {label[path]}",
                f"{ttft['p50']:.0f} / {ttft['p99']:.0f} ms" if ttft else "not measured",
                "< 60 / < 150 ms",
                None if not ttft else ttft["p50"] < 60 and ttft["p99"] < 150,
            )
        )
    for path in PRODUCT_PATHS:
        rate = (matrix.get(f"{path}@50") or {}).get("answers_per_s")
        out.append(
            _target(
                f"answers/s per Daphne process at 50 streams, {label[path]}",
                "not measured" if rate is None else f"{rate:.0f}",
                ">= 150",
                None if rate is None else rate >= 150,
            )
        )
    for concurrency in (200, 1000):
        measured = {
            p: matrix[f"{p}@{concurrency}"]
            for p in PRODUCT_PATHS
            if "http_500" in (matrix.get(f"{p}@{concurrency}") or {})
        }
        missing = [label[p] for p in PRODUCT_PATHS if p not in measured]
        scope = (
            "all product paths"
            if not missing
            else (f"{', '.join(label[p] for p in measured) or 'no path'} measured; {', '.join(missing)} not")
        )
        sent = sum(r["requests"] for r in measured.values())
        fives = sum(r["http_500"] for r in measured.values())
        out.append(
            _target(
                f"HTTP 500s at {concurrency} streams ({scope})",
                f"{fives} of {sent}" if measured else "not measured",
                "0",
                _met_in_part(fives == 0, measured, missing),
            )
        )
        # Beyond capacity the answer is a 503 with Retry-After: a timeout or a dropped connection is not.
        other: Counter[str] = Counter()
        for r in measured.values():
            other.update({s: n for s, n in r["errors"].items() if s != "503"})
            other["503 without Retry-After"] += r["refusals"]["without_retry_after"]
        other = Counter({s: n for s, n in other.items() if n})
        out.append(
            _target(
                f"failures other than a 503 with Retry-After at {concurrency} streams ({scope})",
                (f"{sum(other.values())} of {sent}" + (f" ({_errors(other)})" if other else ""))
                if measured
                else "not measured",
                "0",
                _met_in_part(not other, measured, missing),
            )
        )
    overload = phases.get("overload") or {}
    everything = overload.get("all")
    if everything:
        refused = everything["refusals"]
        other = {s: n for s, n in everything["errors"].items() if s != "503"}
        out.append(
            _target(
                "overload: every refusal a 503 with Retry-After",
                f"{refused['count']} x 503 ({refused['without_retry_after']} without Retry-After); "
                f"other failures: {_errors(other) or 'none'}",
                "all 503 + Retry-After",
                not other and refused["without_retry_after"] == 0,
            )
        )
        ms = refused["ms"]
        out.append(
            _target(
                "overload: time to answer a refused request, p99",
                _ms(ms and ms["p99"]),
                "< 50 ms",
                None if not ms else ms["p99"] < 50,
            )
        )
        premium = (overload.get("premium") or {}).get("ttft_ms")
        unloaded = overload.get("unloaded_premium")
        out.append(
            _target(
                "overload: premium TTFT p99, loaded vs unloaded",
                f"{premium['p99']:.0f} vs {unloaded['p99']:.0f} ms" if premium and unloaded else "not measured",
                "(no number set: shown for comparison)",
                None,
            )
        )
        losses = overload.get("losses") or {}
        out.append(
            _target(
                "overload: nothing lost (user message stored, answer final, one ledger row each)",
                f"{losses.get('lost', '?')} lost of {losses.get('accepted', '?')} accepted",
                "0 lost",
                None if "lost" not in losses else losses["lost"] == 0,
            )
        )
    else:
        out.append(_target("overload", "not measured", "", None, overload.get("error") or overload.get("skipped", "")))
    readers = phases.get("readers") or {}
    held, per = readers.get("most_held"), readers.get("kb_per_reader")
    out.append(
        _target(
            "open SSE readers held by one process",
            "not measured" if held is None else f"{held}",
            ">= 2,000",
            None if held is None else held >= 2000,
        )
    )
    out.append(
        _target(
            "memory per open SSE reader",
            "not measured" if per is None else f"{per:.0f} KB",
            "< 100 KB",
            None if per is None else per < 100,
        )
    )
    history = phases.get("history") or {}
    for page in ("sidebar", "conversation"):
        figure = (history.get(f"large_{page}") or {}).get("ms")
        out.append(
            _target(
                f"{page} load p50 ({history.get('conversations', '?')} conversations, "
                f"{history.get('messages', '?')} messages)",
                _ms(figure and figure["p50"]),
                "< 50 ms",
                None if not figure else figure["p50"] < 50,
            )
        )
        queries = history.get("queries") or {}
        large, small = (queries.get("large") or {}).get(page), (queries.get("small") or {}).get(page)
        out.append(
            _target(
                f"{page} SQL queries, large vs small history",
                "not measured" if large is None else f"{large} vs {small}",
                "the same",
                None if large is None else large == small and large >= 0,
            )
        )
    out.append(abuse_target(phases.get("abuse") or {}))
    out += routing_targets(phases.get("routing") or {})
    return out


def abuse_ratio(result: dict) -> float | None:
    """Others' TTFT p99 with the abuser over without: what the abuse target is about."""
    before = ((result.get("unloaded") or {}).get("ttft_ms") or {}).get("p99")
    during = ((result.get("loaded") or {}).get("ttft_ms") or {}).get("p99")
    if not before or during is None:
        return None
    return round(during / before, 2)


def abuse_limits(result: dict) -> dict | None:
    """The abuser's accepted requests against the plan's per-minute number, per window (the user's web
    window, page and WebSocket together, and the user's API window, all keys together); exact only
    within the first minute."""
    abuser, limits = result.get("abuser"), result.get("plan_limits")
    if not abuser or not limits:
        return None
    accepted = abuser.get("accepted") or {}
    rate = limits["requests_per_minute"]
    web = accepted.get("web", 0) + accepted.get("ws", 0)
    api = accepted.get("api", 0)
    refused = abuser.get("refusal_statuses") or {}
    only_429 = all(status.endswith(" 429") for status in refused)
    return {
        "rate": rate,
        "web_and_ws": web,
        "api": api,
        "within": web <= rate and api <= rate and result.get("seconds", 60) < 60,
        "exact": web == rate and api == rate and result.get("seconds", 60) < 60,
        "busy_refusals": sum(n for status, n in refused.items() if status.endswith(" 503")),
        "at_once_refusals": abuser.get("at_once_refusals", 0),
        "at_once": limits.get("answers_at_once"),
        "refusals_all_429_with_retry_after": only_429 and not abuser.get("refusals_without_retry_after"),
    }


def abuse_target(result: dict) -> dict:
    ratio = abuse_ratio(result)
    if ratio is None:
        why = result.get("error") or result.get("skipped") or "not run"
        return _target("others' TTFT p99 while one user hammers every transport", "not measured", "", None, why)
    before, during = result["unloaded"]["ttft_ms"]["p99"], result["loaded"]["ttft_ms"]["p99"]
    return _target(
        "others' TTFT p99 while one user hammers every transport, vs without",
        f"{during:.0f} vs {before:.0f} ms ({ratio:.2f}x)",
        "<= 2x",
        ratio <= 2,
    )


def routing_targets(routing: dict) -> list[dict]:
    """The routing phase's goal as two rows of the targets table."""
    g = routing.get("goal_result")
    if not g:
        why = routing.get("error") or routing.get("skipped") or "not run"
        return [_target("prefix-cache hit rate, affinity routing", "not measured", "", None, why)]
    workers = routing.get("workers", "N")
    return [
        _target(
            f"prefix-cache hit rate, affinity vs the ideal (one worker with the cache of all {workers})",
            f"{_pct(g['affinity'])} vs {_pct(g['ideal'])}"
            + (f" ({g['share_of_ideal'] * 100:.1f}% of it)" if g.get("share_of_ideal") is not None else ""),
            "within 5% (>= 0.95 x)",
            g["within_5pct_of_ideal"],
        ),
        _target(
            "prefix-cache hit rate, affinity vs smg cache_aware",
            f"{_pct(g['affinity'])} vs {_pct(g['smg_cache_aware'])}",
            "above",
            g["above_smg_cache_aware"],
        ),
    ]


def _met_in_part(ok: bool, measured: dict, missing: list) -> bool | None:
    """Missed if any measured path misses; met only if every path was measured."""
    if not measured:
        return None
    if not ok:
        return False
    return None if missing else True


def _ms(value) -> str:
    return "not measured" if value is None else f"{value:.1f} ms"


def _pct(rate: float | None) -> str:
    return "not measured" if rate is None else f"{rate * 100:.1f}%"


def _errors(errors: dict) -> str:
    return ", ".join(f"{status}: {n}" for status, n in sorted(errors.items(), key=lambda kv: -kv[1]))


def _mark(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "-"}[met]


# -- console text -----------------------------------------------------------------------------------


def matrix_header() -> str:
    return (
        f"{'path':<34} {'conc':>5} {'ok/req':>11} {'TTFT p50':>9} {'p95':>8} {'p99':>8} "
        f"{'ans/s':>7} {'tok/s':>7} {'cpu ms/ans':>10}  errors"
    )


def matrix_line(label: str, concurrency: int, row: dict) -> str:
    if "skipped" in row or "error" in row:
        return f"{label:<34} {concurrency:>5}  {row.get('skipped') or 'failed: ' + row.get('error', '')}"
    ttft = row.get("ttft_ms") or {}
    cpu = row.get("cpu_ms_per_answer")
    return (
        f"{label:<34} {concurrency:>5} {row['ok']:>5}/{row['requests']:<5} {ttft.get('p50', float('nan')):>9.1f} "
        f"{ttft.get('p95', float('nan')):>8.1f} {ttft.get('p99', float('nan')):>8.1f} {row['answers_per_s']:>7.1f} "
        f"{row['tokens_per_s']:>7.0f} {'' if cpu is None else f'{cpu:.1f}':>10}  {_errors(row['errors'])}"
    )


def reader_step_line(step: dict) -> str:
    return (
        f"  {step['readers']:>5} readers: {step['receiving']:>5} receiving, failed {step['failed'] or 0}, "
        f"opened in {step['open_s']} s, Daphne RSS {step['rss_mb']} MB "
        f"({step['kb_per_reader']} KB per reader), CPU {step['cpu_pct']}%"
    )


def profile_text(result: dict) -> str:
    if "error" in result:
        return f"\nProfile: failed: {result['error']}"
    lines = [
        f"\nProfile of the 50-stream web run ({result['seconds']} s, {result['samples']} samples, "
        f"{result['answers']} answers): top frames by own time"
    ]
    lines += [f"  {f['self_pct']:5.1f}%  {f['frame']}" for f in result["top_self"]]
    return "\n".join(lines)


def history_text(result: dict) -> str:
    if "error" in result:
        return f"\nHistory at scale: failed: {result['error']}"
    lines = [
        f"\nHistory at scale ({result['conversations']} conversations, one of {result['messages']} messages; "
        f"{result['requests_each']} requests each)"
    ]
    for key in ("large_sidebar", "large_conversation", "small_sidebar", "small_conversation"):
        row = result.get(key) or {}
        ms = row.get("ms") or {}
        lines.append(
            f"  {key:<20} p50 {ms.get('p50')} ms  p99 {ms.get('p99')} ms  {row.get('bytes')} bytes  "
            f"{row.get('statuses')}"
        )
    lines.append(f"  SQL queries: {result.get('queries')}")
    return "\n".join(lines)


def overload_text(result: dict) -> str:
    if "error" in result and "all" not in result:
        return f"\nOverload: failed: {result['error']}"
    lines = [
        f"\nOverload: {result['offered_per_s']} sends/s offered for {result['seconds']} s "
        f"(capacity {result['capacity_answers_per_s']}/s, from {result['capacity_from']}), "
        f"admission {result['admission']}"
    ]
    lines.append(f"  unloaded premium TTFT: {result.get('unloaded_premium')}")
    for kind in ("premium", "free"):
        row = result.get(kind) or {}
        ttft = row.get("ttft_ms") or {}
        refused = row.get("refusals") or {}
        lines.append(
            f"  {kind:<8} {row.get('ok')}/{row.get('requests')} answered, TTFT p50 {ttft.get('p50')} "
            f"p99 {ttft.get('p99')} ms; refused {refused.get('count')} in p50 "
            f"{(refused.get('ms') or {}).get('p50')} p99 {(refused.get('ms') or {}).get('p99')} ms; "
            f"errors {row.get('errors')}"
        )
    lines.append(f"  losses: {result.get('losses')}")
    return "\n".join(lines)


def abuse_text(result: dict) -> str:
    if "loaded" not in result:
        return f"\nAbuse: failed: {result.get('error') or result.get('skipped')}"
    limits = abuse_limits(result) or {}
    lines = [f"\nAbuse: one {result['plan']} user on every transport for {result['seconds']} s"]
    for window in ("unloaded", "loaded"):
        row = result[window]
        t = row.get("ttft_ms") or {}
        lines.append(
            f"  others {window:<8} {row['ok']}/{row['requests']} answered, TTFT p50 {t.get('p50')} p99 "
            f"{t.get('p99')} ms, errors {row.get('errors')}; CPU {(result.get('cpu_pct') or {}).get(window)}"
        )
    a = result["abuser"]
    lines.append(
        f"  abuser: {a['requests']} requests, accepted {a['accepted']}, refused {a['refused']} "
        f"({a['refusal_statuses']}); {a['refusals_without_retry_after']} refusals without Retry-After"
    )
    lines.append(
        f"  limits: {limits.get('web_and_ws')} accepted in the user's window and {limits.get('api')} "
        f"in the user's API window, "
        f"plan {limits.get('rate')} a minute: {'exact' if limits.get('exact') else 'NOT exact'}"
        f"{'' if limits.get('within') else ', EXCEEDED'}; "
        f"p99 ratio {abuse_ratio(result)}x (target <= 2x)"
    )
    return "\n".join(lines)


def readers_text(result: dict) -> str:
    if "error" in result:
        return f"\nOpen SSE readers: failed: {result['error']}"
    per = result.get("kb_per_reader")
    return (
        f"\nOpen SSE readers: most held {result.get('most_held')} (target {result['target']}), "
        + ("memory per reader not measured" if per is None else f"{per} KB each")
        + (f"; stopped: {result['stopped']}" if result.get("stopped") else "")
    )


ROUTING_LABELS = {
    "ideal": "ideal: one worker, cache of all",
    "affinity": "product: affinity",
    "least_loaded": "product: least_loaded",
    "round_robin": "product: round_robin",
    "smg:cache_aware": "smg: cache_aware",
    "smg:manual": "smg: manual (routing key)",
    "smg:round_robin": "smg: round_robin",
}


def routing_header() -> str:
    return (
        f"{'routing':<32} {'ok/sent':>9} {'hit rate':>8} {'TTFT mean':>9} {'p99':>7} {'ans/s':>6} "
        f"{'tok/s':>6}  requests per worker, evicted tokens, turns that changed node"
    )


def routing_line(name: str, row: dict) -> str:
    label = ROUTING_LABELS.get(name, name)
    if "skipped" in row or "error" in row:
        return f"{label:<32} {row.get('skipped') or 'failed: ' + row.get('error', '')}"
    ttft = row.get("ttft_ms") or {}
    rate = row.get("hit_rate")
    return (
        f"{label:<32} {row['ok']:>4}/{row['requests'] + row.get('not_sent', 0):<4} "
        f"{'-' if rate is None else f'{rate * 100:.1f}%':>8} {ttft.get('mean', float('nan')):>9.0f} "
        f"{ttft.get('p99', float('nan')):>7.0f} {row['answers_per_s']:>6.1f} {row['tokens_per_s']:>6.0f}  "
        f"{row.get('requests_per_worker')}, {row.get('evicted_tokens')}, "
        f"{'-' if row.get('moves') is None else row['moves']}"
        + (f"  errors {_errors(row['errors'])}" if row.get("errors") else "")
    )


def routing_goal_text(routing: dict) -> str:
    g = routing.get("goal_result") or {}
    verdict = {True: "met", False: "MISSED", None: "not measured"}[g.get("met")]
    share = g.get("share_of_ideal")
    return (
        f"Goal ({routing.get('goal')}): {verdict}. Affinity {_pct(g.get('affinity'))}"
        + (f" = {share * 100:.1f}% of the ideal's {_pct(g.get('ideal'))}" if share is not None else "")
        + f"; smg cache_aware {_pct(g.get('smg_cache_aware'))}."
    )


def targets_text(rows: list[dict]) -> str:
    lines = ["\nTargets"]
    for row in rows:
        lines.append(f"  [{_mark(row['met']).strip('*'):>6}] {row['name']}: {row['figure']} (target {row['target']})")
    return "\n".join(lines)


# -- the profile ------------------------------------------------------------------------------------------

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


# -- writing ---------------------------------------------------------------------------------------------


def write_all(results: dict, results_dir: Path, doc: Path, paths: dict[str, str]) -> list[Path]:
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "runs").mkdir(exist_ok=True)
    timeline = results["phases"].get("overload", {}).pop("_timeline", None)
    text = json.dumps(results, indent=1, sort_keys=False, default=str)
    latest = results_dir / "latest.json"
    latest.write_text(text)
    stamp = results["started"].replace(":", "").replace("-", "")
    (results_dir / "runs" / f"{stamp}.json").write_text(text)
    written = [latest]
    for stale in ("ttft", "throughput", "readers", "overload", "routing"):  # a plot this run does not make is gone
        (results_dir / f"{stale}.png").unlink(missing_ok=True)
    try:
        written += plots(results, results_dir, paths, timeline)
    except Exception as exc:  # the figures are still written; the doc shows no plots
        print(f"plots failed: {type(exc).__name__}: {exc}")
    doc.write_text(markdown(results, paths, [p for p in written if p.suffix == ".png"], doc.parent))
    written.append(doc)
    return written


def update_sections(
    results: dict, phases: list[str], results_dir: Path, doc: Path, paths: dict[str, str]
) -> list[Path]:
    """After `bench/run.py --phases ... --sections-only`: those phases of latest.json replaced (each
    stamped with when and at which commit it ran), targets recomputed, and docs/PERFORMANCE.md written
    again from it (the other phases' figures and plots as the last full run left them)."""
    latest = results_dir / "latest.json"
    merged = json.loads(latest.read_text()) if latest.exists() else {**results, "phases": {}}
    for name in phases:
        merged["phases"][name] = results["phases"][name] | {
            "run": {
                "started": results["started"],
                "commit": results.get("commit"),
                "quick": results["quick"],
                "loadavg": results.get("machine", {}).get("loadavg_at_end"),
                "note": results.get("note", ""),
            }
        }
    merged["targets"] = targets(merged)
    latest.write_text(json.dumps(merged, indent=1, sort_keys=False, default=str))
    pngs = sorted(p.resolve() for p in results_dir.glob("*.png"))
    doc.write_text(markdown(merged, paths, pngs, doc.resolve().parent))
    return [latest, doc]


def update_routing_section(routing: dict, results_dir: Path, doc: Path, paths: dict[str, str]) -> list[Path]:
    """After `bench/routing.py` on its own: the routing phase of latest.json replaced, targets recomputed,
    and docs/PERFORMANCE.md written again from it (the other phases' figures and plots as they were)."""
    latest = results_dir / "latest.json"
    if latest.exists():
        results = json.loads(latest.read_text())
    else:
        results = {
            "started": routing["started"],
            "quick": routing["quick"],
            "note": "",
            "matrix": {},
            "peers": {},
            "phases": {},
            "machine": routing.get("machine", {}),
        }
    results["phases"]["routing"] = routing
    results["targets"] = targets(results)
    latest.write_text(json.dumps(results, indent=1, sort_keys=False, default=str))
    pngs = sorted(p.resolve() for p in results_dir.glob("*.png"))
    doc.write_text(markdown(results, paths, pngs, doc.resolve().parent))
    return [latest, doc]


COLORS = {
    "engine": "#555555",
    "smg": "#8c6bb1",
    "litellm": "#e6550d",
    "api": "#3182bd",
    "web": "#31a354",
    "ws": "#17becf",
}


def plots(results: dict, out: Path, paths: dict[str, str], timeline) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    matrix = results["matrix"]
    levels = sorted({row["concurrency"] for row in matrix.values() if row.get("ttft_ms")})
    if levels:
        written += _matrix_plots(plt, matrix, levels, paths, out)
    written += _phase_plots(plt, results, out, timeline)
    plt.close("all")
    return written


def _matrix_plots(plt, matrix: dict, levels: list[int], paths: dict[str, str], out: Path) -> list[Path]:
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, q in zip(axes, ("p50", "p99"), strict=True):
        for name in paths:
            points = [
                (c, matrix[f"{name}@{c}"]["ttft_ms"][q])
                for c in levels
                if (matrix.get(f"{name}@{c}") or {}).get("ttft_ms")
            ]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=paths[name], color=COLORS.get(name))
        ax.axhline(
            60 if q == "p50" else 150,
            color="red",
            linestyle="--",
            linewidth=1,
            label=f"target at 50 streams ({60 if q == 'p50' else 150} ms)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(f"TTFT {q} (ms, log)")
        ax.set_title(f"Time to first token, {q}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, out / "ttft.png"))

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [n for n in paths if any(f"{n}@{c}" in matrix and "answers_per_s" in matrix[f"{n}@{c}"] for c in levels)]
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        xs = [j + i * width for j in range(len(levels))]
        axes[0].bar(
            xs,
            [(matrix.get(f"{name}@{c}") or {}).get("answers_per_s") or 0 for c in levels],
            width,
            label=paths[name],
            color=COLORS.get(name),
        )
        axes[1].bar(
            xs,
            [(matrix.get(f"{name}@{c}") or {}).get("cpu_ms_per_answer") or 0 for c in levels],
            width,
            label=paths[name],
            color=COLORS.get(name),
        )
    for ax, title in zip(axes, ("answers per second", "CPU ms per answer (the serving process)"), strict=True):
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(levels))], [str(c) for c in levels])
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    budget = axes[1].axhline(
        1000 / 150, color="red", linestyle="--", linewidth=1, label="6.7 ms: 150 answers/s on one core"
    )
    axes[0].axhline(150, color="red", linestyle="--", linewidth=1, label="target 150/s")
    axes[0].legend(fontsize=8)
    axes[1].legend(handles=[budget], fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, out / "throughput.png"))
    return written


def _phase_plots(plt, results: dict, out: Path, timeline) -> list[Path]:
    written = []
    steps = (results["phases"].get("readers") or {}).get("steps") or []
    if steps:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([s["readers"] for s in steps], [s["receiving"] for s in steps], marker="o", label="receiving")
        ax.plot(
            [s["readers"] for s in steps], [s["readers"] for s in steps], linestyle=":", color="gray", label="opened"
        )
        ax.set_xlabel("SSE readers opened")
        ax.set_ylabel("readers receiving")
        twin = ax.twinx()
        twin.plot(
            [s["readers"] for s in steps],
            [s["rss_mb"] for s in steps],
            marker="s",
            color="#e6550d",
            label="Daphne RSS (MB)",
        )
        twin.set_ylabel("Daphne RSS (MB)")
        ax.set_title("Open SSE readers on one Daphne process")
        ax.legend(loc="upper left", fontsize=8)
        twin.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, out / "readers.png"))

    routing = routing_plot(results["phases"].get("routing") or {}, out)
    if routing:
        written.append(routing)

    if timeline:
        fig, ax = plt.subplots(figsize=(8, 4))
        for kind, status, color, marker in (
            ("premium", "ok", "#3182bd", "o"),
            ("free", "ok", "#31a354", "o"),
            ("premium", "503", "#08519c", "x"),
            ("free", "503", "#006d2c", "x"),
        ):
            points = [(t, ms) for t, k, s, ms in timeline if k == kind and (s == status)]
            if points:
                label = f"{kind}: {'TTFT' if status == 'ok' else 'refused (time to 503)'}"
                ax.scatter(*zip(*points, strict=True), s=6, color=color, marker=marker, label=label, alpha=0.6)
        others = [(t, ms) for t, k, s, ms in timeline if s not in ("ok", "503")]
        if others:
            ax.scatter(*zip(*others, strict=True), s=10, color="red", marker="^", label="other failures")
        ax.set_yscale("log")
        ax.set_xlabel("seconds since the first send")
        ax.set_ylabel("ms (log)")
        ax.set_title("Overload: 3x capacity, half free, half premium")
        ax.legend(fontsize=7, markerscale=2)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        written.append(_save(fig, out / "overload.png"))
    return written


ROUTING_COLORS = {"ideal": "#555555", "product": "#3182bd", "smg": "#8c6bb1"}


def routing_plot(routing: dict, out: Path) -> Path | None:
    """routing.png: hit rate per routing (the ideal and 95% of it marked) and TTFT mean / p99."""
    rows = {name: row for name, row in (routing.get("rows") or {}).items() if row.get("hit_rate") is not None}
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    labels = [n.replace("smg:", "smg\n").replace("_", "_\n", 1) if n != "ideal" else "ideal\n(1 worker)" for n in names]
    colors = [ROUTING_COLORS["ideal" if n == "ideal" else "smg" if n.startswith("smg:") else "product"] for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    xs = list(range(len(names)))
    axes[0].bar(xs, [rows[n]["hit_rate"] * 100 for n in names], color=colors)
    for x, n in zip(xs, names, strict=True):
        axes[0].text(x, rows[n]["hit_rate"] * 100 + 0.5, f"{rows[n]['hit_rate'] * 100:.1f}", ha="center", fontsize=8)
    ideal = (rows.get("ideal") or {}).get("hit_rate")
    if ideal is not None:
        axes[0].axhline(ideal * 100, color="#555555", linestyle=":", linewidth=1, label="ideal")
        axes[0].axhline(ideal * 95, color="red", linestyle="--", linewidth=1, label="goal: 95% of the ideal")
        axes[0].legend(fontsize=8, loc="lower left")
    axes[0].set_ylabel("prefix-cache hit rate (%)")
    axes[0].set_title("Prefix-cache hit rate (the workers' own counters)")
    width = 0.4
    means = [((rows[n].get("ttft_ms") or {}).get("mean") or 0) for n in names]
    p99s = [((rows[n].get("ttft_ms") or {}).get("p99") or 0) for n in names]
    axes[1].bar([x - width / 2 for x in xs], means, width, label="mean", color=colors, alpha=0.6)
    axes[1].bar([x + width / 2 for x in xs], p99s, width, label="p99", color=colors)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("ms (log)")
    axes[1].set_title("Time to first token (client side): mean (light), p99 (dark)")
    for ax in axes:
        ax.set_xticks(xs, labels, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = _save(fig, out / "routing.png")
    plt.close(fig)
    return path


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path


# -- the doc -------------------------------------------------------------------------------------------


def _cell(row: dict | None, fn) -> str:
    if not row:
        return "-"
    if "skipped" in row:
        return f"skipped ({row['skipped']})"
    if "error" in row:
        return "failed"
    try:
        return fn(row)
    except (KeyError, TypeError):
        return "-"


def _fmt_errors(row: dict) -> str:
    return _errors(row["errors"]) or "0"


def _ttft_p50(row: dict) -> str:
    return f"{row['ttft_ms']['p50']:.1f} ms"


def _ttft_p50_p99(row: dict) -> str:
    return f"{row['ttft_ms']['p50']:.0f} / {row['ttft_ms']['p99']:.0f} ms"


def _answers(row: dict) -> str:
    return f"{row['answers_per_s']:.0f}"


def _cpu(row: dict) -> str:
    return "-" if row.get("cpu_ms_per_answer") is None else f"{row['cpu_ms_per_answer']:.1f}"


def _errors_of(row: dict) -> str:
    return f"{_fmt_errors(row)} of {row['requests']}"


def markdown(results: dict, paths: dict[str, str], pngs: Iterable[Path], doc_dir: Path) -> str:
    m = results.get("machine", {})
    matrix = results["matrix"]
    levels = sorted({row["concurrency"] for row in matrix.values() if "concurrency" in row})
    started = datetime.fromisoformat(results["started"])
    rel = {p.stem: Path("..") / p.relative_to(doc_dir.parent) for p in pngs}
    out = [
        "# Performance",
        "",
        f"Written by `make bench` (`bench/run.py`{' --quick' if results['quick'] else ''}) on "
        f"{started:%Y-%m-%d %H:%M} UTC at commit {results.get('commit', '?')}, in {results.get('elapsed_s', 0):.0f} s. "
        "Do not edit by hand: run it again. The raw figures are in "
        "[`bench/results/latest.json`](../bench/results/latest.json).",
        "",
        "## The machine and the conditions",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m.get('cpu', '?')}, {m.get('cores', '?')} cores |",
        f"| memory | {m.get('memory_gib', '?')} GiB |",
        f"| system | {m.get('os', '?')}, Python {m.get('python', '?')} |",
        f"| stores | PostgreSQL {m.get('postgresql', '?')}, Redis {m.get('redis', '?')} (on the same machine) |",
        f"| database connections | the product may hold {(results.get('database') or {}).get('connections_allowed', '?')} "
        f"(a role limit: the server's {m.get('postgresql_max_connections', '?')} are shared with other work) |",
        f"| product | Django {m.get('django', '?')}, Daphne {m.get('daphne', '?')}: one process, "
        "`DJANGO_PROFILE=production`, DEBUG off |",
        f"| peers | {_peers(results)} |",
        f"| load average (1, 5, 15 min) | {m.get('loadavg_at_start')} at the start, {m.get('loadavg_at_end')} at the end |",
    ]
    if results.get("note"):
        out.append(f"| note | {results['note']} |")
    out += [
        "",
        "Everything runs on this one machine: the engine, the peers, Daphne, PostgreSQL, Redis and the load "
        "generator (one asyncio process) share its cores, so the figures are what one process does with "
        "what is left, and the client's own CPU share is shown beside each row.",
        "",
        "## Targets",
        "",
        "| what | measured | target | |",
        "|---|---|---|---|",
    ]
    out += [f"| {t['name']} | {t['figure']} | {t['target']} | {_mark(t['met'])} |" for t in results["targets"]]
    analysis = Path(__file__).with_name("ANALYSIS.md")
    if analysis.exists():  # written by people, kept beside the bench: why targets are missed, what would reach them
        out += ["", analysis.read_text().strip()]
    out += [
        "",
        "## The path of one message, beside the engine and its peers",
        "",
        f"Each stream asks for a {64}-token answer (the engine answers exactly 64 tokens, at `instant` speed: "
        "it charges no time, so what is measured is the serving tier). TTFT is measured by the client: from "
        "sending the request to receiving the first content token (for the web path, from `POST /chat/api/send` "
        "to the first `delta` on the answer's SSE stream; for the WebSocket, from the `send` frame to the "
        "first `delta` frame on a connection opened beforehand). *Added* is the path's percentile minus the "
        "engine's at the same concurrency (so on a busy machine it can come out negative: the noise is "
        "larger than the difference). A level keeps that many streams in flight until its requests are "
        "sent or its time is up; requests still running 10 s after that are cut and count as timeouts. "
        "Daphne runs here with its admission limits out of the way (`ADMISSION_SOFT_LIMIT` and "
        "`ADMISSION_HARD_LIMIT` at 1,000,000), and every user is on a plan whose rate and token limits are "
        "too high to matter; each stream is its own user (session cookie, or API key for the API). The "
        "serving process's CPU time (Daphne's, or the peer's, or the engine's for the direct row) is read "
        "from /proc before and after each level.",
        "",
        "| path | TTFT p50, 1 stream (added) | TTFT p50 / p99, 50 streams | answers/s, 50 streams | "
        "CPU ms per answer, 50 streams | errors, 200 streams | errors, 1,000 streams |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, label in paths.items():
        r1, r50 = matrix.get(f"{name}@1"), matrix.get(f"{name}@50")
        r200, r1000 = matrix.get(f"{name}@200"), matrix.get(f"{name}@1000")
        peer = results["peers"].get(name)
        if peer and not peer.get("available"):
            out.append(f"| {label} | not measured: {peer.get('reason', '')} | | | | | |")
            continue
        add = added(results, name, 1, "p50") if name != "engine" else None
        out.append(
            " | ".join(
                [
                    f"| {label}",
                    _cell(r1, _ttft_p50) + (f" (+{add:.1f})" if add is not None else ""),
                    _cell(r50, _ttft_p50_p99),
                    _cell(r50, _answers),
                    _cell(r50, _cpu),
                    _cell(r200, _errors_of),
                    _cell(r1000, _errors_of),
                ]
            )
            + " |"
        )
    out += [
        "",
        "Every level:",
        "",
        "| path | streams | answered / sent | TTFT p50 / p95 / p99 (ms) | added p50 / p99 (ms) | answers/s | "
        "tokens/s | CPU ms per answer | server CPU | client CPU | DB connections | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in levels:
        for name, label in paths.items():
            row = matrix.get(f"{name}@{c}")
            if not row:
                continue
            if "skipped" in row or "error" in row:
                out.append(
                    f"| {label} | {c} | {row.get('skipped') or 'failed: ' + row.get('error', '')} | | | | | | | | | |"
                )
                continue
            t = row.get("ttft_ms") or {}
            a50, a99 = added(results, name, c, "p50"), added(results, name, c, "p99")
            out.append(
                f"| {label} | {c} | {row['ok']} / {row['requests']} | "
                f"{t.get('p50', '-')} / {t.get('p95', '-')} / {t.get('p99', '-')} | "
                f"{'-' if name == 'engine' or a50 is None else f'{a50} / {a99}'} | {row['answers_per_s']} | "
                f"{row['tokens_per_s']:.0f} | {_cpu(row)} | "
                f"{row.get('server_cpu_pct', '-')}% | {row.get('client_cpu_pct', '-')}% | "
                f"{row.get('pg_connections_peak', '-') if row.get('pg_connections_peak') is not None else '-'} | "
                f"{_fmt_errors(row)} |"
            )
    examples = {}
    for row in matrix.values():
        for status, text in (row.get("error_examples") or {}).items():
            examples.setdefault(status, text)
    if examples:
        out += ["", "What the errors said (one example each):", ""]
        out += [f"- `{status}`: {text.replace('|', '/')}" for status, text in sorted(examples.items())]
    if "ttft" in rel:
        out += ["", f"![TTFT against concurrency]({rel['ttft'].as_posix()})"]
    if "throughput" in rel:
        out += ["", f"![Answers per second and CPU per answer]({rel['throughput'].as_posix()})"]
    out += (
        _readers_md(results, rel)
        + _overload_md(results, rel)
        + _abuse_md(results)
        + _routing_md(results, rel)
        + _history_md(results)
        + _profile_md(results)
    )
    out += [
        "",
        "## Running it",
        "",
        "```sh",
        "make bench                          # about 10-15 minutes; writes bench/results/ and this file",
        'make bench BENCH_ARGS="--quick"     # fewer requests, levels 1, 50 and 200: to iterate',
        "```",
        "",
        "`bench/run.py --help` lists the options (`--levels`, `--no-peers`, `--phases`, `--note`, "
        "`--budget-minutes`). It uses its own PostgreSQL database (`sglchat_bench`, dropped and created anew) "
        "and Redis database 9 (flushed), never the tests' data; it starts the simulated engines, one Daphne "
        "process at a time, `smg` (from the `router` extra) and LiteLLM's proxy, which it installs into "
        "`bench/.peers/` on first use (git-ignored). A phase that fails or runs out of time says so in its "
        "row; logs are in `bench/results/logs/`.",
        "",
        "The routing phase is `bench/routing.py`, run by `make bench` in its own process; it also runs on its own "
        "(`.venv/bin/python bench/routing.py [--quick]`, about 6 minutes, 2 with `--quick`; it needs neither "
        "PostgreSQL nor Redis) and then rewrites only its own section of this file and its own figures in "
        "`latest.json`.",
        "",
        "Any other phase can be measured again on its own the same way: `bench/run.py --phases abuse "
        "--sections-only [--quick]` (about a minute) replaces only that section and its figures in `latest.json`.",
        "",
    ]
    return "\n".join(out)


def _peers(results: dict) -> str:
    parts = []
    for name, label in (("smg", "smg"), ("litellm", "LiteLLM")):
        peer = results["peers"].get(name) or {}
        if peer.get("available"):
            parts.append(f"{label} {peer.get('version', '')}".strip())
        else:
            parts.append(f"{label}: not measured ({peer.get('reason', 'not run')})")
    return "; ".join(parts)


def _readers_md(results: dict, rel: dict) -> list[str]:
    r = results["phases"].get("readers") or {}
    out = ["", "## Open SSE readers on one process", ""]
    if not r or "skipped" in r or ("error" in r and not r.get("steps")):
        return [*out, f"Not measured: {r.get('skipped') or r.get('error') or 'not run'}."]
    out += [
        f"{r.get('messages')} answers generate at one token a second ({r.get('engine')}); readers attach "
        "to them (several readers per answer, as several tabs would) in steps, 25 connections opening "
        "at a time. A reader counts as *receiving* if it got an event in the last 5 seconds. Memory per "
        "reader is the growth of Daphne's resident memory over the answers' own, divided by the readers "
        "receiving.",
        "",
        f"Most held: **{r.get('most_held')}** (target 2,000), "
        + (
            f"{r['kb_per_reader']} KB each"
            if r.get("kb_per_reader") is not None
            else "memory per reader not measured (no step had all its readers receiving)"
        )
        + (f"; the ramp stopped: {r['stopped']}." if r.get("stopped") else "."),
        "",
        "| readers opened | receiving | failed | seconds to open | Daphne RSS (MB) | KB per reader | Daphne CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in r.get("steps", []):
        out.append(
            f"| {s['readers']} | {s['receiving']} | {_errors(s['failed']) or 0} | {s['open_s']} | "
            f"{s['rss_mb']} | {s['kb_per_reader']} | {s['cpu_pct']}% |"
        )
    if r.get("error"):
        out += ["", f"The phase ended with an error: {r['error']}"]
    if "readers" in rel:
        out += ["", f"![Open SSE readers]({rel['readers'].as_posix()})"]
    return out


def _overload_md(results: dict, rel: dict) -> list[str]:
    o = results["phases"].get("overload") or {}
    out = ["", "## Overload: three times capacity, half free, half premium", ""]
    if "all" not in o:
        return [*out, f"Not measured: {o.get('skipped') or o.get('error') or 'not run'}."]
    offered = (
        f"{o['offered_per_s']} per second for {o['seconds']} s (set by --overload-rate)"
        if o["capacity_from"] == "--overload-rate"
        else f"{o['offered_per_s']} per second for {o['seconds']} s: three times the capacity of "
        f"{o['capacity_answers_per_s']} answers/s ({o['capacity_from']})"
    )
    out += [
        f"Sends arrive at random (Poisson) at {offered}, alternating free and "
        f"premium users, through the web path, against the engine at `realistic` speed ({o.get('engine')}), "
        f"with the product's admission limits (soft {o['admission']['soft']}, hard {o['admission']['hard']} "
        "answers in flight). Unloaded = 20 premium sends one after another just before.",
        "",
        "| class | answered / sent | TTFT p50 / p99 (ms) | refused (503) | time to refuse p50 / p99 (ms) | "
        "503 without Retry-After | other failures |",
        "|---|---|---|---|---|---|---|",
    ]
    unloaded = o.get("unloaded_premium") or {}
    out.append(f"| premium, unloaded | | {unloaded.get('p50')} / {unloaded.get('p99')} | | | | |")
    for kind in ("premium", "free"):
        row = o.get(kind) or {}
        t, ref = row.get("ttft_ms") or {}, row.get("refusals") or {}
        ms = ref.get("ms") or {}
        other = {s: n for s, n in (row.get("errors") or {}).items() if s != "503"}
        out.append(
            f"| {kind} | {row.get('ok')} / {row.get('requests')} | {t.get('p50', '-')} / {t.get('p99', '-')} | "
            f"{ref.get('count')} | {ms.get('p50', '-')} / {ms.get('p99', '-')} | "
            f"{ref.get('without_retry_after')} | {_errors(other) or 0} |"
        )
    losses = o.get("losses") or {}
    reaped = f"; the reaper ended {o['reaped']} whose runner had died" if o.get("reaped") else ""
    out += [
        "",
        f"Afterwards ({'every accepted answer ended' if o.get('drained') else 'some accepted answers never ended'}"
        f"{reaped}): "
        f"of {losses.get('accepted')} accepted sends, {losses.get('user_messages_missing')} user messages "
        f"missing, {losses.get('user_messages_changed')} changed, {losses.get('answers_not_final')} answers not "
        f"in a final state (by status: {losses.get('answers_by_status')}), "
        f"{losses.get('answers_without_ledger_row')} without a ledger row and {losses.get('extra_ledger_rows')} "
        f"extra ledger rows: **{losses.get('lost')} lost**. Answers to sends the client saw refused or "
        f"failed but still generating at that point: {losses.get('other_answers_still_active')}.",
    ]
    if "overload" in rel:
        out += ["", f"![Overload]({rel['overload'].as_posix()})"]
    return out


def _abuse_md(results: dict) -> list[str]:
    a = results["phases"].get("abuse") or {}
    out = ["", "## Abuse: one user hammering every transport at once", ""]
    if "loaded" not in a:
        return [*out, f"Not measured: {a.get('skipped') or a.get('error') or 'not run'}."]
    run = a.get("run") or {}
    if run:
        out += [
            f"Measured on its own (`bench/run.py --phases abuse --sections-only{' --quick' if run.get('quick') else ''}`) "
            f"on {datetime.fromisoformat(run['started']):%Y-%m-%d %H:%M} UTC at commit {run.get('commit', '?')}, load "
            f"average {run.get('loadavg')} at its end"
            + (f" ({run['note'].rstrip('.')})" if run.get("note") else "")
            + "; the rest of this page is from the run named at the top.",
            "",
        ]
    loops = a.get("loops") or {}
    limits = abuse_limits(a) or {}
    ratio = abuse_ratio(a)
    out += [
        f"Two windows of {a['seconds']} s against one Daphne process, the engine at `realistic` speed "
        f"({a.get('engine')}) and the product's admission limits (soft {a['admission']['soft']}, hard "
        f"{a['admission']['hard']}). In both, {a['others']} other users each send a message and read the answer "
        "over SSE, one after another. In the second, one user on the "
        f"{a['plan'].title()} plan ({a['plan_limits']['requests_per_minute']} requests a minute, "
        f"{a['plan_limits']['tokens_per_month']:,} tokens a month"
        + (
            f", {a['plan_limits']['answers_at_once']} answers at once"
            if a["plan_limits"].get("answers_at_once")
            else ""
        )
        + ") also sends as fast as it can: "
        f"{loops.get('web')} loops of `POST /chat/api/send` (not waiting for answers), {loops.get('ws')} WebSockets "
        f"and {loops.get('api')} loops of streamed API completions (each accepted answer read to its end "
        "meanwhile); on each loop the next request leaves as soon as the last is accepted or refused, never after "
        "a Retry-After. Loopback only; the exact limits are also asserted by "
        "`tests/security/test_abuse.py`.",
        "",
        "| others | answered / sent | TTFT p50 / p99 (ms) | errors | Daphne CPU | engine CPU |",
        "|---|---|---|---|---|---|",
    ]
    for window, label in (("unloaded", "alone"), ("loaded", "beside the abuser")):
        row = a[window]
        t = row.get("ttft_ms") or {}
        busy = (a.get("cpu_pct") or {}).get(window) or {}
        out.append(
            f"| {label} | {row['ok']} / {row['requests']} | {t.get('p50', '-')} / {t.get('p99', '-')} | "
            f"{_errors(row.get('errors') or {}) or 0} | {busy.get('daphne', '-')}% | {busy.get('engine', '-')}% |"
        )
    abuser = a["abuser"]
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted((abuser.get("refusal_statuses") or {}).items()))
    verdict = {True: "**met**", False: "**missed**", None: "not measured"}[None if ratio is None else ratio <= 2]
    out += [
        "",
        f"Others' p99 TTFT beside the abuser is {ratio}x what it is alone: target at most 2x, {verdict}.",
        "",
        f"The abuser sent {abuser['requests']:,} requests: accepted {abuser.get('accepted')}, refused "
        f"{abuser.get('refused')} ({statuses}; {abuser['refusals_without_retry_after']} without Retry-After). "
        f"Accepted in the user's window (page and WebSocket together): {limits.get('web_and_ws')}; "
        "in the user's API window (all keys): "
        f"{limits.get('api')}; the plan's number: {limits.get('rate')} a minute, so "
        + _abuse_limits_verdict(limits)
        + " What the refusals said (one each):",
        "",
    ]
    out += [f"- `{kind}`: {text.replace('|', '/')}" for kind, text in sorted((abuser.get("examples") or {}).items())]
    return out


def _abuse_limits_verdict(limits: dict) -> str:
    if limits.get("exact"):
        return "**exactly the plan's limits**."
    if not limits.get("within"):
        return "**more than the plan allows**."
    if limits.get("at_once_refusals"):
        return (
            f"never more than the plan's limits: {limits['at_once_refusals']} of the requests within the per-minute "
            f"number were refused because the user already had the plan's {limits.get('at_once')} answers being "
            "written at once (429), so fewer than that number were accepted."
        )
    if limits.get("busy_refusals"):
        return (
            f"never more than the plan's limits, but not exactly them: {limits['busy_refusals']} requests were "
            "refused first as busy (503, the product's overload protection), so fewer reached the limit."
        )
    return "never more than the plan's limits, but fewer were sent than it allows."


def _routing_md(results: dict, rel: dict) -> list[str]:
    r = results["phases"].get("routing") or {}
    out = ["", "## Routing across nodes: prefix-cache hit rate by policy", ""]
    if not r.get("rows"):
        return [*out, f"Not measured: {r.get('skipped') or r.get('error') or 'not run'}."]
    sc, n, g = r["scale"], r["workers"], r.get("goal_result") or {}
    started = datetime.fromisoformat(r["started"])
    verdict = {True: "**met**", False: "**missed**", None: "not measured"}[g.get("met")]
    out += [
        f"Measured by `bench/routing.py{' --quick' if r.get('quick') else ''}` (a phase of `make bench`, or run on "
        f"its own) on {started:%Y-%m-%d %H:%M} UTC at commit {r.get('commit', '?')}, in {r.get('elapsed_s', '?')} s; "
        "the figures are in [`bench/results/routing.json`](../bench/results/routing.json)."
        + (f" Note: {r['note'].rstrip('.')}." if r.get("note") else ""),
        "",
        f"The workload: {sc['users']} users, each holding one conversation of {sc['turns']} turns "
        f"({sc['concurrent']} users at a time; the next starts when one finishes), all under the same system "
        f"prompt. A user reads for {sc['think_s'][0]}-{sc['think_s'][1]} s between answers, and each answer is "
        "appended to the conversation's history before the next question, as the web chat does, so every turn's "
        "prompt begins with the whole previous turn. Temperature 0: the simulated engine's answer is a pure "
        "function of the prompt, so every row sends the same prompts and gets the same answers (equal answer "
        "digests in `routing.json`). "
        f"Against {n} simulated workers ({r['engine']}); the *ideal* is one worker with the cache of all {n} "
        f"({r['ideal_engine']}), which every turn reaches. The product's rows route each turn with "
        "`inference.routing.choose_node` and the named policy (the conversation id as the key; load samples "
        f"read from each worker's `/metrics` every {r.get('poll_seconds', 2):g} s, as the poller does; requests "
        "in flight counted through `routing.sending`/`finished`; no Redis, so the memory of warm conversations "
        "is the process's). The gateway rows go through a real `smg` in front of the same workers with the "
        "named policy (its defaults otherwise), every request carrying `X-SMG-Routing-Key: <conversation id>`.",
        "",
        "Hit rate = the workers' own `sglang:cached_tokens_total` over `sglang:prompt_tokens_total`, summed over "
        "the workers, read before and after each row; every cache is flushed (`POST /flush_cache`) before each "
        "row. TTFT is measured by the client from sending the turn (before the routing decision) to its first "
        "text. Throughput is over the row's wall time, which includes the users' reading time, so it moves "
        "little between rows; the ideal worker runs all its requests in one batch, which the simulator's "
        "timing model charges more per step than three smaller batches, so its TTFT and throughput are not an "
        "upper bound, only its hit rate is.",
        "",
        f"**Goal**: {r.get('goal')}. This run: affinity {_pct(g.get('affinity'))}"
        + (
            f", {g['share_of_ideal'] * 100:.1f}% of the ideal's {_pct(g.get('ideal'))}"
            f" ({'within' if g.get('within_5pct_of_ideal') else 'not within'} 5%)"
            if g.get("share_of_ideal") is not None
            else ""
        )
        + f"; smg `cache_aware` {_pct(g.get('smg_cache_aware'))}"
        + (
            f" ({'below' if g.get('above_smg_cache_aware') else 'not below'} affinity)"
            if g.get("above_smg_cache_aware") is not None
            else ""
        )
        + f": {verdict}.",
        "",
        "| routing | answered / sent | prefix-cache hit rate | of the ideal | TTFT mean / p99 (ms) | answers/s | "
        "tokens/s | requests per worker | evicted tokens | turns that changed node |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ideal = (r["rows"].get("ideal") or {}).get("hit_rate")
    for name, row in r["rows"].items():
        label = ROUTING_LABELS.get(name, name)
        if "skipped" in row or "error" in row:
            out.append(f"| {label} | {row.get('skipped') or 'failed: ' + row.get('error', '')} | | | | | | | | |")
            continue
        t, rate = row.get("ttft_ms") or {}, row.get("hit_rate")
        share = "-" if rate is None or not ideal else f"{rate / ideal * 100:.1f}%"
        moves = "-" if row.get("moves") is None else row["moves"]
        out.append(
            f"| {label} | {row['ok']} / {row['requests'] + row.get('not_sent', 0)} | {_pct(rate)} | {share} | "
            f"{t.get('mean', '-')} / {t.get('p99', '-')} | {row['answers_per_s']} | {row['tokens_per_s']:.0f} | "
            f"{', '.join(str(x) for x in row.get('requests_per_worker') or [])} | {row.get('evicted_tokens')} | "
            f"{moves} |"
        )
    analysis = Path(__file__).with_name("ROUTING_ANALYSIS.md")
    if analysis.exists():  # written by people after a run: why the figures are what they are
        out += ["", analysis.read_text().strip()]
    if "routing" in rel:
        out += ["", f"![Prefix-cache hit rate and TTFT by routing policy]({rel['routing'].as_posix()})"]
    return out


def _history_md(results: dict) -> list[str]:
    h = results["phases"].get("history") or {}
    out = ["", "## History at scale", ""]
    if not h or "skipped" in h or "error" in h:
        return [*out, f"Not measured: {h.get('skipped') or h.get('error') or 'not run'}."]
    q = h.get("queries") or {}
    out += [
        f"One user has {h['conversations']:,} conversations, one of them {h['messages']:,} messages long; "
        "another has 10 conversations of at most 10 messages. Each page is requested "
        f"{h['requests_each']} times in a row (after two warm-up requests). SQL queries are counted "
        "in-process, through the same views, with Django's test client.",
        "",
        "| request | history | p50 (ms) | p99 (ms) | bytes | SQL queries |",
        "|---|---|---|---|---|---|",
    ]
    for page, path in (
        ("sidebar", "`GET /chat/api/conversations`"),
        ("conversation", "`GET /chat/api/conversations/<id>`"),
    ):
        for size in ("large", "small"):
            row = h.get(f"{size}_{page}") or {}
            ms = row.get("ms") or {}
            out.append(
                f"| {path} | {size} | {ms.get('p50')} | {ms.get('p99')} | {row.get('bytes')} | "
                f"{(q.get(size) or {}).get(page)} |"
            )
    return out


def _profile_md(results: dict) -> list[str]:
    p = results["phases"].get("profile") or {}
    out = ["", "## Where Daphne's time goes: profile of the 50-stream web run", ""]
    if not p or "skipped" in p or "error" in p:
        return [*out, f"Not measured: {p.get('skipped') or p.get('error') or 'not run'}."]
    out += [
        f"py-spy sampled the Daphne process at 100 Hz for {p['seconds']} s while 50 web streams ran "
        f"({p['answers']} answers): {p['samples']} samples of busy threads ({p['busy_pct']}% of one core's "
        f"worth of samples; idle threads are not sampled). The raw stacks stay on the machine that ran it, in "
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
