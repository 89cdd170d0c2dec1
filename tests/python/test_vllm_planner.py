"""The vLLM connector's scheduler-side planner and its bounded save queue, without vLLM.

Scheduler outputs are built with the fields vLLM 0.32's scheduler fills
(vllm/v1/core/sched/output.py: NewRequestData, CachedRequestData with resumed_req_ids and
new_block_ids = all blocks of a resumed request, num_computed_tokens before the step), in the
sequences its scheduler produces: chunked prefill, preemption (num_computed_tokens back to 0, the
connector asked again), a load-failure rollback (num_computed_tokens truncated at the failed
block). The real engine runs the same paths in tests/vllm (scripts/test_vllm.sh). Also the
connector's KV events without vLLM (events.py: runs, the TP quorum, the worker's buffer).
"""
import threading
import time
from types import SimpleNamespace as NS

import numpy as np
import pytest

from ucm.vllm import connector_events as events
from ucm.vllm.planner import LoadSpec, Planner, bypass_reason, head_range
from ucm.vllm.save_queue import SaveQueue

EB, T = 32, 16          # engine block, ucm block


def fake_hash(ids, ns_key=None):
    """Chained-looking block ids: block i's 'hash' encodes (i, its tokens' sum so far); another
    namespace (an adapter's ns_key) seeds the chain differently."""
    n = len(ids) // T
    out = np.zeros((n, 16), np.uint8)
    acc = 0 if ns_key is None else sum(map(ord, str(ns_key))) + 7
    for i in range(n):
        acc = (acc * 31 + sum(ids[i * T:(i + 1) * T]) + 1) % (1 << 60)
        out[i, :8] = np.frombuffer(np.uint64(acc).tobytes(), np.uint8)
    return out


class FakeStore:
    def __init__(self):
        self.blocks = set()

    def add(self, hashes):
        self.blocks.update(h.tobytes() for h in hashes)

    def lookup(self, hashes, ns_key=None):
        present = np.array([h.tobytes() in self.blocks for h in hashes], bool)
        prefix = int(np.argmin(present)) if not present.all() else len(present)
        return prefix, present


def new_req(rid, ids, blocks, computed, lora=None):
    return NS(req_id=rid, prompt_token_ids=ids, block_ids=(list(blocks),), num_computed_tokens=computed,
              lora_request=lora)


def out(new=(), cached=(), sched=None, finished=()):
    """cached: (req_id, new_block_ids or None, num_computed_tokens, resumed)."""
    c = NS(req_ids=[x[0] for x in cached], new_block_ids=[None if x[1] is None else (list(x[1]),) for x in cached],
           num_computed_tokens=[x[2] for x in cached], resumed_req_ids={x[0] for x in cached if x[3]})
    return NS(scheduled_new_reqs=list(new), scheduled_cached_reqs=c, num_scheduled_tokens=dict(sched or {}),
              finished_req_ids=set(finished))


def plan(p, o):
    """A step's loads and saves (the StepReq list is tested in test_vllm_validity.py)."""
    return p.plan(o)[:2]


def planner(store, save=True):
    return Planner(EB, T, fake_hash, store.lookup, save=save)


PROMPT = list(range(1000, 1000 + 200))     # 200 tokens: 12 full ucm blocks, 6 full engine blocks + 8


def test_new_request_hit_load_then_save_of_the_rest():
    st = FakeStore()
    st.add(fake_hash(PROMPT)[:8])                        # 128 tokens stored
    p = planner(st)
    n = p.matched("a", PROMPT, 0)
    assert n == 128                                      # whole engine blocks, < len(prompt)
    p.allocated("a", n)
    loads, saves = plan(p, out(new=[new_req("a", PROMPT, range(10, 17), 128)], sched={"a": 72}))
    (ld,) = loads
    assert (ld.first_token, ld.n_tokens, ld.block_ids) == (0, 128, list(range(10, 17)))
    assert len(ld.hashes) == 8 and (ld.hashes == fake_hash(PROMPT)[:8]).all()
    (sv,) = saves                                        # 128 + 72 = 200: the prompt is complete
    assert sv.first == 8 and len(sv.hashes) == 12 and sv.block_ids == list(range(10, 17))
    # The saved blocks' token ids go with them (store_v1.md §3.2): blocks 8..11, 16 tokens each.
    assert sv.tokens.dtype == np.uint32 and sv.tokens.tolist() == PROMPT[8 * T: 12 * T]
    loads, saves = plan(p, out(cached=[("a", None, 200, False)], sched={"a": 1}))   # decode
    assert loads == [] and saves == []
    plan(p, out(finished=["a"]))
    assert p.live_requests() == 0


