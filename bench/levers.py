"""The levers phase of `make bench` (issue 22): how much engine work the response cache, the semantic cache
and Auto avoid on a mixed workload replayed through the product, at what risk.

**The workload** (written down here, the same for every set-up): USERS people, each with a program that
calls `/v1/chat/completions` (streamed, temperature 0, at most ANSWER_TOKENS tokens), one request after
another, the people at once. Each person, in this order (shuffled by a fixed seed within each part):
- 4 first questions from a pool of common ones (FAQ), which other people ask too;
- 2 first questions of their own (NOVEL);
- 2 short conversations: a first question of their own, then a follow-up with the history;
- 1 long document (a report of about 3,400 words) to summarise;
- then again: 2 of their FAQ questions word for word, and 2 in other words (PARAPHRASES).
So 15 requests a person, of which 4 could be answered without the engine (a repeat or a paraphrase of
the person's own earlier question); a first ask of anyone else's question must never be (the cross-tenant
count). The engine is the simulated worker at the `realistic` speed, answers of ANSWER_TOKENS tokens.

**Set-ups**: no lever (every request on the large model); the response cache; the response cache and the
semantic cache (threshold THRESHOLD, the person scope); Auto alone (model `auto`: the small or the large
model, target share 30%); all three. Redis and the engine's prefix cache are emptied between set-ups.

**Engine work** is read from the product's ledger (exact): per model, uncached prompt tokens and completion
tokens of the answers an engine wrote. **GPU-seconds** apply the simulator's `realistic` timing model to
them (an 8B-class model on one GPU: 50 µs per uncached prompt token, 0.46 ms per completion token at a
batch of 32) for the small model, and LARGE_COST times that for the large one (a 70B-class model): an
estimate from token counts, not a measurement of a GPU.

**The labelled set**: PAIRS of questions, each labelled a paraphrase (the same question: a hit is right)
or a near miss (another question that shares most words: a hit is wrong). Each pair is asked by a person
of its own (the first question, then the second) in the semantic set-up; the wrong-hit rate is the share
of near misses answered from the cache, the recall the share of paraphrases. The simulated embedding
worker's vectors are word hashes, not meaning (simulator/embedding.py): these rates say how the product's
guards and threshold behave on such vectors, not how a real embedding model would.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING

import httpx

from bench import data, procs, report
from harness.engines import start_simulator

if TYPE_CHECKING:
    from bench.run import Bench

USERS = 12
ANSWER_TOKENS = 96
THRESHOLD = 0.9
#: The large model's GPU time per token, as a multiple of the small one's.
LARGE_COST = 6.0
#: The simulator's `realistic` preset: seconds per uncached prompt token, and per completion token at a
#: batch of 32 (its step of 11 ms shared by 32 requests, plus 0.12 ms per request).
PREFILL_S, DECODE_S = 0.00005, 0.011 / 32 + 0.00012
EMBED = "sim-embed"
SMALL, LARGE = "sim-small", "sim-large"

FAQ = [
    ("How do I reset my password?", "What's the way to reset my password?"),
    ("What is the capital of Australia?", "Which city is the capital of Australia?"),
    ("How many days are in a leap year?", "How many days does a leap year have?"),
    ("What does HTTP stand for?", "What does the abbreviation HTTP stand for?"),
    ("How do I convert Celsius to Fahrenheit?", "How can I convert Celsius into Fahrenheit?"),
    (
        "What is the difference between a list and a tuple in Python?",
        "What's the difference between a tuple and a list in Python?",
    ),
    ("How long should I boil an egg?", "How long do I boil an egg for?"),
    ("What is photosynthesis?", "What is photosynthesis, briefly?"),
    ("Who wrote Pride and Prejudice?", "Who is the author of Pride and Prejudice?"),
    ("What is the speed of light?", "What's the speed of light?"),
    ("How do I undo the last git commit?", "How can I undo my last git commit?"),
    ("What is a prime number?", "What's a prime number?"),
]
NOVEL_TOPICS = [
    "a garden in a small courtyard",
    "learning the cello at forty",
    "a bakery's opening week",
    "a cycling trip along the Loire",
    "teaching fractions to a ten-year-old",
    "a home network with two routers",
    "a book club's first meeting",
    "saving for a first flat",
    "a team retrospective after a failed launch",
    "a dog that pulls on the lead",
    "a science fair project on plants",
    "moving a blog to a new host",
    "a wedding speech for a brother",
    "a budget for a week in Japan",
    "a vegetable soup for twelve",
    "a podcast about local history",
    "a study timetable for exams",
    "a cover letter for a library job",
]
FOLLOW_UP = "Thanks. Can you give one concrete example of that?"
DOCUMENT = "Quarterly operations report. " + " ".join(
    f"Section {n}: the team reviewed throughput, staffing, supplier delays and customer feedback for region {n}, "
    "noting that delivery times improved while returns rose slightly after the packaging change."
    for n in range(1, 121)
)
PAIRS = [
    ("How do I reset my password?", "What's the way to reset my password?", True),
    ("What is the capital of Australia?", "Which city is the capital of Australia?", True),
    ("How many days are in a leap year?", "How many days does a leap year have?", True),
    ("How do I undo the last git commit?", "How can I undo my last git commit?", True),
    ("What is a prime number?", "What's a prime number?", True),
    ("Who wrote Pride and Prejudice?", "Who is the author of Pride and Prejudice?", True),
    ("How do I reverse a list in Python?", "How can I reverse a list in Python?", True),
    ("What does CPU stand for?", "What does the abbreviation CPU stand for?", True),
    ("What is the boiling point of water?", "What's the boiling point of water?", True),
    ("How long should I boil an egg?", "How long do I boil an egg for?", True),
    ("What is the capital of Australia?", "What is the capital of Austria?", False),
    ("How do I reverse a list in Python?", "How do I sort a list in Python?", False),
    ("What is 12 times 7?", "What is 12 times 8?", False),
    ("What is 10 divided by 2?", "What is 2 divided by 10?", False),
    ("How many days are in a leap year?", "How many weeks are in a leap year?", False),
    ("Who wrote Pride and Prejudice?", "Who wrote Sense and Sensibility?", False),
    ("How do I reset my password?", "How do I reset my router?", False),
    ("What is the boiling point of water?", "What is the freezing point of water?", False),
    ("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?", False),
    ("Which foods contain vitamin C?", "Which foods do not contain vitamin C?", False),
    ("What is the speed of light?", "What is the speed of sound?", False),
    ("How do I undo the last git commit?", "How do I undo the last git push?", False),
]
#: (name, model, response cache, semantic cache).
SETUPS = [
    ("no lever", LARGE, False, False),
    ("response cache", LARGE, True, False),
    ("response + semantic cache", LARGE, True, True),
    ("Auto", "auto", False, False),
    ("all three", "auto", True, True),
]
BASELINE = "no lever"


def phase_seconds(quick: bool) -> float:
    return 60 * len(SETUPS) + 30


def workload(user: int) -> list[dict]:
    """The requests of person `user`, in order: each a dict of messages and its kind."""
    rng = random.Random(user)
    faq = rng.sample(range(len(FAQ)), 4)
    topics = rng.sample(NOVEL_TOPICS, 4)
    first = [{"kind": "faq", "messages": [_user(FAQ[i][0])]} for i in faq]
    first += [
        {"kind": "novel", "messages": [_user(f"Give me three tips for {t} (person {user}).")]} for t in topics[:2]
    ]
    for topic in topics[2:]:
        question = f"What should I think about first for {topic} (person {user})?"
        first.append({"kind": "conversation", "messages": [_user(question)], "follow_up": FOLLOW_UP})
    first.append({"kind": "document", "messages": [_user(DOCUMENT + "\n\nSummarise the key points of this report.")]})
    rng.shuffle(first)
    again = [{"kind": "repeat", "messages": [_user(FAQ[i][0])]} for i in faq[:2]]
    again += [{"kind": "paraphrase", "messages": [_user(FAQ[i][1])]} for i in faq[2:]]
    rng.shuffle(again)
    return first + again


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


async def _ask(client: httpx.AsyncClient, key: str, model: str, messages: list[dict]) -> dict:
    """One streamed completion: its x-cache, time to first token, and text."""
    body = {"model": model, "messages": messages, "temperature": 0, "max_tokens": ANSWER_TOKENS, "stream": True}
    started = time.perf_counter()
    first = None
    parts: list[str] = []
    async with client.stream(
        "POST", "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as response:
        if response.status_code != 200:
            await response.aread()
            return {"status": response.status_code, "cache": "", "ttft": None, "text": response.text[:200]}
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content"' in line:
                if first is None:
                    first = time.perf_counter() - started
                parts.append(line)
    return {"status": 200, "cache": response.headers.get("x-cache", ""), "ttft": first, "text": "".join(parts)}


async def _person(url: str, key: str, model: str, requests: list[dict]) -> list[dict]:
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for request in requests:
            got = await _ask(client, key, model, request["messages"])
            out.append({"kind": request["kind"], **got})
            if request.get("follow_up") and got["status"] == 200:
                history = [*request["messages"], {"role": "assistant", "content": "(the answer above)"}]
                follow = await _ask(client, key, model, [*history, _user(request["follow_up"])])
                out.append({"kind": "follow-up", **follow})
    return out


async def _replay(url: str, accounts: list, model: str) -> list[dict]:
    done = await asyncio.gather(*(_person(url, a.api_key, model, workload(n)) for n, a in enumerate(accounts)))
    return [row for rows in done for row in rows]


async def _pairs(url: str, accounts: list, model: str) -> list[dict]:
    async def one(account, pair) -> dict:
        first, second, same = pair
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            await _ask(client, account.api_key, model, [_user(first)])
            got = await _ask(client, account.api_key, model, [_user(second)])
        return {"same": same, "hit": got["cache"] == "semantic-hit", "status": got["status"]}

    return list(await asyncio.gather(*(one(a, p) for a, p in zip(accounts, PAIRS, strict=True))))


def _engine_work(since) -> dict:
    """Per model, from the ledger: uncached prompt and completion tokens the engines wrote, and answers
    served from a cache."""
    from django.db.models import Count, F, Q, Sum

    from billing.models import UsageRecord

    rows = (
        UsageRecord.objects.filter(created__gte=since, api_key_id__isnull=False)
        .values("model")
        .annotate(
            prefill=Sum(F("prompt_tokens") - F("cached_tokens"), filter=Q(from_cache=False), default=0),
            decode=Sum("completion_tokens", filter=Q(from_cache=False), default=0),
            engine=Count("pk", filter=Q(from_cache=False)),
            cached=Count("pk", filter=Q(from_cache=True)),
        )
    )
    return {row["model"]: {k: row[k] for k in ("prefill", "decode", "engine", "cached")} for row in rows}


def gpu_seconds(work: dict) -> float:
    total = 0.0
    for model, w in work.items():
        cost = LARGE_COST if model == LARGE else 1.0
        total += cost * (w["prefill"] * PREFILL_S + w["decode"] * DECODE_S)
    return total


def _set_policy(semantic: bool) -> None:
    from chat.models import SemanticCachePolicy

    SemanticCachePolicy.objects.all().delete()
    SemanticCachePolicy.objects.create(enabled=semantic, threshold=THRESHOLD)


def cross_validated(folds: int = 5) -> dict:
    """Auto's difficulty estimate against the labels of turns it was not fitted on: each fold of the
    labelled examples (shuffled by a fixed seed) scored by an estimate fitted on the others."""
    from chat.generation import difficulty

    examples = difficulty.labelled()
    order = list(range(len(examples)))
    random.Random(0).shuffle(order)
    right = 0
    for fold in range(folds):
        held = set(order[fold::folds])
        fitted = difficulty.Estimate.fitted([e for i, e in enumerate(examples) if i not in held])
        right += sum((fitted.score(examples[i][0]) >= 0.5) == examples[i][1] for i in held)
    return {"examples": len(examples), "folds": folds, "agreement": right / len(examples)}


def run(bench: Bench) -> None:
    from django.utils import timezone

    result: dict = {"users": USERS, "answer_tokens": ANSWER_TOKENS, "threshold": THRESHOLD, "setups": {}}
    result["difficulty"] = cross_validated()
    bench.log(f"\nLevers: engine work avoided on a mixed workload ({USERS} people x 15 requests, streamed)")
    accounts = data.create_accounts("levers", USERS * len(SETUPS), "bench-premium")
    pair_accounts = data.create_accounts("pairs", len(PAIRS), "bench-premium")
    engine = embedder = None
    try:
        engine = bench.start(
            procs.start_engine("realistic", ANSWER_TOKENS, "--max-running-requests", "256", "--accept-any-model")
        )
        embedder = bench.start(
            start_simulator(
                "--is-embedding",
                "--served-model-name",
                EMBED,
                "--context-length",
                "512",
                "--log-level",
                "warning",
                speed="instant",
                ready_timeout=60,
            )
        )
        for n, (name, model, exact, semantic) in enumerate(SETUPS):
            data.flush_redis(bench.args.redis_url)
            # Each set-up starts with the engine's prefix cache empty (SGLang's /flush_cache), as with Redis.
            httpx.post(engine.url + "/flush_cache", timeout=30).raise_for_status()
            _set_policy(semantic)
            env = bench.product_env(engine.url) | {
                "RESPONSE_CACHE_ENABLED": "true" if exact or semantic else "false",
                "INFERENCE_AUTO_MODEL": f"{SMALL},{LARGE}",
                "INFERENCE_MODELS": f"{SMALL}=Simulated Small,{LARGE}=Simulated Large",
                "INFERENCE_MODEL_CONTEXT_TOKENS": f"{SMALL}=2048,{EMBED}=512",
                "INFERENCE_EMBEDDING_MODELS": f"{EMBED}=Simulated Embeddings",
                "SGLANG_EMBEDDING_URL": embedder.url,
                "RETRIEVAL_EMBEDDING_MODEL": EMBED,
            }
            daphne = bench.start(procs.start_daphne(env, f"levers-{n}"))
            try:
                since = timezone.now()
                began = time.perf_counter()
                people = accounts[n * USERS : (n + 1) * USERS]
                rows = asyncio.run(_replay(daphne.url, people, model))
                cell = _cell(rows, _engine_work(since), time.perf_counter() - began)
                if semantic and model != "auto":
                    cell["pairs"] = _pair_rates(asyncio.run(_pairs(daphne.url, pair_accounts, model)))
            except Exception as exc:
                cell = {"error": bench.failure(exc)}
            finally:
                bench.stop(daphne)
            result["setups"][name] = cell
            bench.log("  " + line(name, cell, result["setups"].get(BASELINE)))
    except Exception as exc:
        result["error"] = bench.failure(exc)
        bench.log(f"  not measured: {result['error']}")
    finally:
        for process in (embedder, engine):
            bench.stop(process)
    bench.results["phases"]["levers"] = result


def _cell(rows: list[dict], work: dict, seconds: float) -> dict:
    answered = [r for r in rows if r["status"] == 200]
    hits = [r for r in answered if r["cache"] in ("hit", "semantic-hit")]
    cross = [r for r in hits if r["kind"] not in ("repeat", "paraphrase")]  # a first ask served from a cache
    misses = [r["ttft"] for r in answered if r["cache"] not in ("hit", "semantic-hit") and r["ttft"] is not None]
    hit_ttft = [r["ttft"] for r in hits if r["ttft"] is not None]
    small = (work.get(SMALL) or {}).get("engine", 0)
    engine_answers = sum(w["engine"] for w in work.values())
    return {
        "requests": len(rows),
        "answered": len(answered),
        "errors": len(rows) - len(answered),
        "exact_hits": sum(1 for r in hits if r["cache"] == "hit"),
        "semantic_hits": sum(1 for r in hits if r["cache"] == "semantic-hit"),
        "cross_tenant_hits": len(cross),
        "engine_tokens": sum(w["prefill"] + w["decode"] for w in work.values()),
        "gpu_seconds": round(gpu_seconds(work), 2),
        "small_share": small / engine_answers if engine_answers else 0.0,
        "ttft_hit_ms": _median_ms(hit_ttft),
        "ttft_engine_ms": _median_ms(misses),
        "seconds": round(seconds, 1),
        "work": work,
    }


def _pair_rates(rows: list[dict]) -> dict:
    near = [r for r in rows if not r["same"]]
    same = [r for r in rows if r["same"]]
    return {
        "near_misses": len(near),
        "wrong_hits": sum(r["hit"] for r in near),
        "paraphrases": len(same),
        "right_hits": sum(r["hit"] for r in same),
        "errors": sum(r["status"] != 200 for r in rows),
    }


def _median_ms(seconds: list[float]) -> float | None:
    """The bench's nearest-rank p50 (bench.report), in ms."""
    return round(report.percentile(seconds, 0.50) * 1000, 1) if seconds else None


