"""ucm.sglang's page keys equal SGLang's own (get_hash_str, get_storage_hash_str with extra_key /
cache_salt) on random chains at several page sizes. Runs in .venv-sglang (scripts/venv_sglang.sh),
not in CI: PYTHONPATH=lib/python UCM_LIB=build/lib/libucm.so .venv-sglang/bin/python -m pytest
tests/sglang/test_keys_sglang.py. SGLang JIT-compiles its hash extension on first use (g++,
libssl-dev, ninja; about 40 s)."""
import random

import pytest

import ucm.sglang

utils = pytest.importorskip("sglang.srt.mem_cache.utils")


@pytest.mark.parametrize("page", [1, 16, 64, 128])
def test_page_keys_equal_sglangs(page):
    rng = random.Random(page)
    for n in (page, 5 * page, 5 * page + page // 2 + 1, 1500):
        ids = [rng.randrange(0, 2 ** 32) for _ in range(n)]
        full = (n // page) * page
        want = utils.get_hash_str(ids[:full], None, page_size=page) if full else []
        assert ucm.sglang.page_hashes(ids, page) == want
        if full >= 2 * page:  # continuing from a prior
            assert ucm.sglang.page_hashes(ids[page:full], page, prior=bytes.fromhex(want[0])) == \
                utils.get_hash_str(ids[page:full], want[0], page_size=page)


@pytest.mark.parametrize("extra_key,cache_salt", [("lora-a", None), (None, "salt"), ("", None), ("k", "s"),
                                                   ("ключ", None)])
def test_namespace_seed_equals_sglangs(extra_key, cache_salt):
    want = utils.storage_namespace_seed(extra_key, cache_salt)
    got = ucm.sglang.namespace_seed(extra_key=extra_key, cache_salt=cache_salt)
    assert got.hex() == want
    ids = list(range(256))
    assert ucm.sglang.page_hashes(ids, 64, prior=got) == utils.get_hash_str(ids, want, page_size=64)
