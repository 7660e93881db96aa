"""pipeline.core.errors: every error a user can fix is a UserError, the one kind stage_main turns into one line."""

from __future__ import annotations

import ast
from pathlib import Path

from pipeline.core.errors import ConfigError, UserError

PACKAGE = Path(__file__).resolve().parents[3] / "pipeline"


def test_config_errors_are_user_errors_and_keep_their_message():
    error = ConfigError("params.yaml: seeds must be a list")
    assert isinstance(error, UserError) and str(error) == "params.yaml: seeds must be a list"


def test_every_exception_class_the_library_defines_for_users_derives_from_user_error():
    """An error class named for the user (…Error raised with a fix in its message) outside this hierarchy would
    reach the user as a traceback: the library's own exception classes all derive from UserError, or are private
    (a leading underscore: caught inside their module)."""
    strays = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error") and not node.name.startswith("_"):
                bases = {ast.unparse(base) for base in node.bases}
                if not bases & {"UserError", "ConfigError"} and node.name != "UserError":
                    strays.append(f"{path.relative_to(PACKAGE.parent)}: {node.name}({', '.join(sorted(bases))})")
    assert strays == []
