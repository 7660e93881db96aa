"""User-facing errors: one clear message naming the cause and the fix, never a bare traceback."""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import sys
import time
from collections.abc import Callable


class UserError(Exception):
    """A fault the user can fix (bad params, missing data, no network); its message says how."""


# A full disk, a quota, a read-only mount or a permission: the machine's fault, which the user fixes, not a bug.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


def _peer_failure(error: Exception) -> bool:
    """A collective that failed because another rank of a torchrun job died (gloo: connection closed or reset;
    any backend: the process group's timeout)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    text = f"{type(error).__name__} {error}".lower()
    return any(word in text for word in ("connection", "closed", "reset by peer", "timed out", "timeout", "gloo",
                                         "nccl", "distbackenderror"))  # fmt: skip


def _say_why_when_torchrun_stops_us(stage: str) -> None:
    """Under torchrun, a rank that fails makes torchrun stop the others with SIGTERM: each says so in one line
    (torchrun's own summary then names the rank that failed first) instead of vanishing mid-step."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    import signal

    def stopped(signum, frame) -> None:
        print(
            f"error in stage {stage} (rank {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}): torchrun "
            "stopped this process because another rank failed (its 'Root Cause' follows); no output was written "
            "(rank 0 writes only at the end, atomically). Fix that rank's error and rerun the stage",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)

    signal.signal(signal.SIGTERM, stopped)


def _leave_process_group() -> None:
    """Under torchrun: wait until every rank is done (rank 0 may still be writing), then leave cleanly."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def stage_main(main: Callable[[], None]) -> Callable[[], None]:
    """Wraps a stage's ``main``: sets up its log (:mod:`pipeline.logs`), and a :class:`UserError` prints one line
    (whatever the log level) and exits with status 1.

    Set ``PIPELINE_DEBUG=1`` to see the full traceback instead.
    """

    @functools.wraps(main)
    def wrapper() -> None:
        # Under `python -m pipeline.X` the module is __main__; its spec keeps the real name.
        spec = main.__globals__.get("__spec__")
        stage = (spec.name if spec else main.__module__).rsplit(".", 1)[-1]
        started = time.perf_counter()
        _say_why_when_torchrun_stops_us(stage)
        try:
            from pipeline.logs import setup_logging  # lazily: pipeline.logs imports this module

            setup_logging()
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
        except Exception as error:
            if os.environ.get("PIPELINE_DEBUG") or not _peer_failure(error):
                raise
            rank = os.environ.get("RANK", "?")
            print(
                f"error in stage {stage} (rank {rank} of {os.environ.get('WORLD_SIZE')}): another process of this "
                f"torchrun job stopped ({type(error).__name__}: {str(error).splitlines()[0][:160]}); no output was "
                "written (rank 0 writes only at the end, atomically). Rerun the stage",
                file=sys.stderr,
            )
            raise SystemExit(1) from None
        _leave_process_group()
        logging.getLogger("pipeline.stages").info(f"stage {stage} finished in {time.perf_counter() - started:.1f} s")

    return wrapper


def tool_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The argument parser of a command line in ``pipeline.tools``: its module's docstring as the ``--help``
    text, kept as written."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
