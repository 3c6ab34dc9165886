"""Properties of the simulator's radix cache and continuous-batching scheduler (hypothesis, no sockets).

Checked against brute force over what the tree holds, after every operation of random workloads:
the cache never exceeds the KV pool, a prefix is reported cached only while it is in the tree (so an
evicted prefix never is), locked paths survive eviction, and the running batch never exceeds
``max_running_requests``; every request ends.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.prose import ProseModel
from simulator.radix_cache import RadixCache
from simulator.request import Req, SamplingParams
from simulator.scheduler import Scheduler, SchedulerConfig
from tests.inference.helpers import common_prefix

# Few distinct token values make shared prefixes (and node splits) common.
TOKENS = st.integers(min_value=100, max_value=103)
SEQUENCES = st.lists(TOKENS, min_size=1, max_size=12)


def brute_match(cache: RadixCache, ids: list[int]) -> int:
    """The longest page-aligned prefix of ``ids`` that some stored root-to-leaf path starts with."""
    best = max((common_prefix(seq, ids) for seq in cache.sequences()), default=0)
    return best - best % cache.page_size


def trie_size(sequences: list[list[int]], page_size: int = 1) -> int:
    """Tokens a paged radix tree holding these paths must store: one page per distinct page-aligned prefix
    (with pages of several tokens, two paths that differ inside a page share nothing of it)."""
    pages = {tuple(seq[:i]) for seq in sequences for i in range(page_size, len(seq) + 1, page_size)}
    return len(pages) * page_size


# -- the radix cache on its own ------------------------------------------------------------------------

CACHE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), SEQUENCES),
        st.tuples(st.just("match"), SEQUENCES),
        st.tuples(st.just("evict"), st.integers(min_value=1, max_value=20)),
        st.tuples(st.just("lock"), SEQUENCES),
        st.tuples(st.just("unlock"), st.integers(min_value=0, max_value=5)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=CACHE_OPS, page_size=st.sampled_from([1, 2, 4]))
def test_radix_cache_matches_brute_force_and_evicts_only_unlocked_leaves(ops, page_size):
    cache = RadixCache(page_size=page_size)
    locks: list[tuple[object, list[int]]] = []  # (node, the prefix it protects)
    for op, arg in ops:
        if op == "insert":
            cache.insert(arg)
        elif op == "match":
            assert cache.match_prefix(arg).length == brute_match(cache, arg)
        elif op == "evict":
            before = cache.sequences()
            cache.evict(arg)
            after = cache.sequences()
            for seq in before:
                # A path that is gone is never reported cached beyond what the remaining tree holds.
                assert cache.match_prefix(seq).length == brute_match(cache, seq)
            assert trie_size(after, page_size) <= trie_size(before, page_size)
        elif op == "lock":
            match = cache.match_prefix(arg)
            cache.lock(match.node)
            locks.append((match.node, arg[: match.length]))
        elif op == "unlock" and locks:
            node, _ = locks.pop(arg % len(locks))
            cache.unlock(node)
        # Invariants after every operation.
        assert cache.total_size == trie_size(cache.sequences(), page_size)
        assert 0 <= cache.evictable_size <= cache.total_size
        for _, prefix in locks:  # a locked path is never evicted
            assert cache.match_prefix(prefix).length == len(prefix)
    for node, _ in locks:
        cache.unlock(node)
    assert cache.evictable_size == cache.total_size  # nothing locked: everything may go
    cache.evict(cache.total_size)
    assert cache.total_size == 0 and cache.sequences() == []


@settings(max_examples=100, deadline=None)
@given(seqs=st.lists(SEQUENCES, min_size=2, max_size=8))
def test_eviction_takes_the_least_recently_used_leaf_first(seqs):
    cache = RadixCache()
    for seq in seqs:
        cache.insert(seq)
    for seq in seqs:  # touch every path once, in order: the first is now the least recently used
        cache.match_prefix(seq)
    oldest = seqs[0]
    still_used_later = any(common_prefix(oldest, s) == len(oldest) for s in seqs[1:])
    cache.evict(1)
    if not still_used_later:
        # The first sequence's own tail (its leaf) was touched before any other leaf: it goes first.
        assert cache.match_prefix(oldest).length < len(oldest)


def test_the_match_is_capped_by_page_and_a_partial_page_is_never_cached():
    cache = RadixCache(page_size=4)
    assert cache.insert([1, 2, 3, 4, 5, 6]) == 4  # the partial last page is dropped
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8]).length == 4
    assert cache.match_prefix([1, 2, 3, 9]).length == 0


# -- the scheduler -----------------------------------------------------------------------------------

PROMPT_HEADS = [[7] * 6, [8, 9] * 4, [5, 6, 7]]
WORKLOAD = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.integers(0, len(PROMPT_HEADS) - 1),
            st.lists(TOKENS, min_size=1, max_size=6),
            st.integers(min_value=1, max_value=12),
        ),
        st.tuples(st.just("step")),
        st.tuples(st.just("abort"), st.integers(min_value=0, max_value=30)),
    ),
    min_size=1,
    max_size=60,
)


def make_req(rid: str, prompt: list[int], max_new: int) -> Req:
    params = SamplingParams(max_new_tokens=max_new, temperature=0.0, ignore_eos=True)
    model = ProseModel(
        prompt, temperature=0.0, top_p=1.0, seed=None, answer_tokens=(max_new, max_new), fallback_rng=random.Random(0)
    )
    return Req(rid=rid, prompt_ids=list(prompt), params=params, model=model, stream=True)


def check_invariants(s: Scheduler) -> None:
    assert len(s.running) <= s.config.max_running_requests
    assert s.used_tokens <= s.config.max_total_tokens
    assert s.cache.total_size <= s.config.max_total_tokens
    assert s.cache.total_size == trie_size(s.cache.sequences(), s.cache.page_size)
    assert all(not r.finished for r in s.running + s.waiting)


def step(s: Scheduler) -> None:
    batch = s.next_batch()
    check_invariants(s)
    if batch is None:
        return
    if batch.kind == "prefill":
        for req, cached in zip(batch.reqs, batch.prefix_lens, strict=True):
            # What is reported cached is really in the tree (and locked) while the request uses it.
            assert cached <= len(req.fill_ids) - 1
            assert s.cache.match_prefix(req.fill_ids[:cached]).length == cached
            assert req.cached_tokens is not None and req.cached_tokens <= len(req.prompt_ids) - 1
    s.complete(batch)
    check_invariants(s)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=WORKLOAD, max_running=st.integers(1, 4), pool=st.integers(30, 80), page_size=st.sampled_from([1, 2]))
def test_scheduler_respects_its_limits_and_finishes_every_request(workload, max_running, pool, page_size):
    s = Scheduler(
        SchedulerConfig(max_running_requests=max_running, max_total_tokens=pool, max_prefill_tokens=32),
        RadixCache(page_size=page_size),
        clock=lambda: 0.0,
    )
    reqs: list[Req] = []
    for op in workload:
        if op[0] == "add":
            _, head, tail, max_new = op
            req = make_req(f"r{len(reqs):03d}", PROMPT_HEADS[head] + tail, max_new)
            reqs.append(req)
            s.add(req)
        elif op[0] == "step":
            step(s)
        elif reqs:
            target = reqs[op[1] % len(reqs)]
            for ended in s.abort(target.rid):
                assert ended.finish == {"type": "abort", "message": "Abort in waiting queue"}
        check_invariants(s)
    for _ in range(10_000):  # drain
        if s.idle:
            break
        step(s)
    assert s.idle
    for req in reqs:
        assert req.finished
        kind = req.finish["type"]
        assert kind in ("length", "abort")
        if kind == "length":
            assert len(req.output_ids) == req.params.max_new_tokens
    # Nothing is locked once every request has ended: the whole cache is evictable.
    assert s.cache.evictable_size == s.cache.total_size


def test_the_running_batch_is_capped_and_the_rest_wait():
    s = Scheduler(SchedulerConfig(max_running_requests=2, max_total_tokens=10_000), RadixCache(), clock=lambda: 0.0)
    for i in range(5):
        s.add(make_req(f"q{i}", [100 + i] * 5, 50))
    step(s)
    assert len(s.running) == 2 and len(s.waiting) == 3
    for _ in range(5):
        step(s)  # decode steps advance every running request by one token
    assert [len(r.output_ids) for r in s.running] == [6, 6]
    s.abort(s.running[0].rid)
    step(s)  # the aborted one leaves after one more step...
    assert len(s.running) == 1
    step(s)  # ...and a waiting request joins between steps
    assert len(s.running) == 2 and len(s.waiting) == 2
