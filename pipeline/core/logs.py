"""The library's log: modules log through ``logging.getLogger(__name__)``; a stage process gets one handler on
stderr, set up by :func:`pipeline.core.entry.stage_main`.

``PIPELINE_LOG_LEVEL`` sets how much a stage says: ``INFO`` (the default: a line per epoch, trained run and
output), ``DEBUG`` (also every scored step of every run, so a long ``dvc repro`` shows where it stands),
``WARNING`` (quiet: warnings only). ``PIPELINE_LOG_FILE`` appends the same lines, time-stamped, to a file.
The one-line error of a failed stage is printed whatever the level.
"""

from __future__ import annotations

import logging
import os
import sys

from pipeline.core.errors import UserError
from pipeline.core.redaction import redact

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
stage_log = logging.getLogger("pipeline.stages")  # a stage module runs as __main__: its lines go here


class _StageFormatter(logging.Formatter):
    """``message`` for INFO and below, ``warning: message`` above: the look the stages' output always had;
    credentials masked (:func:`~pipeline.core.redaction.redact`)."""

    def format(self, record: logging.LogRecord) -> str:
        message = redact(super().format(record))
        return message if record.levelno <= logging.INFO else f"{record.levelname.lower()}: {message}"


class _RedactingFormatter(logging.Formatter):
    """The log file's time-stamped lines, credentials masked as on stderr."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the line (pytest's capture swaps it per test)."""

    stream = property(lambda self: sys.stderr, lambda self, value: None)


def setup_logging() -> None:
    """The ``pipeline`` logger's handlers for this process, from ``PIPELINE_LOG_LEVEL`` and ``PIPELINE_LOG_FILE``;
    calling it again replaces them (a test may run several stages in one process)."""
    level = os.environ.get("PIPELINE_LOG_LEVEL", "INFO").upper()
    if level not in LEVELS:
        raise UserError(f"PIPELINE_LOG_LEVEL is {level!r}; set it to one of {', '.join(LEVELS)} (or unset it)")
    logger = logging.getLogger("pipeline")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    console = _Stderr()
    console.setFormatter(_StageFormatter("%(message)s"))
    logger.addHandler(console)
    if path := os.environ.get("PIPELINE_LOG_FILE"):
        to_file = logging.FileHandler(path, encoding="utf-8")
        to_file.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(to_file)
    logger.setLevel(level)
    logger.propagate = False  # a library user's root handler does not print every line twice