def saved(cell: dict, baseline: dict | None, field: str = "gpu_seconds") -> float | None:
    if not baseline or "error" in cell or "error" in baseline or not baseline.get(field):
        return None
    return 1 - cell[field] / baseline[field]


def line(name: str, cell: dict, baseline: dict | None) -> str:
    if "error" in cell:
        return f"{name:<26} failed: {cell['error']}"
    avoided = saved(cell, baseline)
    pairs = cell.get("pairs")
    extra = (
        f"; labelled pairs: {pairs['wrong_hits']}/{pairs['near_misses']} near misses hit, "
        f"{pairs['right_hits']}/{pairs['paraphrases']} paraphrases"
        if pairs
        else ""
    )
    return (
        f"{name:<26} {cell['answered']}/{cell['requests']} answered, hits {cell['exact_hits']} exact + "
        f"{cell['semantic_hits']} semantic (cross-tenant {cell['cross_tenant_hits']}), engine tokens "
        f"{cell['engine_tokens']}, GPU-s {cell['gpu_seconds']}"
        f"{'' if avoided is None else f' ({avoided:.0%} avoided)'}, small model {cell['small_share']:.0%}{extra}"
    )


def targets(levers: dict) -> list[dict]:
    setups = levers.get("setups") or {}
    base, everything = setups.get(BASELINE), setups.get("all three") or {}
    avoided = saved(everything, base) if everything else None
    cross = sum(c.get("cross_tenant_hits", 0) for c in setups.values() if "error" not in c) if setups else None
    pairs = (setups.get("response + semantic cache") or {}).get("pairs")
    wrong = pairs["wrong_hits"] / pairs["near_misses"] if pairs and pairs["near_misses"] else None
    return [
        report.target(
            "engine work (GPU-seconds) avoided by all three levers, mixed workload",
            "not measured" if avoided is None else f"{avoided:.0%}",
            ">= 30%",
            None if avoided is None else avoided >= 0.30,
        ),
        report.target(
            "answers served from another person's question",
            "not measured" if cross is None else str(cross),
            "0",
            None if cross is None else cross == 0,
        ),
        report.target(
            "wrong semantic hits on the labelled near misses (simulated embeddings)",
            "not measured" if wrong is None else f"{wrong:.1%} ({pairs['wrong_hits']} of {pairs['near_misses']})",
            "< 1%",
            None if wrong is None else wrong < 0.01,
        ),
    ]


