"""Credentials never leave the process in the clear: every line the pipeline logs or prints passes :func:`redact`.

A tracking URI may carry a user and password (``http://alice:<password>@host``) and MLflow reads tokens and
passwords from the environment (``MLFLOW_TRACKING_PASSWORD``, ``MLFLOW_TRACKING_TOKEN``, a cloud store's keys).
MLflow's own exceptions quote the URI whole, so a warning about a dead server would print the password and
``PIPELINE_LOG_FILE`` keep it. SECURITY.md says where credentials are read and that they are never written.
"""

from __future__ import annotations

import os
import re

MASK = "***"
# user:password@ in any URL; the user stays so that a reader still sees which account was used
_USERINFO = re.compile(r"(?P<prefix>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):(?P<secret>[^@/\s]+)@")
# ?token=... / &password=... in a query string
_QUERY = re.compile(r"(?P<prefix>[?&](?:access_token|token|password|secret|sig|key)=)(?P<secret>[^&\s#]+)", re.I)
# environment variables whose value is a credential (MLflow's, the object stores DVC and MLflow reach)
_SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|ACCESS_KEY|API_KEY|CREDENTIALS", re.I)
_SHORTEST_SECRET = 4  # shorter values ("1", "true") would mask ordinary words


def secret_values(environ: os._Environ | dict[str, str] | None = None) -> list[str]:
    """The values of the environment's credential variables, longest first (so that no prefix is masked alone)."""
    environ = os.environ if environ is None else environ
    values = {value for name, value in environ.items() if _SECRET_NAME.search(name) and len(value) >= _SHORTEST_SECRET}
    return sorted(values, key=len, reverse=True)


def redact(text: str, environ: os._Environ | dict[str, str] | None = None) -> str:
    """``text`` with every URL password, query-string token and credential variable's value shown as ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['prefix']}:{MASK}@", text)
    text = _QUERY.sub(lambda m: f"{m['prefix']}{MASK}", text)
    for value in secret_values(environ):
        text = text.replace(value, MASK)
    return text
