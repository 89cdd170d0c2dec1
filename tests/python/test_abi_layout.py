"""The ctypes mirror of libucm's C ABI (lib/python/ucm/_lib.py) against the C compiler's layout of
the public headers (abi_layout.c, built by CMake; its path in $UCM_ABI_LAYOUT): every struct's size
and every field's offset, so that a header that grows (by the one rule: fields appended, struct_size
set by the defaults call) and a mirror that does not is a failing test, not memory overrun."""
import ctypes as C
import json
import os
import subprocess

import pytest

from ucm import _lib as L

MIRROR = {
    "ucm_store_open_params": L.OpenParams,
    "ucm_repr_info": L.ReprInfoC,
    "ucm_repr_buffers": L.ReprBuffersC,
    "ucm_retriever_params": L.RetrieverParamsC,
    "ucm_retrieval_query": L.QueryC,
    "ucm_rope_params": L.RopeParamsC,
    "ucm_blend_select_params": L.BlendSelectParamsC,
    "ucm_store_load_params": L.LoadParamsC,
    "ucm_store_dump_params": L.DumpParamsC,
    "ucm_corpus_open_params": L.CorpusOpenParamsC,
}


@pytest.fixture(scope="module")
def c_layout():
    exe = os.environ.get("UCM_ABI_LAYOUT")
    assert exe, "UCM_ABI_LAYOUT is not set: run through ctest (tests/python/CMakeLists.txt builds abi_layout)"
    return json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)


def test_every_struct_of_the_headers_has_a_mirror(c_layout):
    assert set(c_layout) == set(MIRROR)
    # Every ctypes Structure of the mirror is in the table (none left unchecked).
    mirrors = {v for v in vars(L).values() if isinstance(v, type) and issubclass(v, C.Structure)}
    assert mirrors == set(MIRROR.values())


@pytest.mark.parametrize("name", sorted(MIRROR))
def test_size_and_offsets_match_the_c_layout(c_layout, name):
    cls, want = MIRROR[name], c_layout[name]
    got = {f[0]: getattr(cls, f[0]).offset for f in cls._fields_}
    assert list(got) == list(want["fields"]), f"{name}: fields differ from the header's, in name or order"
    assert got == want["fields"], f"{name}: offsets differ"
    assert C.sizeof(cls) == want["size"], f"{name}: {C.sizeof(cls)} bytes in ctypes, {want['size']} in C"


@pytest.mark.parametrize("fn,cls", [("ucm_store_default_open_params", L.OpenParams),
                                    ("ucm_store_default_load_params", L.LoadParamsC),
                                    ("ucm_store_default_dump_params", L.DumpParamsC),
                                    ("ucm_retriever_default_params", L.RetrieverParamsC),
                                    ("ucm_rope_default_params", L.RopeParamsC),
                                    ("ucm_blend_select_default_params", L.BlendSelectParamsC),
                                    ("ucm_corpus_default_open_params", L.CorpusOpenParamsC)])
def test_the_library_defaults_say_the_same_size(fn, cls):
    """struct_size as the loaded libucm sets it: a package beside an older or newer library."""
    p = getattr(L.lib(), fn)()
    assert p.struct_size == C.sizeof(cls)
