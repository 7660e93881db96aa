"""User-facing errors: one clear message naming the cause and the fix, never a bare traceback; a bad value in
params.yaml is a :class:`ConfigError` naming its key."""

from __future__ import annotations


class UserError(Exception):
    """A fault the user can fix (bad params, missing data, no network); its message says how."""


class ConfigError(UserError):
    """A value in params.yaml is missing, unknown, mistyped or out of range; ``key`` is its dotted path where
    one key is at fault (``load_params`` adds the line it is written on)."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def require(condition: bool, key: str, message: str) -> None:
    """Raises :class:`ConfigError` naming ``key`` (its dotted params.yaml path) and what is wrong, unless
    ``condition`` holds."""
    if not condition:
        raise ConfigError(f"params.yaml: {key} {message}", key)
