"""Exceptions: one ``ucm.Error`` subclass per return code of ucm/ucm.h.

Every failing C call raises the subclass of its return code, carrying the code, its name
(``UCM_E_*``) and the text of ``ucm_last_error()`` on the calling thread.
"""
from __future__ import annotations

from typing import Dict, Type

OK = 0
E_NOT_FOUND = 1
E_CORRUPTION = 2
E_INVALID = 3
E_IO = 4
E_BUSY = 5
E_VERSION = 6
E_NOT_SUPPORTED = 7
E_NO_SPACE = 8
E_PENDING = 9
E_INTERNAL = 10


class Error(Exception):
    """A libucm call failed. ``code``: the UCM_E_* value; ``code_name``: e.g. "UCM_E_CORRUPTION";
    ``message``: ucm_last_error()'s text (what was wrong, and often what to do)."""

    code: int = -1
    code_name: str = "UCM_E_UNKNOWN"

    def __init__(self, message: str, code: int | None = None, code_name: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if code_name is not None:
            self.code_name = code_name

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"


class NotFound(Error):
    """UCM_E_NOT_FOUND: a block or namespace is absent."""
    code, code_name = E_NOT_FOUND, "UCM_E_NOT_FOUND"


class Corruption(Error):
    """UCM_E_CORRUPTION: a checksum mismatch; nothing was copied (the block is a miss)."""
    code, code_name = E_CORRUPTION, "UCM_E_CORRUPTION"


class Invalid(Error, ValueError):
    """UCM_E_INVALID: a bad argument (the message says which)."""
    code, code_name = E_INVALID, "UCM_E_INVALID"


class IO(Error):
    """UCM_E_IO: an operating-system error."""
    code, code_name = E_IO, "UCM_E_IO"


class Busy(Error):
    """UCM_E_BUSY: another writer holds the store (the message names it)."""
    code, code_name = E_BUSY, "UCM_E_BUSY"


class Version(Error):
    """UCM_E_VERSION: the store's format is newer than this libucm."""
    code, code_name = E_VERSION, "UCM_E_VERSION"


class NotSupported(Error):
    """UCM_E_NOT_SUPPORTED."""
    code, code_name = E_NOT_SUPPORTED, "UCM_E_NOT_SUPPORTED"


class NoSpace(Error):
    """UCM_E_NO_SPACE: the disk is full (nothing was written)."""
    code, code_name = E_NO_SPACE, "UCM_E_NO_SPACE"


class Pending(Error):
    """UCM_E_PENDING: a task did not finish within the timeout."""
    code, code_name = E_PENDING, "UCM_E_PENDING"


class Internal(Error):
    """UCM_E_INTERNAL."""
    code, code_name = E_INTERNAL, "UCM_E_INTERNAL"


class LibraryNotFound(Error, ImportError):
    """libucm.so could not be loaded (the message lists the places tried)."""
    code, code_name = -1, "UCM_LIBRARY_NOT_FOUND"


BY_CODE: Dict[int, Type[Error]] = {c.code: c for c in (NotFound, Corruption, Invalid, IO, Busy, Version,
                                                       NotSupported, NoSpace, Pending, Internal)}


def error_for(code: int, message: str) -> Error:
    """The exception of a return code (``Error`` itself for an unknown code)."""
    cls = BY_CODE.get(code)
    if cls is None:
        return Error(message, code=code, code_name="UCM_E_UNKNOWN")
    return cls(message)
