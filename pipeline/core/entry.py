"""The entry points of stages and tools: one line for a user's error (:class:`~pipeline.core.errors.UserError`),
a lock so one stage runs once at a time, the tools' argument parser."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pipeline.core.errors import UserError
from pipeline.core.logs import setup_logging
from pipeline.core.redaction import redact

# A full disk, a quota, a read-only mount or a permission: the machine's fault, which the user fixes, not a bug.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


def _peer_failure(error: Exception) -> bool:
    """A collective that failed because another rank of a torchrun job died (gloo: connection closed or reset,
    or a broken pipe where the dead rank's socket was being written; any backend: the process group's timeout)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    text = f"{type(error).__name__} {error}".lower()
    return any(word in text for word in ("connection", "closed", "reset by peer", "broken pipe", "timed out",
                                         "timeout", "gloo", "nccl", "distbackenderror"))  # fmt: skip


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


LOCKS = Path(".locks")  # under the project root (a stage's working directory); git-ignored


@contextlib.contextmanager
def one_run_at_a_time(stage: str, argv: list[str]) -> Iterator[None]:
    """Holds an exclusive lock on ``.locks/<stage>[-<args>].lock`` while a stage runs, so a second direct run of
    the same stage (and item) in this project stops at once instead of writing models/ or metrics/ beside the
    first. Under torchrun only rank 0 takes it (every rank runs the stage in one folder); `dvc exp run` and
    `dvc queue` jobs run in folders of their own, so they never meet.

    Raises:
        UserError: another live process holds the lock; names its pid.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks
        fcntl = None
    if fcntl is None or int(os.environ.get("RANK", "0")) != 0:
        yield
        return
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join([stage, *argv]))[:200]
    path = LOCKS / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise UserError(
                f"another run of stage {stage} (pid {holder}) is writing this project's outputs (lock {path}); "
                "wait for it to finish or stop it, then rerun"
            ) from None
        left_by = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if left_by:  # a run that ends clears its pid: this one was killed (SIGKILL, a crash, a lost machine)
            logging.getLogger("pipeline.stages").info(
                f"{stage}: taking over lock {path}, left by pid {left_by}, which stopped without releasing it"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # the next run then knows this one ended, however it ended
    finally:
        os.close(fd)  # releases the lock; the file stays, empty once unlocked


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGINT reached a stage: raised in its main thread, so every ``with`` block below unwinds (a
    temporary output is removed, an MLflow run is marked KILLED, the lock is released) before it exits."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop_on_signals() -> None:
    """SIGTERM (``kill``, a CI timeout, a closed terminal's hang-up turned into TERM by most shells) and SIGINT
    (Ctrl-C) raise :class:`Stopped` in the main thread. Under torchrun, SIGTERM keeps its own handler
    (:func:`_say_why_when_torchrun_stops_us`)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # a stage's main run from a thread (tests): signals are the process's owner's business

    def stop(signum, frame) -> None:
        raise Stopped(signum)

    signal.signal(signal.SIGINT, stop)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        signal.signal(signal.SIGTERM, stop)


def _one_line(error: BaseException, stage: str, seconds: float) -> tuple[str | None, int]:
    """The one line and exit status a stage ends with for ``error``, or (None, 0) where the traceback is the
    message: a bug, or any error under ``PIPELINE_DEBUG=1`` but a polite stop."""
    import signal

    if isinstance(error, KeyboardInterrupt):
        signum = error.signum if isinstance(error, Stopped) else signal.SIGINT
        return (
            f"stage {stage} stopped by {signal.Signals(signum).name} after {seconds:.1f} s; nothing half-written was "
            "kept (each output is renamed into place only once whole) and its MLflow runs are marked KILLED. Rerun "
            "it (or `dvc repro`) to finish",
            128 + signum,
        )
    if os.environ.get("PIPELINE_DEBUG"):
        return None, 0
    if isinstance(error, UserError):
        return redact(f"error in stage {stage}: {error}"), 1
    if isinstance(error, OSError) and error.errno in _STORAGE_ERRNOS:
        where = f" at {error.filename}" if error.filename else ""
        return (
            f"error in stage {stage}: {error.strerror}{where}; free disk space or fix the folder's permissions, then "
            "rerun (every output is written to a temporary file and renamed, so earlier results are intact)",
            1,
        )
    if isinstance(error, Exception) and _peer_failure(error):
        rank = os.environ.get("RANK", "?")
        first_line = (redact(str(error)).splitlines() or [""])[0][:160]
        return (
            f"error in stage {stage} (rank {rank} of {os.environ.get('WORLD_SIZE')}): another process of this torchrun "
            f"job stopped ({type(error).__name__}: {first_line}); no output was written (rank 0 writes only at the "
            "end, atomically). Rerun the stage",
            1,
        )
    return None, 0


def stage_main(main: Callable[[], None]) -> Callable[[], None]:
    """Wraps a stage's ``main``: sets up its log (:mod:`pipeline.core.logs`), and a :class:`UserError` prints one line
    (whatever the log level) and exits with status 1. SIGTERM or SIGINT stops it in one line, with status
    128 + the signal's number as a shell reports it, after its open MLflow runs are marked KILLED and its
    temporary files removed (finished outputs are whole: each is renamed into place only once written).

    Set ``PIPELINE_DEBUG=1`` to see the full traceback instead.
    """

    @functools.wraps(main)
    def wrapper() -> None:
        # Under `python -m pipeline.X` the module is __main__; its spec keeps the real name.
        spec = main.__globals__.get("__spec__")
        module = spec.name if spec else main.__module__
        if module == "__main__":  # a script (`torchrun train_once.py`): its file names it, as a module's name would
            module = Path(main.__globals__.get("__file__", module)).stem
        stage = module.rsplit(".", 1)[-1]
        started = time.perf_counter()
        _stop_on_signals()
        _say_why_when_torchrun_stops_us(stage)
        try:
            setup_logging()
            if module.startswith("pipeline.stages."):
                with one_run_at_a_time(stage, sys.argv[1:]):
                    main()
            else:  # a tool (predict, compare): reads only, may run many at once
                main()
        except (KeyboardInterrupt, Exception) as error:  # SystemExit passes: argparse and main() say their own
            line, status = _one_line(error, stage, time.perf_counter() - started)
            if line is None:
                raise
            print(line, file=sys.stderr)
            raise SystemExit(status) from None
        _leave_process_group()
        logging.getLogger("pipeline.stages").info(f"stage {stage} finished in {time.perf_counter() - started:.1f} s")

    return wrapper


def tool_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The argument parser of a command line in ``pipeline.tools``: its module's docstring as the ``--help``
    text, kept as written."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
