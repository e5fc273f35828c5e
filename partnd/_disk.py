"""A full disk, said once and the same way everywhere: which file could not be written, and that
nothing half-written was kept.

``torch.save`` reports a full disk as ``RuntimeError: [enforce fail at inline_container.cc:...]
... file write failed``; Python and numpy raise ``OSError`` with ``errno.ENOSPC``. The atomic
writers (:mod:`partnd.engine.checkpoint`) remove their temporary file and raise
:class:`DiskFullError`; the command line ends such a run with its message (see
:mod:`partnd.cli.errors`).
"""

from __future__ import annotations

import errno
from pathlib import Path

__all__ = ["DiskFullError", "is_disk_full"]

_TORCH_WRITE_FAILED = ("file write failed", "PytorchStreamWriter failed writing")


class DiskFullError(OSError):
    """No space was left on the device while writing ``path``; its temporary file was removed.

    An :class:`OSError` with ``errno.ENOSPC``, so code that handles a full disk keeps working.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(errno.ENOSPC, "No space left on device", str(path))
        self.path = Path(path)

    def __str__(self) -> str:
        return f"no space left on device while writing {self.path}; nothing half-written was kept"

    def __reduce__(self) -> tuple[type[DiskFullError], tuple[Path]]:
        """Pickled by its path, so that it reaches the parent of a worker process (joblib)."""
        return (DiskFullError, (self.path,))


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` is a full disk: an ``OSError`` with ``errno.ENOSPC`` (or ``EDQUOT``, an
    exhausted quota) or ``torch.save``'s failed write."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(error, RuntimeError) and any(
        text in str(error) for text in _TORCH_WRITE_FAILED
    )
