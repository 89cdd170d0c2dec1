"""Raw addresses of caller-owned memory: numpy arrays, CPU torch tensors, other writable buffers.

Nothing is copied: libucm reads and writes the caller's memory directly, so an array must be
C-contiguous (and writable where libucm writes). torch is never imported here; a tensor is
recognised by its ``data_ptr`` method.
"""
from __future__ import annotations

import ctypes as C
from typing import Any, Tuple

import numpy as np


def address(buf: Any, *, writable: bool, what: str) -> Tuple[int, int]:
    """(address, size in bytes) of a numpy array, a CPU torch tensor, an int address (size -1:
    unknown, the caller vouches for it) or any object with the buffer protocol.
    Raises ucm.Invalid (a ValueError) for a non-contiguous, read-only (when writable) or GPU buffer."""
    from .errors import Invalid
    if isinstance(buf, int):
        if buf == 0:
            raise Invalid(f"{what}: a NULL address")
        return buf, -1
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise Invalid(f"{what}: the array is not C-contiguous (np.ascontiguousarray makes a copy that is)")
        if writable and not buf.flags.writeable:
            raise Invalid(f"{what}: the array is read-only")
        return int(buf.ctypes.data), int(buf.nbytes)
    if hasattr(buf, "data_ptr") and hasattr(buf, "is_contiguous"):  # torch.Tensor
        dev = getattr(buf, "device", None)
        if dev is not None and getattr(dev, "type", "cpu") != "cpu":
            raise Invalid(f"{what}: a tensor on {dev}; libucm fills host memory (load into a pinned CPU "
                          "tensor, then copy to the device)")
        if not buf.is_contiguous():
            raise Invalid(f"{what}: the tensor is not contiguous (.contiguous() makes a copy that is)")
        return int(buf.data_ptr()), int(buf.numel() * buf.element_size())
    mv = memoryview(buf)
    if not mv.c_contiguous:
        raise Invalid(f"{what}: the buffer is not C-contiguous")
    if writable and mv.readonly:
        raise Invalid(f"{what}: the buffer is read-only")
    if mv.readonly:
        arr = np.frombuffer(mv, dtype=np.uint8)
        return int(arr.ctypes.data), int(mv.nbytes)
    return C.addressof(C.c_char.from_buffer(mv)), int(mv.nbytes)


def hashes_array(hashes: Any, what: str = "hashes") -> np.ndarray:
    """Block hashes as a C-contiguous uint8 array [n][16]: from such an array, bytes of 16 n, or a
    sequence of 16-byte items."""
    from .errors import Invalid
    if isinstance(hashes, np.ndarray):
        a = np.ascontiguousarray(hashes, dtype=np.uint8)
    elif isinstance(hashes, (bytes, bytearray, memoryview)):
        a = np.frombuffer(bytes(hashes), dtype=np.uint8)
    else:
        a = np.frombuffer(b"".join(bytes(h) for h in hashes), dtype=np.uint8)
    if a.size % 16 != 0:
        raise Invalid(f"{what}: {a.size} bytes, not a whole number of 16-byte block hashes")
    return a.reshape(-1, 16)


def id16(x: Any, what: str) -> np.ndarray:
    """A 16-byte id (namespace id, hash seed, block hash) as a uint8 array: bytes, a 32-hex string,
    an array, or an object with an ``id`` attribute (ucm.Namespace)."""
    from .errors import Invalid
    if hasattr(x, "id") and not isinstance(x, (bytes, bytearray, str, np.ndarray)):
        x = x.id
    if isinstance(x, str):
        try:
            x = bytes.fromhex(x)
        except ValueError:
            raise Invalid(f"{what}: {x!r} is not 32 hex digits") from None
    a = np.frombuffer(bytes(x), dtype=np.uint8) if not isinstance(x, np.ndarray) else \
        np.ascontiguousarray(x, dtype=np.uint8).reshape(-1)
    if a.size != 16:
        raise Invalid(f"{what}: {a.size} bytes, expected 16")
    return a.copy()


def u8ptr(a: np.ndarray):
    return a.ctypes.data_as(C.POINTER(C.c_uint8))
