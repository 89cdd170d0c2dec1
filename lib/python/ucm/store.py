"""Stores, namespaces, block hashes, lookup, load and dump (ucm/ucm.h).

Shapes and units. A block is ``T = block_size`` tokens. Its payload (store_v1.md §4.2) holds all
``H`` KV heads of all ``L`` layers, ``[L][2][T][H][D]`` elements of the namespace dtype (bf16: 2
bytes, store as numpy uint16 or torch.bfloat16), K before V. A load with a KV-head range
``heads=(h0, h1)`` (a tensor-parallel shard) fills ``[L][2][T][h1-h0][D]`` per block. Block
hashes and namespace ids are 16 raw bytes; arrays of hashes are uint8 ``[n][16]``.
"""
from __future__ import annotations

import ctypes as C
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib as L
from ._handle import Handle
from . import dtypes, errors
from ._buffers import address, hashes_array, id16, u8ptr

DTYPE_BYTES = dtypes.BYTES
DTYPE_CODE = dtypes.CODE
_MODES = {"r": L.OPEN_READ_ONLY, "read_only": L.OPEN_READ_ONLY, "w": L.OPEN_READ_WRITE,
          "read_write": L.OPEN_READ_WRITE, "c": L.OPEN_CREATE, "create": L.OPEN_CREATE}


def version() -> str:
    """libucm's version, "MAJOR.MINOR.PATCH"."""
    return L.lib().ucm_version().decode()


def format_version() -> int:
    """The newest store format version libucm reads and writes."""
    return int(L.lib().ucm_format_version())


def strerror(code: int) -> str:
    """What a return code means."""
    return L.lib().ucm_strerror(code).decode()


def event_medium(store_path: str) -> str:
    """The `medium` of the KV events that describe blocks of the store at store_path (vLLM's
    BlockStored / BlockRemoved): "ucm:" + the store directory's name, as `ucm events` gives it
    (ucm_event_medium; nothing is read)."""
    p = str(store_path).encode()
    return _sized_text(lambda buf, cap, need: L.lib().ucm_event_medium(p, buf, cap, need), "ucm_event_medium")


def code_name(code: int) -> str:
    """The name of a return code, e.g. "UCM_E_CORRUPTION"."""
    return L.lib().ucm_code_name(code).decode()


def hash_root(seed: Any) -> bytes:
    """root_hash(seed) = MD5("ucm.hash.v1" || seed) (store_v1.md §4.1): the parent of a sequence's
    first block. seed: 16 bytes, the namespace's hash seed (Namespace.hash_seed)."""
    s = id16(seed, "seed")
    out = np.zeros(16, dtype=np.uint8)
    L.check(L.lib().ucm_hash_root(u8ptr(s), u8ptr(out)), "ucm_hash_root")
    return out.tobytes()


def _token_ids(token_ids: Any) -> np.ndarray:
    """token_ids (a sequence or array of ints in [0, 2^32), one dimension) as contiguous uint32.
    Raises ucm.Invalid."""
    toks = np.ascontiguousarray(np.asarray(token_ids, dtype=np.int64))
    if toks.ndim != 1:
        raise errors.Invalid(f"token_ids: expected one dimension, got shape {toks.shape}")
    if toks.size and (toks.min() < 0 or toks.max() > 0xFFFFFFFF):
        raise errors.Invalid("token_ids: ids must be in [0, 2^32)")
    return np.ascontiguousarray(toks.astype(np.uint32))


def hash_blocks(seed: Any, token_ids: Any, block_size: int, parent: Any = None) -> np.ndarray:
    """Chained block hashes (store_v1.md §4.1) of the full blocks of token_ids.

    seed: 16 bytes, the namespace's hash seed (``Namespace.hash_seed``; never its id for a
    converted namespace). token_ids: a sequence or array of ints in [0, 2^32). block_size: T.
    parent: 16 bytes to chain from (a continuation), or None for a sequence start.
    Returns uint8 [floor(n / T)][16]. The same code as precompute, so a server's hashes of the same
    ids are the stored ones. Pure: no store is looked at."""
    s = id16(seed, "seed")
    toks = _token_ids(token_ids)
    if block_size <= 0:
        raise errors.Invalid(f"block_size: {block_size}, must be > 0")
    n = toks.size // block_size
    out = np.zeros((max(n, 1), 16), dtype=np.uint8)
    p = id16(parent, "parent") if parent is not None else None
    nb = C.c_size_t()
    L.check(L.lib().ucm_hash_blocks(u8ptr(s), u8ptr(p) if p is not None else None,
                                    toks.ctypes.data_as(L.u32p), toks.size, block_size, u8ptr(out), max(n, 1),
                                    C.byref(nb)), "ucm_hash_blocks")
    return out[:nb.value].copy()


