"""ucm for SGLang (issue 39, in progress): SGLang's HiCache storage page keys, computed by libucm
(ucm_sglang_page_hashes, ucm_sglang_namespace_seed; read in sglang 0.5.23,
docs/sglang_0.5.23_hicache_facts.md §3). SGLang is not imported.

    seed = ucm.sglang.namespace_seed(extra_key=None, cache_salt=None)   # None: no prior
    keys = ucm.sglang.page_hashes(token_ids, page_size=64, prior=seed)  # ["cf97...", ...]
"""
from .keys import namespace_seed, page_hashes

__all__ = ["namespace_seed", "page_hashes"]
