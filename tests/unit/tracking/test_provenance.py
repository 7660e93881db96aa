"""pipeline.tracking.provenance: the git commit and whether the sources differ from it, read once per process."""

from __future__ import annotations


def test_git_dirty_looks_at_sources_and_params_only(tmp_path, monkeypatch):
    import subprocess

    from pipeline.tracking.provenance import _git_state, git_state

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "a.py").write_text("x = 1\n")
    (tmp_path / "params.yaml").write_text("seeds: [0]\n")
    (tmp_path / "metrics.json").write_text("{}\n")
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.json").unlink()  # what `dvc repro` does to a stage's git-tracked outputs
    _git_state.cache_clear()
    assert git_state()["git_dirty"] == "false"
    (tmp_path / "params.yaml").write_text("seeds: [1]\n")
    assert git_state()["git_dirty"] == "false", "read once per process: a stage's runs share one answer"
    _git_state.cache_clear()
    assert git_state()["git_dirty"] == "true"
    _git_state.cache_clear()


def test_outside_git_the_commit_and_dirty_flag_are_unknown(tmp_path, monkeypatch):
    from pipeline.tracking.provenance import _git_state, git_state

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above tmp_path either
    monkeypatch.chdir(tmp_path)
    _git_state.cache_clear()
    try:
        assert git_state() == {"git_commit": "unknown", "git_dirty": "unknown"}
    finally:
        _git_state.cache_clear()