def namespace_id(desc: Union[str, Dict[str, Any]]) -> bytes:
    """The id a namespace descriptor (store_v1.md §7; a dict or JSON text) has: MD5 of the canonical
    JSON of every field but "name". Pure. Raises ucm.Invalid naming a bad field."""
    text = desc if isinstance(desc, str) else json.dumps(desc)
    out = np.zeros(16, dtype=np.uint8)
    L.check(L.lib().ucm_namespace_id(text.encode(), u8ptr(out)), "ucm_namespace_id")
    return out.tobytes()


@dataclass(frozen=True)
class Namespace:
    """A namespace of a store: the fingerprint of what produced its blocks (store_v1.md §7).

    id, hash_seed: 16 bytes (chain block hashes from hash_seed). desc: the descriptor (model_id,
    weights_digest, dtype, block_size, num_layers, num_kv_heads, head_dim, layout, hash_scheme,
    extra, name, and the store's counters)."""
    id: bytes
    hash_seed: bytes
    desc: Dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.desc.get("name", self.id.hex()))

    #: Descriptor fields (store_v1.md §7) as attributes: block_size is T, tokens per block; dtype
    #: "bf16", "fp16" or "fp32".
    block_size = property(lambda self: int(self.desc["block_size"]))
    num_layers = property(lambda self: int(self.desc["num_layers"]))
    num_kv_heads = property(lambda self: int(self.desc["num_kv_heads"]))
    head_dim = property(lambda self: int(self.desc["head_dim"]))
    dtype = property(lambda self: str(self.desc["dtype"]))

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def block_bytes(self, heads: Optional[Tuple[int, int]] = None) -> int:
        """Bytes of one block's payload, [L][2][T][h1-h0][D] (all heads when heads is None)."""
        h0, h1 = heads if heads else (0, self.num_kv_heads)
        return self.num_layers * 2 * self.block_size * (h1 - h0) * self.head_dim * self.dtype_bytes

    def page_bytes(self, heads: Optional[Tuple[int, int]] = None) -> int:
        """Bytes of one paged destination, [T][h1-h0][D] of one (block, layer, K or V)."""
        return self.block_bytes(heads) // (self.num_layers * 2)

    def payload_shape(self, heads: Optional[Tuple[int, int]] = None) -> Tuple[int, int, int, int, int]:
        """(L, 2, T, h1-h0, D): one block's payload."""
        h0, h1 = heads if heads else (0, self.num_kv_heads)
        return (self.num_layers, 2, self.block_size, h1 - h0, self.head_dim)


@dataclass(frozen=True)
class LookupResult:
    """prefix_blocks: the leading blocks present (a prefix hit of prefix_blocks * T tokens);
    present: bool [n], each block's presence."""
    prefix_blocks: int
    present: np.ndarray


@dataclass(frozen=True)
class Document:
    """A document registry entry (store_v1.md §5.6): its source, blocks and stored tokens."""
    id: str
    source: str
    blocks: int
    tokens: int


class Task(Handle):
    """An asynchronous load or dump (ucm_task_t). It holds the buffers it reads or writes until it
    is freed, so they outlive it. wait() releases the GIL. Free it with close() (or a ``with``
    block, or garbage collection), which waits for it first."""

    def __init__(self, handle: C.c_void_p, n: int, keep: Sequence[Any], store: "Store"):
        self._h = handle
        self.n = n
        self._keep = list(keep)
        self._store = store  # a task must be freed before its store is closed
        store._tasks.add(self)

    def done(self) -> bool:
        """True when finished (never blocks)."""
        self._alive()
        return L.lib().ucm_task_check(self._h) == 1

    def wait(self, timeout: Optional[float] = None) -> np.ndarray:
        """Waits (timeout in seconds, None = forever) and returns each block's status, int32 [n]
        (0 = OK, 1 = UCM_E_NOT_FOUND: a miss, 2 = UCM_E_CORRUPTION: bad checksum; a failed block's
        destination is untouched). Raises ucm.Pending on timeout; never raises for a failed block."""
        self._alive()
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        rc = L.lib().ucm_task_wait(self._h, ms)
        if rc == errors.E_PENDING:
            raise errors.Pending(f"task of {self.n} blocks not finished after {timeout} s")
        return self.statuses()

    def statuses(self) -> np.ndarray:
        """Per-block result codes of a finished task, int32 [n]."""
        self._alive()
        f = L.lib().ucm_task_block_status
        return np.array([f(self._h, i) for i in range(self.n)], dtype=np.int32)

    def close(self) -> None:
        """Frees the task (waits for it if it is still running). Idempotent."""
        if self._h:
            L.lib().ucm_task_free(self._h)
            self._h = None
            self._keep = []
            self._store._tasks.discard(self)

    def _alive(self) -> None:
        if not self._h:
            raise errors.Invalid("the task was closed")



