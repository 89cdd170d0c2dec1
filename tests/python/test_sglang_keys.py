"""ucm.sglang's page keys (libucm's ucm_sglang_page_hashes / ucm_sglang_namespace_seed) against
answers of SGLang 0.5.23's own get_hash_str and storage_namespace_seed (run in .venv-sglang,
docs/sglang_0.5.23_hicache_facts.md §3) and against hashlib, SHA-256 computed independently of
OpenSSL's use in libucm."""
import hashlib
import struct

import pytest

import ucm
import ucm.sglang

CF = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"


def test_sglang_known_answers():
    assert ucm.sglang.page_hashes([1, 2, 3, 4], 4) == [CF]
    assert ucm.sglang.page_hashes(list(range(1, 9)), 4) == [
        CF, "4ebfa8a1f3c341517621838c6e1b9aa350307e3f00b3cbd1a07ef740f54396d6"]
    lora = ucm.sglang.namespace_seed(extra_key="lora-a")
    assert lora.hex().startswith("407c773a") and lora.hex().endswith("284b")
    assert ucm.sglang.page_hashes([1, 2, 3, 4], 4, prior=lora) == [
        "e4f68dc4af99b6de199d5a048add282da40aa4ef97942ce9eca321bccada9376"]
    salt = ucm.sglang.namespace_seed(cache_salt="salt")
    assert ucm.sglang.page_hashes([1, 2, 3, 4], 4, prior=salt) == [
        "afce9928b3a79318e14ae395d0bad645729b88568513d9f09d07f74973e0b7dd"]
    assert ucm.sglang.namespace_seed(extra_key="").hex().startswith("fd649dd1")
    assert ucm.sglang.namespace_seed() is None


def test_chains_equal_hashlib_at_server_page_sizes():
    ids = [(i * 2654435761) % 49152 for i in range(1000)]
    for page in (16, 64, 128):
        prior, want = None, []
        for p in range(len(ids) // page):
            h = hashlib.sha256((prior or b"") + struct.pack(f"<{page}I", *ids[p * page:(p + 1) * page])).digest()
            want.append(h.hex())
            prior = h
        assert ucm.sglang.page_hashes(ids, page) == want
        # Continuing from a page's key gives the rest of the chain.
        assert ucm.sglang.page_hashes(ids[2 * page:], page, prior=bytes.fromhex(want[1])) == want[2:]


def test_bad_input_is_invalid():
    with pytest.raises(ucm.Invalid):
        ucm.sglang.page_hashes([1, 2], 0)
    with pytest.raises(ucm.Invalid):
        ucm.sglang.page_hashes([-1, 2], 2)
    with pytest.raises(ucm.Invalid):
        ucm.sglang.page_hashes([1, 2], 2, prior=b"short")
    assert ucm.sglang.page_hashes([1, 2, 3], 4) == []