def test_chunked_prefill_saves_once_after_the_last_chunk():
    p = planner(FakeStore())
    assert p.matched("a", PROMPT, 0) == 0
    p.allocated("a", 0)
    assert plan(p, out(new=[new_req("a", PROMPT, [1, 2, 3], 0)], sched={"a": 96})) == ([], [])
    assert plan(p, out(cached=[("a", [4, 5], 96, False)], sched={"a": 64})) == ([], [])
    loads, saves = plan(p, out(cached=[("a", [6, 7], 160, False)], sched={"a": 40}))
    (sv,) = saves
    assert sv.first == 0 and sv.block_ids == [1, 2, 3, 4, 5, 6, 7]


def test_preempted_mid_prefill_v1_runner_reloads_and_saves_only_after_recompute():
    """The defect of issue 37: a resumed request (V1 runner: scheduled_cached_reqs with its id in
    resumed_req_ids) was never loaded again, and its save tracker kept its old count."""
    st = FakeStore()
    st.add(fake_hash(PROMPT)[:8])
    p = planner(st)
    p.allocated("a", p.matched("a", PROMPT, 0))
    loads, saves = plan(p, out(new=[new_req("a", PROMPT, [1, 2, 3, 4], 128)], sched={"a": 8}))
    assert len(loads) == 1 and saves == []
    # Preempted (vLLM frees its blocks, num_computed_tokens = 0); asked again when it resumes.
    n = p.matched("a", PROMPT, 0)
    assert n == 128
    p.allocated("a", n)
    loads, saves = plan(p, out(cached=[("a", [20, 21, 22, 23], 128, True)], sched={"a": 40}))
    (ld,) = loads                                       # loaded again, into the new blocks
    assert ld.block_ids == [20, 21, 22, 23] and (ld.first_token, ld.n_tokens) == (0, 128)
    assert saves == []                                  # 128 + 40 = 168 < 200: not complete
    loads, saves = plan(p, out(cached=[("a", [24, 25, 26], 168, False)], sched={"a": 32}))
    (sv,) = saves
    assert sv.block_ids == [20, 21, 22, 23, 24, 25, 26]  # the blocks it holds now
    assert p.counters["resumed_loads"] == 1


def test_preempted_after_its_save_rearms_and_resume_among_new_requests_v2_runner():
    st = FakeStore()
    p = planner(st)
    p.allocated("a", p.matched("a", PROMPT, 0))
    (sv,) = plan(p, out(new=[new_req("a", PROMPT, range(7), 0)], sched={"a": 200}))[1]
    st.add(sv.hashes[:5])                               # only part of the save landed
    plan(p, out(cached=[("a", [8], 200, False)], sched={"a": 1}))
    # V2 runner: the resumed request comes back among the new ones, nothing computed (no hit yet
    # for the blocks of the second half; the first 64 tokens are a hit).
    p.allocated("a", p.matched("a", PROMPT, 0))
    loads, saves = plan(p, out(new=[new_req("a", PROMPT, range(30, 37), 64)], sched={"a": 100}))
    (ld,) = loads
    assert (ld.first_token, ld.n_tokens, ld.block_ids) == (0, 64, list(range(30, 37)))
    assert saves == []                                   # 164 < 200
    (sv,) = plan(p, out(cached=[("a", None, 164, False)], sched={"a": 36}))[1]
    assert sv.first == 5 and sv.block_ids == list(range(30, 37))


