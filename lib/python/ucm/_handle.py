"""Objects that own a libucm handle (Store, Task, Retriever, PageTable): a context manager whose
exit, and the garbage collector, call close(). close() must be idempotent; a failure while the
interpreter shuts down is ignored (the process is going away)."""
from __future__ import annotations


class Handle:
    """Mixin: `with obj:` closes it at the end; so does garbage collection."""

    def close(self) -> None:  # overridden: frees the libucm handle once
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
