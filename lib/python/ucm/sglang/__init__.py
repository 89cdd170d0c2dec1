"""ucm for SGLang (docs/sglang.md): SGLang's HiCache storage page keys, computed by libucm
(ucm_sglang_page_hashes, ucm_sglang_namespace_seed; read in sglang 0.5.23,
docs/sglang_0.5.23_hicache_facts.md §3); a namespace's SGLang page table (store_v1.md §12.1); and
the HiCache storage backend, ucm.sglang.backend.UcmHiCacheStorage (which imports SGLang's base
class when SGLang is installed; this package itself does not import SGLang).

    seed = ucm.sglang.namespace_seed(extra_key=None, cache_salt=None)   # None: no prior
    keys = ucm.sglang.page_hashes(token_ids, page_size=64, prior=seed)  # ["cf97...", ...]
"""
from .keys import namespace_seed, page_hashes
from .pages import PageTable, keys_array

__all__ = ["namespace_seed", "page_hashes", "PageTable", "keys_array"]