def test_load_failure_rollback_rearms_the_save():
    """The step that loads and completes the prompt plans its save (the worker drops it: load
    error); vLLM truncates num_computed_tokens at the failed block; the save comes again after
    the recompute, never before."""
    st = FakeStore()
    st.add(fake_hash(PROMPT)[:12])
    p = planner(st)
    p.allocated("a", p.matched("a", PROMPT, 0))       # 192 tokens
    loads, saves = plan(p, out(new=[new_req("a", PROMPT, range(7), 192)], sched={"a": 8}))
    assert len(loads) == 1 and saves == []              # nothing missing: every block is stored
    st.blocks.clear()                                    # gc removed them all since the lookup
    st.add(fake_hash(PROMPT)[:4])
    # Rolled back to engine block 2 (64 tokens): recomputing, then complete again.
    assert plan(p, out(cached=[("a", None, 64, False)], sched={"a": 100})) == ([], [])
    (sv,) = plan(p, out(cached=[("a", None, 164, False)], sched={"a": 36}))[1]
    assert sv.first == 4
    assert p.counters["saves_rearmed"] == 1


def test_lora_requests_load_and_save_in_their_adapters_namespace():
    """A LoRA request's chain is hashed and looked up with its adapter's key: the base model's
    blocks never hit for it, and its saves carry the key (the worker writes the adapter namespace)."""
    st = FakeStore()
    st.add(fake_hash(PROMPT))                            # the base model's blocks: all of the prompt
    p = planner(st)
    lora = NS(lora_name="a", lora_int_id=1, lora_path="/x")
    key = ("a", "/x")
    assert bypass_reason(NS(lora_request=lora, prompt_token_ids=PROMPT)) is None
    assert p.matched("a", PROMPT, 0, ns_key=key) == 0   # no hit on the base model's blocks
    p.allocated("a", 0)
    loads, saves = plan(p, out(new=[new_req("a", PROMPT, range(7), 0, lora=lora)], sched={"a": 200}))
    (sv,) = saves
    assert loads == [] and sv.ns_key == key and sv.first == 0
    assert (sv.hashes == fake_hash(PROMPT, key)).all() and not (sv.hashes == fake_hash(PROMPT)).all()
    st.add(sv.hashes[:8])                                # the adapter's blocks, as the worker saved them
    assert p.matched("b", PROMPT, 0, ns_key=key) == 128
    p.allocated("b", 128)
    loads, _ = plan(p, out(new=[new_req("b", PROMPT, range(10, 17), 128, lora=lora)], sched={"b": 72}))
    (ld,) = loads
    assert ld.ns_key == key and (ld.hashes == fake_hash(PROMPT, key)[:8]).all()


def test_accepted_load_not_scheduled_is_dropped_and_finished_requests_leave_no_state():
    st = FakeStore()
    st.add(fake_hash(PROMPT))
    p = planner(st)
    p.allocated("a", p.matched("a", PROMPT, 0))
    assert plan(p, out()) == ([], [])
    assert p.counters["stale_loads_dropped"] == 1
    for i in range(50):
        rid = f"r{i}"
        p.allocated(rid, p.matched(rid, PROMPT, 0))
        plan(p, out(new=[new_req(rid, PROMPT, range(7), 192)], sched={rid: 8}))
        if i % 2:
            p.finished(rid)                              # request_finished
        else:
            plan(p, out(finished=[rid]))                  # finished_req_ids
    assert p.live_requests() == 0


