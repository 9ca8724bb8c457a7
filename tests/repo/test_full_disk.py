"""A checkout on a full disk: writing the edit fails with ENOSPC. The pass fails with an error
that names the file and the cause (exit 1, not a crash report's exit 70), leaves no temporary
file behind, and the next pass, once there is room again, lands as usual.

The disk is filled for one file only: the temporary file a write goes through is made a
symbolic link to ``/dev/full``, whose every write fails with ENOSPC (the kernel's, as on a
full volume). The CLI runs in this process, so the temporary file's name (it bears the
process number) is known.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def checkout_with_demand(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })


def full(path: Path) -> None:
    path.symlink_to("/dev/full")


def lands_next(capsys, checkout: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, out + err
    assert "replicas: 3" in git(checkout, "show", "origin/main:sets/linux.yaml")
    assert git(checkout, "status", "--porcelain", "--ignored") == ""


def test_a_manifest_that_cannot_be_written_is_an_error_and_nothing_is_left(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = checkout_with_demand(tmp_path)
    before = git(checkout, "rev-parse", "HEAD")
    full(checkout / "sets" / f".linux.yaml.gitscale-{os.getpid()}.tmp")

    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))

    assert code == 1, out + err
    assert f"error: {checkout}: cannot write sets/linux.yaml: No space left on device; " \
           "nothing was committed, and the files are as they were" in err
    assert "crashed" not in err and "Traceback" not in err
    assert git(checkout, "rev-parse", "HEAD") == before
    # no temporary file in the work tree, nothing staged, no record of a write in progress
    assert git(checkout, "status", "--porcelain", "--ignored") == ""
    assert not (checkout / ".git" / "gitscale-pending-write.json").exists()
    lands_next(capsys, checkout)


def test_the_record_of_the_edit_that_cannot_be_written_is_an_error_and_nothing_is_left(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = checkout_with_demand(tmp_path)
    record = checkout / ".git" / "gitscale-pending-write.json"
    temporary = record.with_name(f"{record.name}.{os.getpid()}.tmp")
    full(temporary)

    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))

    assert code == 1, out + err
    assert f"error: {checkout}: cannot write {record}: No space left on device (gitscale " \
           "records an edit there before making it); nothing was written" in err
    assert "crashed" not in err and "Traceback" not in err
    assert not temporary.exists() and not temporary.is_symlink()
    assert not record.exists()
    assert git(checkout, "status", "--porcelain", "--ignored") == ""
    lands_next(capsys, checkout)


def test_an_edit_that_cannot_be_put_back_is_left_to_the_next_run(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The commit fails (git's prepare-commit-msg hook refuses, as git would on a full disk)
    and the manifest cannot be put back either: the commit's error is said, not a crash over
    it, and the record of the edit stays, so the next run discards it as its own."""
    checkout = checkout_with_demand(tmp_path)
    blocked = checkout / "sets" / f".linux.yaml.gitscale-{os.getpid()}.tmp"
    hook = checkout / ".git" / "hooks" / "prepare-commit-msg"
    hook.write_text(f"#!/bin/sh\nmkdir '{blocked}'\necho 'no room for the commit' >&2\n"
                    "exit 1\n")
    hook.chmod(0o755)

    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))

    assert code == 1, out + err
    assert "no room for the commit" in err
    assert "crashed" not in err and "Traceback" not in err
    assert (checkout / ".git" / "gitscale-pending-write.json").exists()
    hook.unlink()
    blocked.rmdir()
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, out + err
    assert "discarded the leftovers of an interrupted gitscale run: uncommitted edit of " \
           "sets/linux.yaml" in out + err
    assert "replicas: 3" in git(checkout, "show", "origin/main:sets/linux.yaml")
