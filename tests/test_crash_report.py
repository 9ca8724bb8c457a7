"""A crash report names what a bug report needs (issue 10, item 8)."""
from __future__ import annotations

import platform
import subprocess

from gitscale import __version__
from gitscale.crash import versions as _versions


def test_crash_report_header_names_gitscale_git_and_python() -> None:
    header = _versions().splitlines()
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    assert header[0] == f"gitscale {__version__}"
    assert header[1] == git
    assert header[2].startswith(f"Python {platform.python_version()} ")


def _crash(repo: str | None) -> int:
    raise RuntimeError("a bug in the command")


def test_a_crash_with_nowhere_to_write_prints_its_report(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """The controller runs with a read-only root filesystem and no volume (its Deployment
    mounts none): a crash outside the pass loop found no temporary directory for its report,
    and the OSError of writing it replaced exit 70 with a bare traceback. The report goes to
    stderr instead, which the pod's log keeps."""
    import tempfile

    from gitscale import cli
    from gitscale.commands import crd

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "read-only" / "tmp"))  # not there
    monkeypatch.setattr(crd, "run_crd", _crash)
    assert cli.main(["crd"]) == 70
    err = capsys.readouterr().err
    assert "gitscale crashed: this is a bug" in err and "no file could be written" in err
    assert f"gitscale {__version__}" in err
    assert "RuntimeError: a bug in the command" in err
    assert not (tmp_path / "read-only").exists()
