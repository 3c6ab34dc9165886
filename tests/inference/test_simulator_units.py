"""The simulator's parts on their own: tokenizer, pseudo-prose model, chat template, entry points."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference import chat_templates
from inference.chat_templates import render_chatml, render_llama3
from simulator import chat_template as model_template
from simulator import tokenizer as tok
from simulator.config import MODEL_DIR, build_parser, config_from_args
from simulator.prose import ProseModel, eos_for
from simulator.radix_cache import RadixCache
from simulator.scheduler import QueueFull, Scheduler, SchedulerConfig
from simulator.timing import SPEED_PRESETS
from tests.inference.test_cache_and_scheduler_properties import make_req


@given(st.text(max_size=300))
def test_tokenizer_round_trips_any_text(text):
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text


def test_tokenizer_is_stable_across_processes():
    """No salted hashing: another interpreter gives the same ids (workers and tests must agree)."""
    text = "Hello, Résumé! <|im_start|>user\nThe cache keeps 12345 tokens."
    code = f"from simulator import tokenizer as t; print(t.encode({text!r}))"
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        cwd=str(MODEL_DIR.parents[1]),
    )
    assert json.loads(other.stdout) == tok.encode(text)


def test_common_english_costs_about_a_token_per_word():
    text = "The shared cache keeps a warm prefix for the next request in the queue."
    assert len(tok.encode(text)) == len(text.split()) + 1  # the final "."


def test_special_tokens_are_single_ids_and_skipped_when_decoding():
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == tok.IM_START_ID and ids[-1] == tok.IM_END_ID
    assert tok.decode(ids) == "user\nhi"


def test_incremental_detokenizer_holds_back_a_split_character():
    ids = tok.encode("é")  # two UTF-8 bytes: one 3-byte chunk at most, so build a split by hand
    data = "aé".encode()
    first = tok.BYTE_BASE + (2 << 24) + int.from_bytes(data[:2], "big")  # "a" + first byte of é
    second = tok.BYTE_BASE + (1 << 24) + data[2]
    detok = tok.IncrementalDetokenizer()
    assert detok.add(first) == "a"
    assert detok.add(second) == "é"
    assert tok.decode(ids) == "é"


def _answer(prompt: str, **kw) -> list[int]:
    ids = tok.encode(prompt)
    model = ProseModel(
        ids,
        temperature=kw.pop("temperature", 0.0),
        top_p=1.0,
        seed=kw.pop("seed", None),
        answer_tokens=(24, 184),
        fallback_rng=random.Random(kw.pop("rng", 0)),
        prompt_text=prompt,
        **kw,
    )
    out = []
    while not out or out[-1] not in tok.EOS_TOKEN_IDS:
        out.append(model.next_token())
        assert len(out) < 1000
    return out


def test_greedy_prose_depends_only_on_the_prompt():
    prompt = render_chatml([{"role": "user", "content": "Tell me about harbors."}])
    assert _answer(prompt, rng=1) == _answer(prompt, rng=2)
    assert _answer(prompt) != _answer(render_chatml([{"role": "user", "content": "Tell me about rivers."}]))


def test_prose_reads_as_sentences_and_reencodes_to_the_same_ids():
    out = _answer(render_chatml([{"role": "user", "content": "Hello"}]))
    text = tok.decode(out)
    assert text[0].isupper() and text.endswith(".")
    assert 24 <= len(out) <= 184 + 20  # ends at the first sentence boundary past its target length
    assert tok.encode(text) == out[:-1]  # so a chat's next turn matches the cache through this answer
    assert out[-1] == tok.IM_END_ID  # ChatML prompt: ends on the template's end-of-turn token


def test_seeded_sampling_repeats_and_differs_from_greedy():
    prompt = render_chatml([{"role": "user", "content": "Hello"}])
    assert _answer(prompt, temperature=1.0, seed=5, rng=1) == _answer(prompt, temperature=1.0, seed=5, rng=2)
    assert _answer(prompt, temperature=1.0, seed=5) != _answer(prompt)


def test_echo_answers_with_the_last_user_message():
    prompt = render_chatml(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Repeat me, please."}]
    )
    out = _answer(prompt, echo=True)
    assert tok.decode(out) == "Repeat me, please."


def test_end_token_follows_the_template():
    assert eos_for(tok.encode(render_chatml([{"role": "user", "content": "x"}]))) == tok.IM_END_ID
    assert eos_for(tok.encode(render_llama3([{"role": "user", "content": "x"}]))) == tok.EOT_ID
    assert eos_for(tok.encode("plain text")) == tok.ENDOFTEXT_ID


def _part(text: str) -> dict:
    return {"type": "text", "text": text}


def test_chatml_matches_the_model_directorys_template_and_parts_are_joined():
    config = json.loads((MODEL_DIR / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in config["chat_template"] and "<|im_start|>assistant\n" in config["chat_template"]
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    rendered = model_template.render_chatml(messages)
    assert rendered == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n"
    assert model_template.last_user_text(rendered) == "ab"


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["system", "user", "assistant"]),
                "content": st.one_of(st.text(max_size=40), st.lists(st.text(max_size=10).map(_part), max_size=3)),
            }
        ),
        max_size=5,
    )
)
def test_the_product_renders_chatml_as_the_simulated_model_does(messages):
    """The client's template for the native route is the model's, byte for byte (two modules: the
    simulator imports nothing of the product)."""
    assert chat_templates.render_chatml(messages) == model_template.render_chatml(messages)


def test_both_entry_points_share_one_set_of_options():
    from inference.management.commands.run_simulated_engine import Command

    module_parser = build_parser()
    command_parser = Command().create_parser("manage.py", "run_simulated_engine")
    ours = {a.dest for a in module_parser._actions if a.dest != "help"}
    assert ours <= {a.dest for a in command_parser._actions}
    args = ["--port", "31999", "--speed", "slow", "--fault-hang", "--echo", "--page-size", "4"]
    a = config_from_args(module_parser.parse_args(args))
    b = config_from_args(command_parser.parse_args(args))
    assert a == b and a.faults.hang_after_tokens == 0 and a.timing == SPEED_PRESETS["slow"]


def test_the_simulator_does_not_import_django():
    code = "import sys, simulator.server, simulator.main; print('django' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=str(MODEL_DIR.parents[1])
    )
    assert result.stdout.strip() == "False"


class TestPriorityScheduling:
    """SGLang's --enable-priority-scheduling and --max-queued-requests, in the simulator's scheduler."""

    @staticmethod
    def scheduler(**config) -> Scheduler:
        return Scheduler(
            SchedulerConfig(max_running_requests=1, max_total_tokens=100_000, **config), RadixCache(), clock=lambda: 0.0
        )

    @staticmethod
    def req(rid: str, priority: int | None = None):
        req = make_req(rid, [7, 8, 9, int.from_bytes(rid.encode(), "big") % 1000 + 10], 4)
        req.priority = priority
        return req

    def admitted_order(self, s: Scheduler) -> list[str]:
        order = []
        while s.waiting or s.running:
            batch = s.next_batch()
            order += [r.rid for r in batch.reqs if batch.kind == "prefill"]
            for r in batch.reqs:
                r.to_abort = True  # end each as soon as it ran once: the next one is admitted
            s.complete(batch)
        return order

    def test_larger_priorities_go_first_then_arrival_order(self):
        s = self.scheduler(enable_priority_scheduling=True)
        for rid, priority in [("free-1", 0), ("free-2", 0), ("premium-1", 10), ("none", None), ("premium-2", 10)]:
            s.add(self.req(rid, priority))
        assert self.admitted_order(s) == ["premium-1", "premium-2", "free-1", "free-2", "none"]

    def test_smaller_values_first_when_asked(self):
        s = self.scheduler(enable_priority_scheduling=True, schedule_low_priority_values_first=True)
        for rid, priority in [("b", 5), ("a", 1), ("none", None)]:
            s.add(self.req(rid, priority))
        assert self.admitted_order(s) == ["a", "b", "none"]

    def test_without_priority_scheduling_priority_is_ignored(self):
        s = self.scheduler()
        for rid, priority in [("first", 0), ("second", 10)]:
            s.add(self.req(rid, priority))
        assert self.admitted_order(s) == ["first", "second"]

    def test_a_full_queue_refuses_an_arrival_that_is_not_more_important(self):
        s = self.scheduler(enable_priority_scheduling=True, max_queued_requests=2)
        s.add(self.req("a", 5))
        s.add(self.req("b", 5))
        with pytest.raises(QueueFull, match=r"The request queue is full\."):
            s.add(self.req("c", 5))

    def test_a_full_queue_gives_a_more_important_arrival_the_place_of_the_least_important(self):
        s = self.scheduler(enable_priority_scheduling=True, max_queued_requests=3)
        for rid, priority in [("free-old", 0), ("premium", 10), ("free-new", 0)]:
            s.add(self.req(rid, priority))
        evicted = s.add(self.req("premium-2", 10))
        assert evicted.rid == "free-new"  # of equals, the newest goes
        assert sorted(r.rid for r in s.waiting) == ["free-old", "premium", "premium-2"]

    def test_without_priority_scheduling_a_full_queue_refuses_everyone(self):
        s = self.scheduler(max_queued_requests=1)
        s.add(self.req("a", 0))
        with pytest.raises(QueueFull):
            s.add(self.req("b", 100))


class TestPriorityEviction:
    """SGLang's --radix-eviction-policy priority (mem_cache/evict_policy.py PriorityStrategy, radix_cache.py):
    the evictable leaf with the lowest (priority, last access) goes first; a node holds the highest
    priority of the requests that inserted through it (none counts as 0); lru, the default, ignores it."""

    PAID = list(range(100, 140))  # 40 tokens each, no prefix in common
    FREE_OLD = list(range(200, 240))
    FREE_NEW = list(range(300, 340))

    def fill(self, cache: RadixCache) -> None:
        cache.insert(self.PAID, priority=10)  # the oldest of the three
        cache.insert(self.FREE_OLD, priority=0)
        cache.insert(self.FREE_NEW, priority=0)

    def test_lower_priority_goes_first_then_the_least_recently_used(self):
        cache = RadixCache(eviction_policy="priority")
        self.fill(cache)
        assert cache.evict(40) == 40
        assert sorted(cache.sequences()) == sorted([self.PAID, self.FREE_NEW])  # the older free one went
        cache.evict(40)
        assert cache.sequences() == [self.PAID]  # both free prefixes went before the older paid one

    def test_lru_is_the_default_and_ignores_priority(self):
        cache = RadixCache()
        self.fill(cache)
        cache.evict(40)
        assert sorted(cache.sequences()) == sorted([self.FREE_OLD, self.FREE_NEW])  # the oldest went

    def test_a_shared_node_keeps_the_highest_priority_inserted_through_it(self):
        cache = RadixCache(eviction_policy="priority")
        shared = list(range(10, 30))
        cache.insert([*shared, 1, 2, 3, 4], priority=10)
        cache.insert([*shared, 5, 6, 7, 8], priority=0)  # splits the node: the shared half keeps 10
        other = list(range(400, 420))
        cache.insert(other, priority=5)
        cache.evict(4)  # the free tail: priority 0
        assert cache.match_prefix([*shared, 5, 6, 7, 8]).length == len(shared)
        cache.evict(4)  # then the priority-5 sequence, although it is the most recent
        assert cache.match_prefix(other).length == 0
        assert cache.match_prefix([*shared, 1, 2, 3, 4]).length == len(shared) + 4

    def test_a_match_does_not_change_a_nodes_priority(self):
        cache = RadixCache(eviction_policy="priority")
        cache.insert(self.FREE_OLD, priority=0)
        cache.insert(self.PAID, priority=10)
        cache.match_prefix(self.FREE_OLD)  # recently used, still priority 0
        cache.evict(1)
        assert cache.sequences() == [self.PAID]

    def test_unimplemented_policies_are_refused(self):
        with pytest.raises(ValueError, match="does not implement"):
            RadixCache(eviction_policy="lfu")

    def scheduler(self, **config) -> Scheduler:
        return Scheduler(
            SchedulerConfig(max_running_requests=1, max_total_tokens=100_000, **config),
            RadixCache(eviction_policy="priority"),
            clock=lambda: 0.0,
        )

    def run(self, s: Scheduler, rid: str, prompt: list[int], priority: int | None) -> None:
        req = make_req(rid, prompt, 4)
        req.priority = priority
        s.add(req)
        while s.waiting or s.running:
            s.complete(s.next_batch())

    def test_the_scheduler_inserts_with_the_requests_priority(self):
        s = self.scheduler(enable_priority_scheduling=True)
        self.run(s, "paid", self.PAID, 10)
        self.run(s, "free", self.FREE_OLD, 0)
        s.cache.evict(43)  # one request's path: 40 prompt tokens and 3 of its 4 output tokens
        assert [seq[:40] for seq in s.cache.sequences()] == [self.PAID]

    def test_without_priority_scheduling_every_node_is_priority_zero(self):
        s = self.scheduler()
        self.run(s, "paid", self.PAID, 10)
        self.run(s, "free", self.FREE_OLD, 0)
        s.cache.evict(43)  # one request's path: 40 prompt tokens and 3 of its 4 output tokens
        assert [seq[:40] for seq in s.cache.sequences()] == [self.FREE_OLD]  # plain LRU: the older went

    def test_a_request_without_priority_is_evicted_before_any_other(self):
        """SGLang gives it the least important value (-sys.maxsize - 1 when larger values go first)."""
        s = self.scheduler(enable_priority_scheduling=True)
        self.run(s, "internal", self.FREE_OLD, -10)
        self.run(s, "none", self.PAID, None)
        s.cache.evict(43)  # one request's path: 40 prompt tokens and 3 of its 4 output tokens
        assert [seq[:40] for seq in s.cache.sequences()] == [self.FREE_OLD]


def test_the_radix_eviction_policy_option_is_sglangs():
    config = config_from_args(build_parser().parse_args([]))
    assert config.radix_eviction_policy == "lru"
    config = config_from_args(build_parser().parse_args(["--radix-eviction-policy", "priority"]))
    assert config.radix_eviction_policy == "priority"
    for unimplemented in ("lfu", "slru", "tlru"):
        result = subprocess.run(
            [sys.executable, "-m", "simulator", "--radix-eviction-policy", unimplemented],
            capture_output=True,
            text=True,
            cwd=str(MODEL_DIR.parents[1]),
        )
        assert result.returncode == 2
        assert f"--radix-eviction-policy {unimplemented}" in result.stderr
        assert "the simulator does not implement" in result.stderr