class Store(Handle):
    """An open ucm store (ucm_store_t). Use as a context manager, or call close().

    mode: "r" read-only (default; any number of processes, beside one writer), "w" read-write (one
    writer), "c" create (read-write, creating the store if missing). io_threads: block I/O threads
    of load and dump tasks (default 8). direct_io: O_DIRECT payload I/O where the file system
    allows it (default True). refresh_interval_ms: read-only handles catch up with the writer this
    often (0 = only refresh()). shard: the writer shard of a sharded store (store_v1.md §11).
    Thread-safe: one Store may serve many threads. Raises ucm.Invalid (not a store), ucm.Busy
    (another writer), ucm.Version (a newer format), ucm.Corruption, ucm.IO."""

    def __init__(self, path: str, mode: str = "r", *, io_threads: Optional[int] = None,
                 direct_io: Optional[bool] = None, refresh_interval_ms: Optional[int] = None,
                 reader_dir: Optional[str] = None, shard: Optional[str] = None):
        lib = L.lib()
        if mode not in _MODES:
            raise errors.Invalid(f"mode {mode!r}: expected one of 'r', 'w', 'c'")
        p = lib.ucm_store_default_open_params()
        if p.struct_size != C.sizeof(L.OpenParams):
            raise errors.LibraryNotFound(f"libucm at {L.path()} has another ucm_store_open_params "
                                         f"({p.struct_size} bytes, this package {C.sizeof(L.OpenParams)})")
        p.mode = _MODES[mode]
        if io_threads is not None:
            p.io_threads = io_threads
        if direct_io is not None:
            p.direct_io = 1 if direct_io else 0
        if refresh_interval_ms is not None:
            p.refresh_interval_ms = refresh_interval_ms
        self._reader_dir = reader_dir.encode() if reader_dir else None
        p.reader_dir = self._reader_dir
        h = C.c_void_p()
        if shard is not None:
            rc = lib.ucm_store_open_shard(str(path).encode(), C.byref(p), shard.encode(), C.byref(h))
        else:
            rc = lib.ucm_store_open(str(path).encode(), C.byref(p), C.byref(h))
        L.check(rc, f"opening store {path}")
        self._h = h
        self.path = str(path)
        self.mode = mode
        self._tasks: set = set()
        self._ns_cache: Dict[str, Namespace] = {}

    # -- lifetime
    def close(self) -> None:
        """Closes the store, first freeing (so waiting for) its unfinished tasks. Idempotent."""
        if getattr(self, "_h", None):
            for t in list(self._tasks):
                t.close()
            L.lib().ucm_store_close(self._h)
            self._h = None

    @property
    def closed(self) -> bool:
        return not getattr(self, "_h", None)


    def _handle(self) -> C.c_void_p:
        if not getattr(self, "_h", None):
            raise errors.Invalid("the store is closed")
        return self._h

    def refresh(self) -> None:
        """Read-only handles: see the writer's commits now. Writers: no-op."""
        L.check(L.lib().ucm_store_refresh(self._handle()), "ucm_store_refresh")

    # -- namespaces
    def namespace(self, name_or_id: Union[str, bytes, Namespace]) -> Namespace:
        """A namespace by name, 32-hex id or 16-byte id. Raises ucm.NotFound."""
        if isinstance(name_or_id, Namespace):
            return name_or_id
        key = name_or_id.hex() if isinstance(name_or_id, (bytes, bytearray)) else str(name_or_id)
        lib, h = L.lib(), self._handle()
        ns = np.zeros(16, dtype=np.uint8)
        need = C.c_size_t()
        L.check(lib.ucm_store_namespace_find(h, key.encode(), u8ptr(ns), None, 0, C.byref(need)),
                f"namespace {key}")
        buf = C.create_string_buffer(need.value + 1)
        L.check(lib.ucm_store_namespace_find(h, key.encode(), u8ptr(ns), buf, len(buf), C.byref(need)),
                f"namespace {key}")
        seed = np.zeros(16, dtype=np.uint8)
        L.check(lib.ucm_store_namespace_hash_seed(h, u8ptr(ns), u8ptr(seed)), f"hash seed of {key}")
        return Namespace(ns.tobytes(), seed.tobytes(), json.loads(buf.value.decode()))

    def namespaces(self) -> List[Dict[str, Any]]:
        """Every namespace's descriptor (store_v1.md §7), each with its "id" (32 hex)."""
        h = self._handle()
        return json.loads(_sized_text(lambda buf, cap, need: L.lib().ucm_store_namespace_list(h, buf, cap, need),
                                      "ucm_store_namespace_list"))

    def register_namespace(self, desc: Union[str, Dict[str, Any]]) -> Namespace:
        """Writers: registers a namespace from its descriptor (store_v1.md §7) and returns it."""
        text = desc if isinstance(desc, str) else json.dumps(desc)
        ns = np.zeros(16, dtype=np.uint8)
        L.check(L.lib().ucm_store_namespace_register(self._handle(), text.encode(), u8ptr(ns)),
                "registering namespace")
        return self.namespace(ns.tobytes())

    def match_namespace(self, desc: Union[str, Dict[str, Any]], engine_block: int = 0,
                        name: Optional[str] = None) -> Namespace:
        """The namespace a model may read and write (store_v1.md §7.3, ucm_store_namespace_match):
        desc is the model's descriptor (ucm.model.descriptor); engine_block the server's block or
        page size in tokens, which the namespace's block_size must divide (0: equal to desc's);
        name: that namespace only (name or 32-hex id), refused when it does not suit. Looks at what
        the handle lists now (refresh() first for news). Raises ucm.NotFound naming desc's
        fingerprint and each namespace's differing fields."""
        text = desc if isinstance(desc, str) else json.dumps(desc)
        ns = np.zeros(16, dtype=np.uint8)
        L.check(L.lib().ucm_store_namespace_match(self._handle(), text.encode(), int(engine_block),
                                                  name.encode() if name else None, u8ptr(ns), None),
                "namespace of this model")
        return self.namespace(ns.tobytes())

    def create_namespace(self, desc: Union[str, Dict[str, Any]]) -> Namespace:
        """Writers: the namespace of desc created as `ucm precompute` creates it, with its
        r4_projection (store_v1.md §7.3, ucm_store_namespace_create); the existing one when its id
        is there already. Raises ucm.InvalidArgument (read-only handle, bad descriptor),
        ucm.Corruption (a stored projection of another seed)."""
        text = desc if isinstance(desc, str) else json.dumps(desc)
        ns = np.zeros(16, dtype=np.uint8)
        L.check(L.lib().ucm_store_namespace_create(self._handle(), text.encode(), u8ptr(ns)), "creating namespace")
        return self.namespace(ns.tobytes())

    def attachment(self, ns: Any, name: str) -> bytes:
        """A namespace attachment (e.g. "r4_projection", "rope", "chunk_prefix"). Raises ucm.NotFound."""
        n = id16(ns, "ns")
        need = C.c_size_t()
        lib, h = L.lib(), self._handle()
        rc = lib.ucm_store_attachment_get(h, u8ptr(n), name.encode(), None, 0, C.byref(need))
        if rc not in (errors.OK, errors.E_INVALID):
            L.check(rc, f"attachment {name}")
        buf = C.create_string_buffer(max(need.value, 1))
        L.check(lib.ucm_store_attachment_get(h, u8ptr(n), name.encode(), buf, need.value, C.byref(need)),
                f"attachment {name}")
        return buf.raw[:need.value]

    def document(self, ns: Any, doc_id: str) -> Document:
        """A document registry entry (a corpus id, or "chunk:<id>"). Raises ucm.NotFound."""
        n = id16(ns, "ns")
        blocks, tokens = C.c_uint64(), C.c_uint64()
        cap = 4096
        while True:
            buf = C.create_string_buffer(cap)
            rc = L.lib().ucm_store_document_get(self._handle(), u8ptr(n), doc_id.encode(), buf, cap,
                                               C.byref(blocks), C.byref(tokens))
            if rc == errors.E_INVALID and cap < (1 << 20):
                cap *= 16
                continue
            L.check(rc, f"document {doc_id}")
            return Document(doc_id, buf.value.decode("utf-8", "replace"), blocks.value, tokens.value)

    def put_document(self, ns: Any, doc_id: str, token_ids: Any, source: str = "", input: str = "") -> None:
        """Writers: registers document `doc_id` (store_v1.md §5.6) as `ucm precompute` does, once its
        blocks are stored: token_ids are its prompt's ids; source its corpus file or "<file>:<line>";
        input "" (text, tokenized) or "token_ids". Replaces an entry of the same id. Raises
        ucm.NotFound (its last full block is not stored), ucm.Invalid (fewer ids than one block, a
        read-only store). Calls ucm_store_document_put."""
        toks = _token_ids(token_ids)
        L.check(L.lib().ucm_store_document_put(self._handle(), u8ptr(id16(ns, "ns")), doc_id.encode(),
                                               source.encode(), toks.ctypes.data_as(L.u32p), toks.size,
                                               input.encode()), f"registering document {doc_id}")

    # -- blocks
    def lookup(self, ns: Any, hashes: Any) -> LookupResult:
        """Which of the blocks are stored. hashes: uint8 [n][16] (hash_blocks' result), bytes of 16 n,
        or a sequence of 16-byte hashes."""
        n = id16(ns, "ns")
        hs = hashes_array(hashes)
        present = np.zeros(max(len(hs), 1), dtype=np.uint8)
        prefix = C.c_size_t()
        L.check(L.lib().ucm_store_lookup(self._handle(), u8ptr(n), u8ptr(hs), len(hs), u8ptr(present),
                                         C.byref(prefix)), "ucm_store_lookup")
        return LookupResult(int(prefix.value), present[:len(hs)].astype(bool))

    def load(self, ns: Any, hashes: Any, out: Any, *, heads: Optional[Tuple[int, int]] = None,
             paged: bool = False, strides: Optional[Tuple[int, int]] = None, wait: bool = True,
             timeout: Optional[float] = None) -> Union[np.ndarray, Task]:
        """Copies stored blocks into caller-owned host memory, every block checksum-verified first.

        Contiguous (paged=False): out is one buffer of n blocks, [n][L][2][T][Hs][D] (numpy array,
        CPU torch tensor, writable buffer), or a sequence of n per-block buffers [L][2][T][Hs][D].
        Paged (paged=True): out is a sequence of n * L * 2 destinations, (block i, layer l, K/V kv)
        at (i * L + l) * 2 + kv, each [T][Hs][D] (buffers, or int addresses the caller vouches for:
        a server's paged KV cache). heads: KV-head range (h0, h1) of a tensor-parallel shard; None =
        all heads. Hs = h1 - h0.
        strides (paged only; ucm >= 0.8.0): (token_stride, head_stride) in bytes, element (t, h, d)
        of a page at its address + t * token_stride + (h - h0) * head_stride + d * S, so pages can
        sit inside a larger host layout (SGLang's page_first); addresses then must be ints.
        wait=True returns each block's status, int32 [n] (0 OK; 1 miss; 2 corrupt: destination
        untouched). wait=False returns the Task (which keeps `out` alive until it is closed).
        Raises ucm.Invalid (sizes, head range), ucm.NotFound (namespace) at once."""
        nsobj = ns if isinstance(ns, Namespace) else self.namespace(ns)
        hs = hashes_array(hashes)
        n = len(hs)
        heads_t = tuple(heads) if heads else None
        if heads_t and not (0 <= heads_t[0] < heads_t[1] <= nsobj.num_kv_heads):
            raise errors.Invalid(f"heads {heads_t}: need 0 <= h0 < h1 <= {nsobj.num_kv_heads}")
        if strides is not None and not paged:
            raise errors.Invalid("strides are for paged destinations only")
        if strides is not None:
            ptrs = _address_array(out, n * nsobj.num_layers * 2, "strided paged load: out")
            arr = ptrs.ctypes.data_as(L.vpp)
        else:
            ptrs, keep = self._dest_pointers(nsobj, n, out, heads_t, paged)
            arr = (C.c_void_p * max(len(ptrs), 1))(*ptrs)
        h0, h1 = heads_t if heads_t else (0, 0)
        task = C.c_void_p()
        if strides is None:
            L.check(L.lib().ucm_store_load(self._handle(), u8ptr(id16(nsobj, "ns")), u8ptr(hs), n,
                                           L.DEST_PAGED if paged else L.DEST_CONTIGUOUS, arr, h0, h1,
                                           C.byref(task)), "ucm_store_load")
        else:
            p = L.lib().ucm_store_default_load_params()
            p.dest_kind, p.ptrs, p.head_begin, p.head_end = L.DEST_PAGED, arr, h0, h1
            p.token_stride, p.head_stride = int(strides[0]), int(strides[1])
            L.check(L.lib().ucm_store_load_ex(self._handle(), u8ptr(id16(nsobj, "ns")), u8ptr(hs), n, C.byref(p),
                                              C.byref(task)), "ucm_store_load_ex")
        t = Task(task, n, [out, arr, hs, ptrs], self)
        if not wait:
            return t
        with t:
            return t.wait(timeout)

    def load_device(self, ns: Any, hashes: Any, layer_caches: Sequence[Any], slots: Any, *,
                    heads: Optional[Tuple[int, int]] = None, layout: str = "NHD", slot_stride: int = 0,
                    device: int = 0, stream: int = 0, layer_events: Optional[Sequence[int]] = None,
                    on_layer: Optional[Any] = None, wait: bool = True, timeout: Optional[float] = None
                    ) -> Union[np.ndarray, Task]:
        """Loads stored blocks into a paged KV cache in GPU memory (ucm_store_load_ex).

        layer_caches: L * 2 device base addresses (int) or CUDA tensors, (layer l, K|V) at l * 2 + kv;
        slot s of each at base + s * slot_stride bytes, a page [T][Hs][D] (layout "NHD": vLLM's,
        FlashInfer's NHD) or [Hs][T][D] ("HND"), the namespace dtype. slots: int64 [n], the slot of
        block i (< 0: do not load it). slot_stride: bytes between slots, 0 = one page. heads: a TP
        shard's KV-head range (h0, h1), Hs = h1 - h0; None = all. stream: a cudaStream_t as int
        (torch: ``torch.cuda.current_stream().cuda_stream``), 0 = the legacy stream. layer_events:
        L cudaEvent_t (int) recorded after each layer's copies. on_layer(layer, status): called per
        layer when its copies are done (from a CUDA thread; it must not call CUDA).
        Returns as load(). Raises ucm.NotSupported without a CUDA device or libucm_cuda.so, ucm.Invalid
        for sizes, ucm.NotFound for the namespace, at once."""
        nsobj = ns if isinstance(ns, Namespace) else self.namespace(ns)
        hs = hashes_array(hashes)
        n = len(hs)
        nl = nsobj.num_layers * 2
        if len(layer_caches) != nl:
            raise errors.Invalid(f"layer_caches: {len(layer_caches)} entries, expected L * 2 = {nl}")
        bases = [int(c.data_ptr()) if hasattr(c, "data_ptr") else int(c) for c in layer_caches]
        sl = np.ascontiguousarray(np.asarray(slots, dtype=np.int64).reshape(-1))
        if len(sl) != n:
            raise errors.Invalid(f"slots: {len(sl)} entries, expected {n}")
        if layout not in ("NHD", "HND"):
            raise errors.Invalid(f"layout {layout!r}: use 'NHD' or 'HND'")
        p = L.lib().ucm_store_default_load_params()
        p.dest_kind = L.DEST_DEVICE_PAGED if layout == "NHD" else L.DEST_DEVICE_PAGED_HND
        if heads:
            p.head_begin, p.head_end = int(heads[0]), int(heads[1])
        caches = (C.c_void_p * nl)(*bases)
        p.layer_caches = caches
        p.slots = sl.ctypes.data_as(C.POINTER(C.c_int64))
        p.slot_stride = int(slot_stride)
        p.device = int(device)
        p.stream = int(stream) or None
        keep: List[Any] = [caches, sl, hs, list(layer_caches)]
        if layer_events is not None:
            evs = (C.c_void_p * max(len(layer_events), 1))(*[int(e) for e in layer_events])
            p.layer_events = evs
            keep.append(evs)
        if on_layer is not None:
            cb = L.LAYER_CALLBACK(lambda layer, status, _data: on_layer(int(layer), int(status)))
            p.on_layer = cb
            keep.append(cb)  # the callback must outlive the task
        task = C.c_void_p()
        L.check(L.lib().ucm_store_load_ex(self._handle(), u8ptr(id16(nsobj, "ns")), u8ptr(hs), n, C.byref(p),
                                          C.byref(task)), "ucm_store_load_ex")
        t = Task(task, n, keep, self)
        if not wait:
            return t
        with t:
            return t.wait(timeout)

    def _dest_pointers(self, ns: Namespace, n: int, out: Any, heads, paged: bool):
        per_block = ns.block_bytes(heads)
        if paged:
            per, count = ns.page_bytes(heads), n * ns.num_layers * 2
        else:
            per, count = per_block, n
        shape = f"{'pages [T][Hs][D]' if paged else 'blocks [L][2][T][Hs][D]'} of {ns.dtype}"
        ptrs = _pointers(out, count, per, writable=True, what="out", shape=shape)
        return ptrs, list(out) if isinstance(out, (list, tuple)) else [out]

    def dump(self, ns: Any, hashes: Any, parents: Any, kv: Any, *, reprs: Optional[Sequence[Any]] = None,
             tokens: Any = None, wait: bool = True, timeout: Optional[float] = None) -> Union[np.ndarray, Task]:
        """Writers: stores n blocks. hashes, parents: [n][16] (parents[i] = the hash of the block
        before block i, or hash_root(seed) for a sequence start; use parents_of()). kv: one buffer
        [n][L][2][T][H][D] or n per-block buffers [L][2][T][H][D] (all KV heads, the namespace
        dtype). reprs: None, or per block its BLOCK_REPR payload (ucm.repr_encode) or None, so the
        blocks serve sparse retrieval (ucm_store_dump_repr). tokens: None, or the blocks' token ids,
        [n][T] or [n*T] ints (T = block_size), the ids each hash was made from: libucm checks
        hash == MD5(parent || ids) (ucm.Invalid otherwise) and, in a store of format version 4,
        keeps them in the block records (store_v1.md §3.2; Store.tokens gives a chain back).
        Blocks already stored are cheap no-ops. Durable (fsync'd) when the task finishes with
        every status 0. wait=False returns the Task, which keeps kv (and reprs) alive until
        closed. Calls ucm_store_dump_ex."""
        nsobj = ns if isinstance(ns, Namespace) else self.namespace(ns)
        hs, ps = hashes_array(hashes), hashes_array(parents, "parents")
        n = len(hs)
        if len(ps) != n:
            raise errors.Invalid(f"parents: {len(ps)} hashes for {n} blocks")
        ptrs = _pointers(kv, n, nsobj.block_bytes(), writable=False, what="kv",
                         shape=f"blocks [L][2][T][H][D] of {nsobj.dtype}")
        arr = (C.c_void_p * max(n, 1))(*ptrs)
        task = C.c_void_p()
        keep = [kv, arr, hs, ps]
        params = L.lib().ucm_store_default_dump_params()
        if tokens is not None:
            toks = np.ascontiguousarray(np.asarray(tokens, dtype=np.int64)).reshape(-1)
            if toks.size != n * nsobj.block_size:
                raise errors.Invalid(f"tokens: {toks.size} ids for {n} blocks of {nsobj.block_size} tokens")
            if toks.size and (toks.min() < 0 or toks.max() > 0xFFFFFFFF):
                raise errors.Invalid("tokens: ids must be in [0, 2^32)")
            toks = toks.astype(np.uint32)
            keep.append(toks)
            params.tokens = toks.ctypes.data_as(L.u32p)
        if reprs is not None:
            if len(reprs) != n:
                raise errors.Invalid(f"reprs: {len(reprs)} payloads for {n} blocks")
            rp, rl = [], []
            for i, r in enumerate(reprs):
                if r is None:
                    rp.append(None)
                    rl.append(0)
                    continue
                a, size = address(r, writable=False, what=f"reprs[{i}]")
                rp.append(a)
                rl.append(size)
            rarr = (C.c_void_p * max(n, 1))(*rp)
            larr = (C.c_size_t * max(n, 1))(*rl)
            keep += [reprs, rarr, larr]
            params.reprs = C.cast(rarr, L.vpp)
            params.repr_lens = C.cast(larr, L.szp)
        L.check(L.lib().ucm_store_dump_ex(self._handle(), u8ptr(id16(nsobj, "ns")), u8ptr(hs), u8ptr(ps), n, arr,
                                          C.byref(params), C.byref(task)), "ucm_store_dump_ex")
        t = Task(task, n, keep, self)
        if not wait:
            return t
        with t:
            return t.wait(timeout)

    def dump_pages(self, ns: Any, hashes: Any, parents: Any, pages: Sequence[int], strides: Tuple[int, int], *,
                   wait: bool = True, timeout: Optional[float] = None) -> Union[np.ndarray, Task]:
        """Writers: stores n blocks whose payloads are pages inside a caller's host layout (ucm >= 0.8.0;
        ucm_store_dump_ex with kv_pages). pages: n * L * 2 int addresses, (block i, layer l, K/V kv)
        at (i * L + l) * 2 + kv, each a page of T tokens x H heads (all the namespace's heads) whose
        element (t, h, d) is at + t * strides[0] + h * strides[1] + d * S bytes (the addresses are
        the caller's to vouch for, as for a paged load). Blocks are stored "tokens unknown".
        Returns each block's status (or the Task with wait=False). Raises ucm.Invalid (counts,
        overlapping strides) at once."""
        nsobj = ns if isinstance(ns, Namespace) else self.namespace(ns)
        hs, ps = hashes_array(hashes), hashes_array(parents, "parents")
        n = len(hs)
        if len(ps) != n:
            raise errors.Invalid(f"parents: {len(ps)} hashes for {n} blocks")
        parr = _address_array(pages, n * nsobj.num_layers * 2, "pages")
        params = L.lib().ucm_store_default_dump_params()
        params.kv_pages = parr.ctypes.data_as(L.vpp)
        params.token_stride, params.head_stride = int(strides[0]), int(strides[1])
        task = C.c_void_p()
        L.check(L.lib().ucm_store_dump_ex(self._handle(), u8ptr(id16(nsobj, "ns")), u8ptr(hs), u8ptr(ps), n, None,
                                          C.byref(params), C.byref(task)), "ucm_store_dump_ex")
        t = Task(task, n, [parr, hs, ps], self)
        if not wait:
            return t
        with t:
            return t.wait(timeout)

    def tokens(self, ns: Any, block_hash: Any) -> np.ndarray:
        """The token ids of block_hash's whole chain, first block first: uint32 [blocks * T],
        read from the block records (store_v1.md §3.2) by walking parents to the chain root
        (ucm_store_chain_tokens; one 4 KiB read per block). Raises ucm.NotFound (the namespace or
        a block of the chain is not stored: named), ucm.NotSupported (a block of the chain was
        stored without ids, "tokens unknown"), ucm.Corruption."""
        nsid, h = id16(ns, "ns"), id16(block_hash, "block_hash")
        need = C.c_size_t()
        L.check(L.lib().ucm_store_chain_tokens(self._handle(), u8ptr(nsid), u8ptr(h), None, 0, C.byref(need), None),
                "ucm_store_chain_tokens")
        out = np.zeros(max(need.value, 1), dtype=np.uint32)
        got = C.c_size_t()
        L.check(L.lib().ucm_store_chain_tokens(self._handle(), u8ptr(nsid), u8ptr(h), out.ctypes.data_as(L.u32p),
                                               out.size, C.byref(got), None), "ucm_store_chain_tokens")
        return out[:got.value].copy()

    def metrics(self) -> str:
        """The store handle's metrics, Prometheus text exposition (ucm_lookups_total, ...)."""
        h = self._handle()
        return _sized_text(lambda buf, cap, need: L.lib().ucm_store_metrics(h, buf, cap, need), "ucm_store_metrics")

    # -- retrieval and blend (ucm/retrieval.h, ucm/blend.h): see ucm.retrieval, ucm.blend
    def repr_info(self, ns: Any):
        """The namespace's representation shape (ucm.ReprInfo). Raises ucm.NotSupported when it
        has no representations."""
        from .retrieval import ReprInfo
        c = L.ReprInfoC()
        c.struct_size = C.sizeof(L.ReprInfoC)
        L.check(L.lib().ucm_store_repr_info(self._handle(), u8ptr(id16(ns, "ns")), C.byref(c)),
                "ucm_store_repr_info")
        return ReprInfo.from_c(c)

    def load_repr(self, ns: Any, hashes: Any, buffers, first: int = 0, *, wait: bool = True,
                  timeout: Optional[float] = None) -> Union[np.ndarray, Task]:
        """Loads the representations of n blocks into a ucm.ReprBuffers at indices first..first+n-1.
        Returns per-block statuses (wait=True; a failed block must be passed as invalid to
        Retriever.select) or the Task."""
        hs = hashes_array(hashes)
        task = C.c_void_p()
        L.check(L.lib().ucm_store_load_repr(self._handle(), u8ptr(id16(ns, "ns")), u8ptr(hs), len(hs),
                                            C.byref(buffers.c), first, C.byref(task)), "ucm_store_load_repr")
        t = Task(task, len(hs), [buffers, hs], self)
        if not wait:
            return t
        with t:
            return t.wait(timeout)

    def rope_params(self, ns: Any):
        """The namespace's rotary embedding (ucm.RopeParams, from its `rope` attachment). Raises
        ucm.NotFound (no chunks), ucm.NotSupported (a scaling ucm cannot move keys under)."""
        from .blend import RopeParams
        c = L.RopeParamsC()
        c.struct_size = C.sizeof(L.RopeParamsC)
        L.check(L.lib().ucm_store_rope_params(self._handle(), u8ptr(id16(ns, "ns")), C.byref(c)),
                "ucm_store_rope_params")
        return RopeParams(c)

    def chunk_prefix(self, ns: Any) -> np.ndarray:
        """The namespace's chunk prefix C (store_v1.md §4.4), uint32 [P]. Raises ucm.NotFound when it
        holds no chunks."""
        n = id16(ns, "ns")
        cnt = C.c_size_t()
        lib, h = L.lib(), self._handle()
        rc = lib.ucm_store_chunk_prefix(h, u8ptr(n), None, 0, C.byref(cnt))
        if rc not in (errors.OK, errors.E_INVALID):
            L.check(rc, "ucm_store_chunk_prefix")
        out = np.zeros(max(cnt.value, 1), dtype=np.uint32)
        L.check(lib.ucm_store_chunk_prefix(h, u8ptr(n), out.ctypes.data_as(L.u32p), out.size, C.byref(cnt)),
                "ucm_store_chunk_prefix")
        return out[:cnt.value].copy()


