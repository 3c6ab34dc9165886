"""The retrieval phase of `make bench`: the search index at 100,000 passages, on both stores.

    .venv/bin/python -m bench.retrieval [--quick] [--chunks N] [--questions N]

Generates documents with known answers (bench.retrieval.corpus: each fact, "The <thing> of <place>
is serviced every <n> days by <person>.", sits in one passage among filler; each question asks for
one fact, in words that are the fact's own or spelled differently), embeds them with the simulated
embedding model (simulator/embedding.py: lexical, hashed: what it measures is the index, not a
model's understanding), then, on each store in a process of its own (real pgvector on a pixeltable-
pgserver PostgreSQL, and SQLite with sqlite-vec, as `make run` uses it):

- indexing: passages/s through documents.search.index_chunks (rows saved in batches, then their
  vectors; PostgreSQL's HNSW and GIN indexes and SQLite's vec0 and FTS5 tables kept up as they go);
- query latency p50/p99 of documents.search.search, hybrid, over all the owner's documents;
- recall@5 on the labelled questions: vector only, full text only, hybrid.

Prints its table; figures in bench/results/retrieval.json (and in make bench's latest.json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench import report

if TYPE_CHECKING:
    from bench.run import Bench

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
STORES = ("pgvector", "sqlite")
CHUNKS_PER_DOCUMENT = 200
K = 5


def phase_seconds(quick: bool) -> int:
    return 150 if quick else 600


# -- the corpus --------------------------------------------------------------------------------------


def _words(rng: random.Random, count: int, syllables: tuple[int, int]) -> list[str]:
    parts = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "an", "ix", "pe", "qu", "zu", "bra", "ne", "fi"]
    out: set[str] = set()
    while len(out) < count:
        out.add("".join(rng.choice(parts) for _ in range(rng.randint(*syllables))))
    return sorted(out)


@dataclass(frozen=True)
class Corpus:
    #: Per document, its passages' texts.
    documents: list[list[str]]
    #: (question, document index, passage index).
    questions: list[tuple[str, int, int]]


def corpus(chunks: int, questions: int, seed: int = 21) -> Corpus:
    """Documents of CHUNKS_PER_DOCUMENT passages; one passage in four states a fact, the rest are filler
    made of the same vocabulary. Questions ask for facts picked at random: half in the fact's own
    words, half with the thing's and the place's names spelled differently (a suffix), which full
    text does not match and the vectors' word pieces do."""
    rng = random.Random(seed)
    things = _words(rng, 400, (2, 3))
    places = _words(rng, 2000, (3, 4))
    people = _words(rng, 300, (2, 3))
    filler = _words(rng, 3000, (1, 3))
    documents: list[list[str]] = []
    facts: list[tuple[str, str, int, int]] = []
    for d in range(max(1, chunks // CHUNKS_PER_DOCUMENT)):
        passages = []
        for p in range(CHUNKS_PER_DOCUMENT):
            noise = " ".join(rng.choice(filler) for _ in range(rng.randint(25, 45)))
            if p % 4 == 0:
                thing, place, person = rng.choice(things), rng.choice(places), rng.choice(people)
                days = rng.randint(2, 90)
                passages.append(
                    f"{noise[:80]}. The {thing} of {place} is serviced every {days} days by {person}. {noise[80:]}."
                )
                facts.append((thing, place, d, p))
            else:
                passages.append(noise + ".")
        documents.append(passages)
    asked = []
    for i, (thing, place, d, p) in enumerate(rng.sample(facts, min(questions, len(facts)))):
        if i % 2:  # in other words: the names spelled as adjectives or plurals, which full text does not match
            thing, place = thing + rng.choice(("ing", "ers", "ation")), place + rng.choice(("ian", "ese", "ish"))
        asked.append((f"How often is the {thing} of {place} serviced?", d, p))
    return Corpus(documents, asked)


# -- one store, in its own process ---------------------------------------------------------------------


def measure(store: str, chunks: int, questions: int, vectors_file: Path) -> dict:
    """In a process whose DATABASE_URL is the store's: migrate, index, query."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0, interactive=False)
    from accounts.models import User
    from documents import search
    from documents.models import Chunk, Document
    from simulator.embedding import embed_text

    data = corpus(chunks, questions)
    dimensions = settings.RETRIEVAL_EMBEDDING_DIMENSIONS
    vectors = array("f")
    vectors.frombytes(vectors_file.read_bytes())
    owner = User.objects.create_user(email=f"retrieval-{time.time_ns()}@bench.invalid", password=None)
    documents = []
    indexing = 0.0
    row = 0
    for d, passages in enumerate(data.documents):
        document = Document.objects.create(owner=owner, name=f"doc-{d}.md", file=f"documents/bench/doc-{d}.md")
        documents.append(document)
        started = time.perf_counter()
        saved = Chunk.objects.bulk_create(
            Chunk(document=document, owner=owner, ordinal=p, page=p // 4 + 1, text=text)
            for p, text in enumerate(passages)
        )
        flat = vectors[row * dimensions : (row + len(passages)) * dimensions].tolist()
        search.index_chunks(saved, [flat[i : i + dimensions] for i in range(0, len(flat), dimensions)])
        indexing += time.perf_counter() - started
        row += len(passages)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE documents_chunk")
    ids = [d.pk for d in documents]
    answers = {(d, p): Chunk.objects.get(document=documents[d], ordinal=p).pk for _, d, p in data.questions}
    methods = {"hybrid": (search.VECTOR, search.TEXT), "vector": (search.VECTOR,), "text": (search.TEXT,)}
    found = dict.fromkeys(methods, 0)
    times: dict[str, list[float]] = {name: [] for name in methods}
    for question, d, p in data.questions:
        vector = embed_text(question, dimensions)
        for name, by in methods.items():
            started = time.perf_counter()
            passages = search.search(owner.pk, ids, question, vector, K, by=by)
            times[name].append(time.perf_counter() - started)
            found[name] += answers[(d, p)] in [passage.chunk_id for passage in passages]
    asked = len(data.questions)
    return {
        "store": store,
        "chunks": row,
        "documents": len(documents),
        "indexing_chunks_per_s": round(row / indexing, 1),
        "questions": asked,
        "latency_ms": {name: report.percentiles(values) for name, values in times.items()},
        "recall_at_5": {name: round(found[name] / asked, 3) for name in methods},
    }


# -- the phase -----------------------------------------------------------------------------------------


def run_all(chunks: int, questions: int) -> dict:
    """Embed the corpus once, then measure each store in a child process."""
    from harness.pgvector_server import pgvector_server
    from simulator.embedding import embed_text

    dimensions = int(os.environ.get("RETRIEVAL_EMBEDDING_DIMENSIONS", "384"))
    data = corpus(chunks, questions)
    started = time.perf_counter()
    vectors = array("f")
    for passages in data.documents:
        for text in passages:
            vectors.extend(embed_text(text, dimensions))
    result: dict = {
        "chunks": len(vectors) // dimensions,
        "questions": len(data.questions),
        "embedding_s": round(time.perf_counter() - started, 1),
    }
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as work:
        work_dir = Path(work)
        vectors_file = work_dir / "vectors.f32"
        vectors_file.write_bytes(vectors.tobytes())
        stores = {}
        with pgvector_server(work_dir / "pgvector") as pg_url:
            urls = {"pgvector": pg_url, "sqlite": f"sqlite:///{work_dir / 'retrieval.sqlite3'}"}
            for store in STORES:
                out = work_dir / f"{store}.json"
                env = {
                    **os.environ,
                    "DATABASE_URL": urls[store],
                    "DJANGO_PROFILE": "development",
                    "DEBUG": "false",
                    "REDIS_URL": "",
                    "EMBEDDED_BEAT": "false",
                }
                argv = [sys.executable, "-m", "bench.retrieval", "--store", store, "--chunks", str(chunks)]
                argv += ["--questions", str(questions), "--vectors", str(vectors_file), "--out", str(out)]
                done = subprocess.run(argv, cwd=ROOT, env=env, check=False, capture_output=True, text=True)
                if out.exists():
                    stores[store] = json.loads(out.read_text())
                else:
                    stores[store] = {"error": f"exited with {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
                print(line(store, stores[store]), flush=True)
    result["stores"] = stores
    return result


def run(bench: Bench) -> None:
    chunks, questions = (20_000, 100) if bench.args.quick else (100_000, 200)
    bench.log(f"\nretrieval: {chunks} passages, {questions} questions, on {' and '.join(STORES)}")
    bench.log(header())
    bench.results["phases"]["retrieval"] = run_all(chunks, questions)


# -- its console text, targets and part of the doc ---------------------------------------------------------


def header() -> str:
    return (
        f"{'store':10} {'passages':>9} {'index/s':>8} {'hybrid p50':>11} {'p99':>7} "
        f"{'R@5 vector':>11} {'text':>6} {'hybrid':>7}"
    )


def line(store: str, row: dict) -> str:
    if "error" in row:
        return f"{store:10} {row['error']}"
    ms = row["latency_ms"]["hybrid"]
    recall = row["recall_at_5"]
    return (
        f"{store:10} {row['chunks']:>9} {row['indexing_chunks_per_s']:>8.0f} {ms['p50']:>9.1f}ms {ms['p99']:>5.1f}ms "
        f"{recall['vector']:>11.2f} {recall['text']:>6.2f} {recall['hybrid']:>7.2f}"
    )


def targets(retrieval: dict) -> list[dict]:
    """Hybrid's p99 under 100 ms and its recall@5 at least each search's alone, per store."""
    out = []
    for store, row in (retrieval.get("stores") or {}).items():
        if "error" in row:
            continue
        p99 = row["latency_ms"]["hybrid"]["p99"]
        recall = row["recall_at_5"]
        out.append(
            report.target(
                f"retrieval p99, hybrid, {row['chunks']:,} passages ({store})", f"{p99:.1f} ms", "< 100 ms", p99 < 100
            )
        )
        best_alone = max(recall["vector"], recall["text"])
        out.append(
            report.target(
                f"retrieval recall@5 ({store}): hybrid vs the best search alone",
                f"{recall['hybrid']:.2f} vs {best_alone:.2f}",
                ">=",
                recall["hybrid"] >= best_alone,
            )
        )
    return out


def markdown(results: dict, rel: dict[str, Path]) -> list[str]:
    retrieval = results["phases"].get("retrieval")
    if not retrieval:
        return []
    out = [
        "",
        "## Retrieval",
        "",
        f"{retrieval.get('chunks', '?'):,} generated passages ({CHUNKS_PER_DOCUMENT} per document) with "
        f"{retrieval.get('questions', '?')} labelled questions (`bench/retrieval.py`), one owner, every search "
        "over all their documents; vectors from the simulated embedding model (lexical: this measures the "
        "index, not a model). Latency is documents.search.search in-process, k = 5.",
        "",
        "| store | passages | indexed/s | hybrid p50 | hybrid p99 | vector p50 | text p50 | recall@5 vector | text | hybrid |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for store, row in (retrieval.get("stores") or {}).items():
        if "error" in row:
            out.append(f"| {store} | failed: {row['error']} | | | | | | | | |")
            continue
        ms, recall = row["latency_ms"], row["recall_at_5"]
        out.append(
            f"| {store} | {row['chunks']:,} | {row['indexing_chunks_per_s']:,.0f} | {ms['hybrid']['p50']:.1f} ms | "
            f"{ms['hybrid']['p99']:.1f} ms | {ms['vector']['p50']:.1f} ms | {ms['text']['p50']:.1f} ms | "
            f"{recall['vector']:.2f} | {recall['text']:.2f} | {recall['hybrid']:.2f} |"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chunks", type=int)
    parser.add_argument("--questions", type=int)
    parser.add_argument("--store", choices=STORES, help=argparse.SUPPRESS)  # a child: measure one store
    parser.add_argument("--vectors", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    chunks = args.chunks or (20_000 if args.quick else 100_000)
    questions = args.questions or (100 if args.quick else 200)
    if args.store:
        args.out.write_text(json.dumps(measure(args.store, chunks, questions, args.vectors)))
        return 0
    print(header(), flush=True)
    result = run_all(chunks, questions)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "retrieval.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
