"""`gitscale drain SET` and `--resume` on a checkout with a local bare remote."""
from __future__ import annotations

from pathlib import Path

from tests.helpers import git, run
from tests.one_set import reconcile, setup, spec


def test_drain_and_resume(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, remote = setup(tmp_path)
    reconcile(capsys, checkout, tmp_path, 2, 0, "2026-11-21T09:00:00Z")
    code, out, err = run(capsys, "drain", "--repo", str(checkout), "linux")
    assert code == 0, err
    assert (spec(remote)["replicas"], spec(remote)["patchID"]) == (0, 0)
    assert "gitscale: linux 3→0" in git(remote, "log", "-1", "--format=%s", "main")
    # a drained set stays at 0 whatever the demand
    reconcile(capsys, checkout, tmp_path, 9, 0, "2026-11-21T09:05:00Z")
    assert spec(remote)["replicas"] == 0
    assert run(capsys, "drain", "--repo", str(checkout), "linux", "--resume")[0] == 0
    reconcile(capsys, checkout, tmp_path, 1, 0, "2026-11-21T09:06:00Z")
    assert spec(remote)["replicas"] == 2


def test_resume_removes_the_drained_annotation_and_names_a_pause(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """`drain --resume` on a set a person has also paused lifts the drain, but the loop leaves
    a paused set alone: the commit and a warning say so. The drained annotation goes (not
    "false"), byte for byte otherwise."""
    checkout, remote = setup(tmp_path)
    reconcile(capsys, checkout, tmp_path, 2, 0, "2026-11-21T09:00:00Z")
    assert run(capsys, "drain", "--repo", str(checkout), "linux",
               "--now", "2026-11-21T09:01:00Z")[0] == 0
    manifest = checkout / "sets/linux.yaml"
    drained = manifest.read_text()
    assert '    gitscale.dev/drained: "true"\n' in drained
    paused = drained.replace('    gitscale.dev/drained: "true"\n',
                             '    gitscale.dev/drained: "true"\n    gitscale.dev/paused: "true"\n')
    manifest.write_text(paused)
    git(checkout, "commit", "--quiet", "-am", "hold linux")
    git(checkout, "push", "--quiet")

    code, out, err = run(capsys, "drain", "--repo", str(checkout), "linux", "--resume",
                         "--now", "2026-11-21T09:02:00Z")
    assert code == 0, err
    body = git(remote, "log", "-1", "--format=%B", "main")
    assert "resumed, but still paused (annotation gitscale.dev/paused: \"true\")" in body
    assert "warning: linux: still paused (annotation gitscale.dev/paused: \"true\"): it stays " \
           "at its count until the annotation is removed" in err
    after = git(remote, "show", "main:sets/linux.yaml") + "\n"
    assert "gitscale.dev/drained" not in after
    # only the drained line and effectiveTime changed
    assert [line for line in after.splitlines() if line not in paused.splitlines()] == \
        ['  effectiveTime: "2026-11-21T09:02:00Z"']
    assert [line for line in paused.splitlines() if line not in after.splitlines()] == \
        ['    gitscale.dev/drained: "true"', '  effectiveTime: "2026-11-21T09:01:00Z"']
    # still paused: the loop leaves it at 0, and plan says why
    reconcile(capsys, checkout, tmp_path, 5, 0, "2026-11-21T09:03:00Z")
    assert spec(remote)["replicas"] == 0
    # resuming a set that is not drained changes nothing and says so
    code, out, err = run(capsys, "drain", "--repo", str(checkout), "linux", "--resume",
                         "--now", "2026-11-21T09:04:00Z")
    assert code == 0 and "not drained: nothing to resume" in out, out


def test_a_far_future_clock_commits_through_git_commit(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """`--now` takes any year up to 9000; `git commit` is handed the date as seconds since the
    epoch (`@N +0000`), which it takes for any year, not the RFC 3339 text (which git 2.39
    refuses from 2100 on: `fatal: invalid date format`)."""
    checkout, remote = setup(tmp_path)
    reconcile(capsys, checkout, tmp_path, 2, 0, "8999-12-31T00:00:00Z")  # in a checkout
    code, out, err = run(capsys, "drain", "--repo", str(remote), "linux",
                         "--now", "2100-01-01T00:00:00Z")  # over a bare repo
    assert code == 0, err
    code, out, err = run(capsys, "drain", "--repo", str(checkout), "linux", "--resume",
                         "--now", "9000-12-31T23:59:59Z")
    assert code == 0, err
    git(checkout, "pull", "--quiet", "--rebase")
    dates = git(checkout, "log", "-3", "--format=%aI %cI", "main").splitlines()
    assert dates == [f"{when} {when}" for when in (
        "9000-12-31T23:59:59+00:00", "2100-01-01T00:00:00+00:00", "8999-12-31T00:00:00+00:00")]
    assert spec(remote)["effectiveTime"] == "9000-12-31T23:59:59Z"