def test_head_range_follows_vllm_sharding_and_replication():
    assert head_range(8, 1, 0, 8) == (0, 8)
    assert [head_range(8, 4, r, 2) for r in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    # SmolLM2: 3 KV heads at TP 6: each head on two ranks
    assert [head_range(3, 6, r, 1) for r in range(6)] == [(0, 1), (0, 1), (1, 2), (1, 2), (2, 3), (2, 3)]
    with pytest.raises(ValueError):
        head_range(3, 2, 0, 1)


def test_save_queue_is_bounded_never_blocks_and_drains_on_close():
    gate = threading.Event()
    ran = []

    def run(item):
        gate.wait(10)
        if item == "bad":
            raise OSError("disk gone")
        ran.append(item)

    q = SaveQueue(run, max_bytes=100)
    t0 = time.monotonic()
    assert q.offer("a", 60) and q.offer("bad", 30)
    assert not q.has_room(20) and not q.offer("c", 20)  # would exceed 100 bytes: dropped
    assert time.monotonic() - t0 < 1.0                    # a disk that hangs never blocks a step
    assert q.counters["dropped_full"] == 1 and q.counters["dropped_bytes"] == 20
    gate.set()
    assert q.flush(10)
    assert ran == ["a"] and q.counters["failed"] == 1 and q.queued_bytes == 0
    gate.clear()
    assert q.offer("d", 50) and q.offer("e", 50)
    threading.Timer(0.2, gate.set).start()
    assert q.close(drain_timeout=0.05)                    # "d" was running: finished; "e" dropped
    assert ran == ["a", "d"] and q.counters["dropped_at_close"] == 1
    assert not q.offer("f", 1)


def test_loads_carry_their_token_ids_only_for_kv_events():
    st = FakeStore()
    st.add(fake_hash(PROMPT)[:8])
    for with_tokens in (False, True):
        p = Planner(EB, T, fake_hash, st.lookup, load_tokens=with_tokens)
        p.allocated("a", p.matched("a", PROMPT, 32))
        (ld,), _ = plan(p, out(new=[new_req("a", PROMPT, range(10, 17), 128)], sched={"a": 72}))
        assert (ld.first_token, ld.n_tokens) == (32, 128)
        if with_tokens:  # tokens [32, 128): ucm blocks 2..7
            assert ld.tokens.dtype == np.uint32 and ld.tokens.tolist() == PROMPT[32:128]
        else:
            assert ld.tokens is None


def test_kv_events_enabled_only_with_vllm_kv_cache_events():
    assert not events.enabled(NS())
    assert not events.enabled(NS(kv_events_config=None))
    assert not events.enabled(NS(kv_events_config=NS(enable_kv_cache_events=False, publisher="zmq")))
    assert events.enabled(NS(kv_events_config=NS(enable_kv_cache_events=True)))


def test_block_runs_one_per_run_of_stored_blocks_with_parent_and_tokens():
    ids = list(range(500, 500 + 6 * T))
    h = fake_hash(ids)                                    # a chain of 6 blocks
    whole = events.block_runs(h, None, None, np.asarray(ids, np.uint32), T)
    assert len(whole) == 1 and whole[0].parent_block_hash is None
    assert whole[0].block_hashes == [x.tobytes() for x in h] and all(type(b) is bytes for b in whole[0].block_hashes)
    assert whole[0].token_ids == ids and all(type(t) is int for t in whole[0].token_ids)
    # blocks 2..5 of the chain, block 3 not stored: runs [2] and [4, 5]
    r = events.block_runs(h[2:], h[1].tobytes(), [True, False, True, True], np.asarray(ids[2 * T:], np.uint32), T)
    assert [x.block_hashes for x in r] == [[h[2].tobytes()], [h[4].tobytes(), h[5].tobytes()]]
    assert [x.parent_block_hash for x in r] == [h[1].tobytes(), h[3].tobytes()]
    assert r[0].token_ids == ids[2 * T:3 * T] and r[1].token_ids == ids[4 * T:6 * T]
    assert events.block_runs(h[:2], None, [False, False], None, T) == []
    assert events.block_runs(h[:2], None, None, None, T)[0].token_ids == []
    with pytest.raises(ValueError):
        events.block_runs(h[:2], None, None, np.zeros(T, np.uint32), T)
    with pytest.raises(ValueError):
        events.block_runs(h[:2], None, [True], None, T)


def test_event_quorum_keeps_what_every_worker_reported_in_order():
    one = events.EventQuorum()
    one.add_events(["a", "b", "a"])                        # one worker: all of it, repeats and order kept
    assert one.common_events() == ["a", "b", "a"] and one.aggregate().get_all_events() == ["a", "b", "a"]
    # vLLM's KVOutputAggregator: the first worker's container, + each other worker's events
    q = events.EventQuorum(1)
    q.add_events(["x", "y", "y"])
    q.add_events(["y", "x"])
    q.increment_workers(1)
    assert q.get_number_of_workers() == 2 and len(q.get_all_events()) == 5
    assert q.aggregate().get_all_events() == ["x", "y"] and q.get_number_of_workers() == 1
    q.clear_events()
    assert q.get_all_events() == [] and q.get_number_of_workers() == 1
    with pytest.raises(TypeError):
        q.add_events(("x",))
    with pytest.raises(ValueError):
        events.EventQuorum(0)


def test_event_buffer_is_thread_safe_and_bounded():
    buf = events.EventBuffer(max_events=1000)

    def add(k):
        for i in range(100):
            buf.add([(k, i)])
    threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    got = []
    while any(t.is_alive() for t in threads):
        got += buf.drain()
    for t in threads:
        t.join()
    got += buf.drain()
    assert sorted(got) == sorted((k, i) for k in range(4) for i in range(100)) and buf.drain() == []
    buf.add(list(range(1500)))                             # no consumer: bounded, the rest counted
    assert len(buf.drain()) == 1000 and buf.dropped == 500


def test_salted_embedded_and_multimodal_requests_bypass_loads_and_saves():
    """vLLM's block hash covers a cache salt, prompt embeddings and multimodal items; a ucm block
    hash covers token ids only: such requests must neither hit nor leave blocks (tenant isolation)."""
    st = FakeStore()
    st.add(fake_hash(PROMPT)[:8])
    p = planner(st)
    reqs = {"salt": NS(cache_salt="tenant-1", prompt_token_ids=PROMPT),
            "emb": NS(prompt_token_ids=None, prompt_embeds=object()),
            "mm": NS(prompt_token_ids=PROMPT, mm_features=[object()])}
    for rid, r in reqs.items():
        assert p.matched(rid, PROMPT, 0, bypass=bypass_reason(r)) == 0
        p.allocated(rid, 0)
    assert bypass_reason(NS(prompt_token_ids=PROMPT, cache_salt=None, mm_features=[])) is None
    loads, saves, steps = p.plan(out(new=[new_req(rid, PROMPT, range(7 * i, 7 * i + 7), 0) for i, rid in
                                          enumerate(reqs)], sched={rid: 200 for rid in reqs}))
    assert loads == [] and saves == []
    assert [s.req_id for s in steps] == list(reqs)         # the worker still replays their compute
    assert {k: v for k, v in p.counters.items() if k.startswith("bypassed")} == \
        {"bypassed_cache_salt": 1, "bypassed_prompt_embeds": 1, "bypassed_multimodal": 1}
    # The salted request, seen again (resumed V2-style among the new ones): still bypassed.
    assert plan(p, out(new=[new_req("salt", PROMPT, range(7), 0)], sched={"salt": 200})) == ([], [])


def test_an_error_planning_one_save_keeps_the_other_requests_load():
    st = FakeStore()
    st.add(fake_hash(PROMPT)[:8])
    calls = {"n": 0}

    def lookup(hashes, ns_key=None):
        calls["n"] += 1
        if calls["n"] == 3:                                # the save lookup of request "b"
            raise OSError("store index gone")
        return st.lookup(hashes)

    p = Planner(EB, T, fake_hash, lookup, save=True)
    p.allocated("a", p.matched("a", PROMPT, 0))
    p.allocated("b", p.matched("b", PROMPT[:150], 0))
    loads, saves, _ = p.plan(out(new=[new_req("a", PROMPT, range(7), 128), new_req("b", PROMPT[:150], range(10, 15), 128)],
                                 sched={"a": 8, "b": 22}))
    assert [ld.req_id for ld in loads] == ["a", "b"] and all(ld.hashes is not None for ld in loads)
    assert saves == [] and p.counters["save_plan_errors"] == 1


def test_a_load_that_cannot_be_planned_is_sent_without_hashes():
    """vLLM counts accepted external tokens as computed: the load must reach the worker, which
    reports it failed, rather than vanish."""
    st = FakeStore()
    st.add(fake_hash(PROMPT)[:8])
    state = {"fail": False}

    def hashes(ids, ns_key=None):
        if state["fail"]:
            raise ValueError("hash seed unreadable")
        return fake_hash(ids)

    p = Planner(EB, T, hashes, st.lookup, save=True)
    p.allocated("a", p.matched("a", PROMPT, 0))
    state["fail"] = True
    loads, saves, steps = p.plan(out(new=[new_req("a", PROMPT, range(7), 128)], sched={"a": 72}))
    (ld,) = loads
    assert ld.hashes is None and (ld.first_token, ld.n_tokens, ld.block_ids) == (0, 128, list(range(7)))
    assert saves == [] and p.counters["load_plan_errors"] == 1 and p.counters["save_plan_errors"] == 1


def test_steps_describe_every_scheduled_request_as_vllm_sent_it():
    p = planner(FakeStore())
    p.allocated("a", p.matched("a", PROMPT, 0))
    _, _, steps = p.plan(out(new=[new_req("a", PROMPT, [1, 2, 3], 0)], sched={"a": 96}))
    assert [(s.req_id, s.blocks, s.replace, s.before, s.after) for s in steps] == [("a", [1, 2, 3], True, 0, 96)]
    _, _, steps = p.plan(out(cached=[("a", [4, 5], 96, False)], sched={"a": 64}))
    assert [(s.blocks, s.replace, s.before, s.after) for s in steps] == [([4, 5], False, 96, 160)]
    _, _, steps = p.plan(out(cached=[("a", [9, 8, 7], 0, True)], sched={"a": 64}))   # resumed, V1 runner
    assert [(s.blocks, s.replace, s.before, s.after) for s in steps] == [([9, 8, 7], True, 0, 64)]
    _, _, steps = p.plan(out(cached=[("a", None, 64, False)], sched={"a": 1}))
    assert [(s.blocks, s.replace) for s in steps] == [(None, False)]


def test_announced_blocks_gc_removed_are_found_round_robin_and_bounded():
    """connector_events.Announced: the blocks a server announced, checked against the store a
    bounded round at a time; those gone are returned once (announced removed) and forgotten."""
    from ucm.vllm.connector_events import Announced
    now = [0.0]
    a = Announced(max_blocks=6, per_check=3, interval_s=5.0, clock=lambda: now[0])
    a.add([bytes([i]) * 16 for i in range(4)])
    a.add([bytes([2]) * 16])                      # again: no duplicate, now the newest
    assert len(a) == 4
    store = {bytes([i]) * 16 for i in range(4)} - {bytes([1]) * 16}   # gc removed block 1
    asked = []

    def present(hs):
        asked.append(list(hs))
        return [h in store for h in hs]
    assert a.check(present) == [] and asked == []  # not due yet
    now[0] = 5.0
    assert a.check(present) == [bytes([1]) * 16]  # the first round: blocks 0, 1, 3
    assert asked[-1] == [bytes([i]) * 16 for i in (0, 1, 3)]
    assert len(a) == 3
    now[0] = 6.0
    assert a.check(present) == []                 # not due again before 10 s
    now[0] = 10.0
    store.discard(bytes([2]) * 16)
    assert a.check(present) == [bytes([2]) * 16]  # the next round starts with the block not checked yet
    assert asked[-1][0] == bytes([2]) * 16
    a.add([bytes([9 + i]) * 16 for i in range(6)])  # beyond max_blocks: the oldest are forgotten
    assert len(a) == 6 and a.forgotten == 2