def markdown(results: dict) -> list[str]:
    levers = results["phases"].get("levers") or {}
    out = ["", "## Levers: engine work avoided on a mixed workload", ""]
    setups = levers.get("setups") or {}
    if not setups:
        return [*out, f"Not measured: {levers.get('skipped') or levers.get('error') or 'not run'}."]
    out += [
        f"{USERS} people each send 15 requests through `/v1/chat/completions` (streamed, temperature 0, "
        f"{ANSWER_TOKENS}-token answers): 4 common questions others ask too, 2 questions of their own, 2 short "
        "conversations (a question, then a follow-up with its history), a 3,400-word report to summarise, "
        "then 2 of their common questions again word for word and 2 in other words (bench/levers.py has the "
        f"whole mix). GPU-seconds apply the simulator's `realistic` timing to the ledger's uncached prompt and "
        f"completion tokens, {LARGE_COST:g} times that for the large model: an estimate, not a GPU's measure. "
        f"The semantic cache's threshold is {THRESHOLD} (the simulated embeddings are word hashes).",
        "",
        "| set-up | answered | exact hits | semantic hits | cross-tenant hits | engine tokens | GPU-s | avoided | "
        "small model's share | TTFT of hits / of engine answers (ms, median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = setups.get(BASELINE)
    for name, cell in setups.items():
        if "error" in cell:
            out.append(f"| {name} | failed: {cell['error']} | | | | | | | | |")
            continue
        avoided = saved(cell, base)
        out.append(
            f"| {name} | {cell['answered']}/{cell['requests']} | {cell['exact_hits']} | {cell['semantic_hits']} | "
            f"{cell['cross_tenant_hits']} | {cell['engine_tokens']:,} | {cell['gpu_seconds']} | "
            f"{'-' if avoided is None else f'{avoided:.0%}'} | {cell['small_share']:.0%} | "
            f"{cell['ttft_hit_ms'] if cell['ttft_hit_ms'] is not None else '-'} / "
            f"{cell['ttft_engine_ms'] if cell['ttft_engine_ms'] is not None else '-'} |"
        )
    pairs = (setups.get("response + semantic cache") or {}).get("pairs")
    if pairs:
        out += [
            "",
            f"Labelled pairs ({len(PAIRS)}, each asked by a person of its own): {pairs['wrong_hits']} of "
            f"{pairs['near_misses']} near misses answered from the cache (wrong hits), {pairs['right_hits']} of "
            f"{pairs['paraphrases']} paraphrases (right hits). With word-hash vectors a paraphrase that changes "
            "several words falls under the threshold. Near misses that differ in a number, an operation, a "
            'negation or a prepositional object ("of Australia", "to Celsius") are in other groups and '
            'never compared; those that differ in another word ("boiling" and "freezing") are kept apart '
            "by the threshold alone.",
        ]
    if estimate := levers.get("difficulty"):
        out += [
            "",
            f"Auto's difficulty estimate agrees with the labels of {estimate['agreement']:.0%} of the "
            f"{estimate['examples']} labelled example turns when each is scored by an estimate fitted on the others "
            f"({estimate['folds']}-fold cross-validation). The labels were written for this product: agreement "
            "says the features separate them, not that the small model answers the easy ones as well.",
        ]
    if setups.get("Auto"):
        out += [
            "",
            "What Auto saves here rests on the large model costing "
            f"{LARGE_COST:g} times the small one per token (an assumption, stated) and on the difficulty "
            "estimate's share; what it costs in quality the simulated engines cannot show (they write the same "
            "kind of text on both models): in production the console's escalations and thumbs per model say it.",
        ]
    return out
