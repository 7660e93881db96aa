"""pipeline.core.redaction: URL passwords, query tokens and credential variables' values are masked."""

from __future__ import annotations

import logging

from pipeline.core.logs import setup_logging
from pipeline.core.redaction import redact, secret_values


def test_a_url_password_is_masked_and_its_user_kept():
    line = "API request to http://alice:pa55-w0rd@127.0.0.1:5000/api/2.0/mlflow/runs failed"
    assert redact(line, environ={}) == "API request to http://alice:***@127.0.0.1:5000/api/2.0/mlflow/runs failed"
    assert redact("https://:t0ken@host/x and s3://bucket/a:b", environ={}) == "https://:***@host/x and s3://bucket/a:b"


def test_query_tokens_and_credential_variables_are_masked_but_ordinary_values_are_not():
    environ = {"MLFLOW_TRACKING_PASSWORD": "hunter22", "MLFLOW_TRACKING_TOKEN": "tok-abcdef", "PIPELINE_DEBUG": "1",
               "AWS_SECRET_ACCESS_KEY": "xyz", "HOME": "/root"}  # fmt: skip
    assert secret_values(environ) == ["tok-abcdef", "hunter22"]  # too short a value is no secret to hunt for
    text = "GET /x?run=1&token=abc123 failed for hunter22 with tok-abcdef, home /root"
    assert redact(text, environ) == "GET /x?run=1&token=*** failed for *** with ***, home /root"


def test_every_line_the_stage_log_writes_is_masked_on_stderr_and_in_the_log_file(tmp_path, monkeypatch, capsys):
    log_file = tmp_path / "stage.log"
    monkeypatch.setenv("PIPELINE_LOG_FILE", str(log_file))
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret-value")
    setup_logging()
    try:
        logging.getLogger("pipeline.tracking").warning(
            "MLflow start failed (http://bob:s3cret-value@10.0.0.1/api, password %s)", "s3cret-value"
        )
    finally:
        monkeypatch.delenv("PIPELINE_LOG_FILE")
        setup_logging()
    err = capsys.readouterr().err
    assert "s3cret-value" not in err and "http://bob:***@10.0.0.1/api" in err
    assert "s3cret-value" not in log_file.read_text() and "bob:***@" in log_file.read_text()
