"""The connector's block validity tracker (ucm.vllm.validity), step by step as vLLM 0.32 runs them.

Each test feeds the steps vLLM's scheduler produces (v1/core/sched/scheduler.py) and the rollback
its _update_requests_with_invalid_blocks applies to the blocks reported, under the "recompute"
policy the connector sets: the first request holding a reported block is truncated at it
(num_computed_tokens = index * block_size), the others that hold it keep their pre-step count and
rely on that one recomputing it; the step's output of every affected request is discarded. The
invariant checked: no save covers a token that does not hold good KV, and every request that
computed over KV that is not good is reported.
"""
from ucm.vllm.validity import BlockValidity, StepReq as S

EB = 32


def step(v, steps, loads=(), finished=()):
    """One worker step: the table updates, the loads (block_ids, first, n, good tokens), the
    forward. Returns the reports {req: block}."""
    v.begin_step(steps)
    for blocks, first, n, good in loads:
        v.loaded(blocks, first, n, good)
    bad = v.compute(steps)
    for rid in finished:
        v.forget(rid)
    return bad


def test_all_good_nothing_reported_and_saves_whole():
    v = BlockValidity(EB)
    assert step(v, [S("a", [1, 2, 3, 4], True, 0, 100)]) == {}
    assert v.good_prefix([1, 2, 3, 4], 96) == 96 and v.good_prefix([1, 2, 3, 4], 128) == 100
    # decode steps append blocks; chunked reads of the partial last block are fine
    assert step(v, [S("a", [5], False, 100, 130)]) == {}
    assert v.good_prefix([1, 2, 3, 4, 5], 128) == 128


def test_failed_load_shared_in_the_same_step_through_the_prefix_cache():
    """Issue 56's poison: A loads engine blocks 1-4 (128 tokens), the third fails; B, scheduled
    after A in the same step, took A's blocks as a local prefix hit (vLLM caches them at
    allocation) and computes its question over them. Both are reported; neither can save past
    engine block 2. Then vLLM's rollback: A truncated to 64, B keeps 128 and relies on A."""
    v = BlockValidity(EB)
    A, B = [1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 8, 9]
    bad = step(v, [S("a", A, True, 128, 200), S("b", B, True, 128, 180)], loads=[(A, 0, 128, 64)])
    assert bad == {"a": 3, "b": 3}
    assert v.good_prefix(A, 192) == 64 and v.good_prefix(B, 160) == 64
    # next step: A recomputes [64, 200) into its blocks, B its tail again, in the same batch
    assert step(v, [S("a", None, False, 64, 200), S("b", None, False, 128, 180)]) == {}
    assert v.good_prefix(A, 192) == 192 and v.good_prefix(B, 160) == 160


def test_the_recomputing_request_gets_only_part_of_the_block_in_its_chunk():
    v = BlockValidity(EB)
    A, B = [1, 2, 3, 4, 5], [1, 2, 3, 4, 8]
    step(v, [S("a", A, True, 128, 140), S("b", B, True, 128, 150)], loads=[(A, 0, 128, 64)])
    # A's chunk covers 16 tokens of block 3 only: B reads all of it, half is not good: reported
    assert step(v, [S("a", None, False, 64, 80), S("b", None, False, 128, 150)]) == {"b": 3}
    assert v.good_prefix(B, 150) == 80
    assert step(v, [S("a", None, False, 80, 140), S("b", None, False, 128, 150)]) == {}
    assert v.good_prefix(B, 150) == 150


def test_garbage_block_freed_before_its_recompute_and_hit_later():
    """Under "recompute" vLLM never evicts the failed block's hash; its owner finishes (or is
    preempted / aborted) first, and a new request gets it as a local prefix hit."""
    v = BlockValidity(EB)
    A = [1, 2, 3, 4, 5]
    step(v, [S("a", A, True, 128, 129)], loads=[(A, 0, 128, 32)], finished=["a"])
    bad = step(v, [S("c", [1, 2, 3, 10], True, 96, 110)])
    assert bad == {"c": 2}
    assert v.good_prefix([1, 2, 3, 10], 96) == 32


def test_damaged_block_between_a_preemption_and_the_resume():
    """A computed everything (good), was preempted (its blocks stay good in the prefix cache);
    it resumes with a local hit on two of them plus a load of the next two, which fails: only the
    load's part and what was computed over it lose validity."""
    v = BlockValidity(EB)
    A = [1, 2, 3, 4, 5, 6, 7]
    assert step(v, [S("a", A, True, 0, 200)]) == {}
    # preempted: its blocks are freed; 1 and 2 stay cached, the rest go to other requests
    step(v, [S("x", [3, 4, 5, 6, 7], True, 0, 160)])
    bad = step(v, [S("a", [1, 2, 11, 12, 13, 14, 15], True, 128, 200)], loads=[([1, 2, 11, 12, 13, 14, 15], 64, 128, 0)])
    assert bad == {"a": 11}
    assert v.good_prefix([1, 2, 11, 12, 13, 14, 15], 192) == 64
    assert v.good_prefix([3, 4, 5, 6, 7], 160) == 160               # x is untouched


def test_partial_engine_block_of_a_load_with_smaller_ucm_blocks():
    v = BlockValidity(EB)
    A = [1, 2, 3]
    bad = step(v, [S("a", A, True, 96, 100)], loads=[(A, 0, 96, 48)])   # ucm block 16: 3 of 6 loaded
    assert bad == {"a": 2}
    assert v.good_prefix(A, 96) == 48


def test_a_bad_request_rewriting_a_block_another_reads_in_the_same_step():
    """B recomputes a shared block (rolled back to it) while its own prefix is bad; C reads that
    block in the same step: C read garbage too, so both are reported and C's writes stay bad."""
    v = BlockValidity(EB)
    assert step(v, [S("b", [1, 2, 3], True, 0, 96)]) == {}
    assert step(v, [S("c", [1, 2, 3, 7], True, 96, 110)]) == {}
    v._set(1, 0)                                        # block 1 lost its KV (a failed load elsewhere)
    bad = step(v, [S("b", None, False, 64, 96), S("c", None, False, 110, 120)])
    assert bad == {"b": 1, "c": 1}
    assert v.good_prefix([1, 2, 3, 7], 128) == 0


def test_unknown_request_reads_are_bad_and_not_reportable():
    v = BlockValidity(EB)
    assert step(v, [S("a", [], True, 64, 70)]) == {"a": -1}


def test_a_good_read_of_what_a_bad_request_writes_in_the_same_step_is_bad():
    """The fixpoint's second pass (tables made up to reach it: C reads block 2 while B, whose own
    read of block 9 is bad, writes it in the same forward)."""
    v = BlockValidity(EB)
    assert step(v, [S("c", [1, 2], True, 0, 64), S("b", [9], True, 0, 32)]) == {}
    v._set(9, 0)
    bad = step(v, [S("c", None, False, 64, 70), S("b", [2], False, 32, 64)])
    assert bad == {"b": 9, "c": 2}
    assert v.good_prefix([1, 2], 64) == 32                # what C computed over block 2 is not good
