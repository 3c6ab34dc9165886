"""Reading an engine's load from Prometheus text (prometheus_client's parser): several data-parallel
ranks on one node, and several workers behind the gateway's /engine_metrics."""

from __future__ import annotations

import pytest

from inference.loads import from_metrics, per_worker


def rank(
    n: int,
    *,
    running: int,
    queued: int,
    usage: float,
    used: int,
    hit: float,
    total: int | None,
    prefix: str = "sglang:",
    worker: str = "",
) -> str:
    labels = f'model_name="m",dp_rank="{n}"' + (f',worker_addr="{worker}"' if worker else "")
    gauges = {
        "num_running_reqs": running,
        "num_queue_reqs": queued,
        "token_usage": usage,
        "num_used_tokens": used,
        "cache_hit_rate": hit,
    }
    if total is not None:
        gauges["max_total_num_tokens"] = total
    return "".join(
        f"# TYPE {prefix}{name} gauge\n{prefix}{name}{{{labels}}} {value}\n" for name, value in gauges.items()
    )


def test_ranks_are_summed_and_their_rates_are_not():
    text = rank(0, running=3, queued=1, usage=0.6, used=600, hit=0.5, total=1000) + rank(
        1, running=2, queued=4, usage=0.7, used=700, hit=0.9, total=1000
    )

    load = from_metrics(text)

    assert (load.running_requests, load.waiting_requests, load.used_tokens, load.total_tokens) == (5, 5, 1300, 2000)
    assert load.token_usage == 0.65
    assert load.cache_hit_rate == pytest.approx(0.7)


def test_without_the_pool_size_the_fullest_rank_is_the_token_usage():
    """A rank's token_usage is a fraction of its own pool: the node is as full as its fullest rank,
    never the sum (1.3 would read as past every threshold)."""
    text = rank(0, running=1, queued=0, usage=0.6, used=600, hit=0.5, total=None) + rank(
        1, running=1, queued=0, usage=0.7, used=700, hit=0.5, total=None
    )

    assert from_metrics(text).token_usage == pytest.approx(0.7)


def test_the_gateways_merged_metrics_give_one_load_per_worker():
    text = rank(
        0, running=3, queued=1, usage=0.25, used=250, hit=0.5, total=1000, prefix="sglang_", worker="http://a:1"
    ) + rank(0, running=0, queued=0, usage=0.0, used=0, hit=0.0, total=1000, prefix="sglang_", worker="http://b:2")
    # The same family name twice in one text is what smg sends (one block per worker).
    loads = per_worker(text)

    assert {url: (load.running_requests, load.waiting_requests, load.token_usage) for url, load in loads.items()} == {
        "http://a:1": (3, 1, 0.25),
        "http://b:2": (0, 0, 0.0),
    }


def test_text_without_the_engines_gauges_is_refused():
    with pytest.raises(ValueError, match="num_running_reqs"):
        from_metrics("# TYPE smg_http_requests_total counter\nsmg_http_requests_total 3\n")
