"""Benchmark the simulated SGLang worker through the product's client; prints two tables.

1. Time to first token with and without a prefix-cache hit (a long shared system prompt).
2. Time to first token, inter-token latency and throughput against concurrency.

    .venv/bin/python -m bench.bench_simulator [--speed realistic] [--levels 1 4 16 64] [--tokens 128]

Numbers are the simulator's timing model as seen through HTTP and the client (see docs/inference.md),
not measurements of a GPU; what they show is the shape: cache hits cut TTFT by the prefill they save,
and TTFT and inter-token latency grow with the batch.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time

from harness.engines import start_simulator
from inference.client import GenerationRequest, SGLangClient, Timeouts

SYSTEM = (
    "You are the assistant of a harbor office. You answer questions about tides, berths, pilots and the "
    "weather, briefly and in plain words, and you say so when you do not know. "
) * 40


async def one(client: SGLangClient, messages: list[dict], tokens: int) -> dict:
    """Send one request; time its first token and the gaps after it."""
    start = time.perf_counter()
    first = None
    stamps: list[float] = []
    usage = None
    async for event in client.generate_stream(
        GenerationRequest(messages=messages, max_new_tokens=tokens, temperature=0)
    ):
        now = time.perf_counter()
        if event.text:
            first = first if first is not None else now
            stamps.append(now)
        usage = event.usage or usage
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return {
        "ttft": (first or time.perf_counter()) - start,
        "itl": statistics.mean(gaps) if gaps else 0.0,
        "end": time.perf_counter() - start,
        "completion": usage.completion_tokens if usage else 0,
        "prompt": usage.prompt_tokens if usage else 0,
        "cached": usage.cached_tokens if usage else 0,
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


async def cache_table(url: str, trials: int) -> None:
    import httpx

    print("\nTTFT with and without a prefix-cache hit (same system prompt, different questions)")
    print(f"{'trial':>5} {'prompt':>7} {'cached':>7} {'cold ms':>8} {'warm ms':>8}")
    async with SGLangClient(url, timeouts=Timeouts(first_token=120)) as client:
        for trial in range(trials):
            httpx.post(f"{url}/flush_cache", timeout=10)
            system = f"Session {trial}. {SYSTEM}"
            cold = await one(
                client, [{"role": "system", "content": system}, {"role": "user", "content": "When is high tide?"}], 8
            )
            warm = await one(
                client,
                [{"role": "system", "content": system}, {"role": "user", "content": "Which berth is free tomorrow?"}],
                8,
            )
            print(f"{trial:>5} {warm['prompt']:>7} {warm['cached']:>7} {ms(cold['ttft'])} {ms(warm['ttft'])}")


async def concurrency_table(url: str, levels: list[int], tokens: int) -> None:
    import httpx

    print(f"\nConcurrency ({tokens} output tokens each, no shared prefix)")
    print(f"{'conc':>5} {'TTFT p50':>9} {'TTFT p95':>9} {'ITL ms':>8} {'tokens/s':>9}")
    async with SGLangClient(url, timeouts=Timeouts(first_token=300)) as client:
        for level in levels:
            httpx.post(f"{url}/flush_cache", timeout=30)
            started = time.perf_counter()
            results = await asyncio.gather(
                *(
                    one(
                        client,
                        [
                            {"role": "system", "content": f"Worker {level}-{i}: {SYSTEM[:600]}"},
                            {"role": "user", "content": "Tell me about the harbor."},
                        ],
                        tokens,
                    )
                    for i in range(level)
                )
            )
            wall = time.perf_counter() - started
            ttfts = sorted(r["ttft"] for r in results)
            p95 = ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))]
            itl = statistics.mean(r["itl"] for r in results)
            total = sum(r["completion"] for r in results)
            print(f"{level:>5} {ms(statistics.median(ttfts))}  {ms(p95)} {ms(itl)} {total / wall:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speed", default="realistic")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    top = max(args.levels)
    with start_simulator(
        "--speed",
        args.speed,
        "--max-running-requests",
        str(top),
        "--min-answer-tokens",
        str(args.tokens),
        "--max-answer-tokens",
        str(args.tokens),
    ) as worker:
        print(f"simulated worker at {worker.url}, speed={args.speed}")
        asyncio.run(cache_table(worker.url, args.trials))
        asyncio.run(concurrency_table(worker.url, args.levels, args.tokens))


if __name__ == "__main__":
    main()
