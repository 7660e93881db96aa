"""User-facing errors: one clear message naming the cause and the fix, never a bare traceback."""

from __future__ import annotations


class UserError(Exception):
    """A fault the user can fix (bad params, missing data, no network); its message says how."""