def _sized_text(call, what: str) -> str:
    """The text of a C call that writes a NUL-terminated string into a caller buffer and reports the
    length it needs (UCM_E_INVALID when the buffer is too small): asks the size, then fills, and
    asks again if the text grew in between (metrics, namespace list)."""
    need = C.c_size_t()
    rc = call(None, 0, C.byref(need))
    if rc not in (errors.OK, errors.E_INVALID):
        L.check(rc, what)
    while True:
        buf = C.create_string_buffer(need.value + 256)
        rc = call(buf, len(buf), C.byref(need))
        if rc == errors.E_INVALID and need.value + 1 > len(buf):
            continue
        L.check(rc, what)
        return buf.value.decode()


def _address_array(addrs: Any, count: int, what: str) -> np.ndarray:
    """Caller-vouched addresses (ints, or an integer array) as a contiguous uint64 [count] array."""
    a = np.ascontiguousarray(np.asarray(addrs), dtype=np.uint64).reshape(-1)
    if a.size != count or (a.size and not a.all()):
        raise errors.Invalid(f"{what}: {a.size} addresses, expected {count} (n * L * 2), none of them 0")
    return a


def _pointers(bufs: Any, count: int, per: int, *, writable: bool, what: str, shape: str) -> List[int]:
    """The addresses of `count` items of `per` bytes: one buffer of count * per bytes, or a list of
    `count` buffers of `per` bytes each. Raises ucm.Invalid naming the count or size that is wrong
    (`shape` says what an item is)."""
    if isinstance(bufs, (list, tuple)):
        if len(bufs) != count:
            raise errors.Invalid(f"{what}: {len(bufs)} buffers, expected {count} ({shape})")
        ptrs = []
        for i, b in enumerate(bufs):
            a, size = address(b, writable=writable, what=f"{what}[{i}]")
            if size >= 0 and size != per:
                raise errors.Invalid(f"{what}[{i}]: {size} bytes, expected {per} ({shape})")
            ptrs.append(a)
        return ptrs
    base, size = address(bufs, writable=writable, what=what)
    if size >= 0 and size != per * count:
        raise errors.Invalid(f"{what}: {size} bytes, expected {count} x {per} ({shape})")
    return [base + i * per for i in range(count)]


def parents_of(seed: Any, hashes: Any, parent: Any = None) -> np.ndarray:
    """The parents array for Store.dump: hash_root(seed) (or parent, for a continuation) before the
    first block, then each block's predecessor. uint8 [n][16]."""
    hs = hashes_array(hashes)
    first = id16(parent, "parent").tobytes() if parent is not None else hash_root(seed)
    out = np.empty_like(hs)
    if len(hs):
        out[0] = np.frombuffer(first, dtype=np.uint8)
        out[1:] = hs[:-1]
    return out
