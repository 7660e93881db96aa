"""User-facing errors: one clear message naming the cause and the fix, never a bare traceback."""

from __future__ import annotations

import errno
import functools
import os
import sys
import time
from collections.abc import Callable


class UserError(Exception):
    """A fault the user can fix (bad params, missing data, no network); its message says how."""


# A full disk, a quota, a read-only mount or a permission: the machine's fault, which the user fixes, not a bug.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


def stage_main(main: Callable[[], None]) -> Callable[[], None]:
    """Wraps a stage's ``main`` so a :class:`UserError` prints one line and exits with status 1.

    Set ``PIPELINE_DEBUG=1`` to see the full traceback instead.
    """

    @functools.wraps(main)
    def wrapper() -> None:
        # Under `python -m pipeline.X` the module is __main__; its spec keeps the real name.
        spec = main.__globals__.get("__spec__")
        stage = (spec.name if spec else main.__module__).rsplit(".", 1)[-1]
        started = time.perf_counter()
        try:
            main()
        except UserError as error:
            if os.environ.get("PIPELINE_DEBUG"):
                raise
            print(f"error in stage {stage}: {error}", file=sys.stderr)
            raise SystemExit(1) from None
        except OSError as error:
            if os.environ.get("PIPELINE_DEBUG") or error.errno not in _STORAGE_ERRNOS:
                raise
            where = f" at {error.filename}" if error.filename else ""
            print(
                f"error in stage {stage}: {error.strerror}{where}; free disk space or fix the folder's permissions, "
                "then rerun (every output is written to a temporary file and renamed, so earlier results are intact)",
                file=sys.stderr,
            )
            raise SystemExit(1) from None
        print(f"stage {stage} finished in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    return wrapper
