"""A run killed with SIGKILL leaves its temporary clone behind; the next run removes it (and
nothing that belongs to a live process, another host or another user)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gitscale.repo import scratch as scratch
from tests.helpers import RUNNERSET, make_repo, run, simple_config


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_run_leaves_a_clone_that_the_next_run_removes(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    temp = tmp_path / "tmp"
    temp.mkdir()
    remote = str(tmp_path / "remote.git")
    # `run` keeps its clone between passes: kill it while it waits for the next one
    child = subprocess.Popen([sys.executable, "-m", "gitscale", "run", "--repo", remote,
                              "--interval", "1h"], env={**os.environ, "TMPDIR": str(temp)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    try:
        for line in child.stderr:
            if "pass at" in line:
                break
        clones = [p for p in temp.iterdir() if p.name.startswith("gitscale-clone.")]
        assert len(clones) == 1 and (clones[0] / "repo" / ".git").is_dir()
        assert f".{child.pid}." in clones[0].name
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert clones[0].exists()  # what the issue saw: the clone outlives the killed run

    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    code, out, err = run(capsys, "plan", "--repo", remote)
    assert code == 0, out + err  # the killed run had already landed its pass
    assert not clones[0].exists()
    assert not [p for p in temp.iterdir() if p.name.startswith("gitscale-")]  # and its own


def test_only_dead_processes_of_this_host_are_swept(tmp_path: Path) -> None:
    host = scratch._host()
    dead, alive = _dead_pid(), os.getppid()
    names = {
        "dead": f"gitscale-clone.{host}.{dead}.abc",
        "dead-askpass": f"gitscale-askpass.{host}.{dead}.abc",
        "alive": f"gitscale-clone.{host}.{alive}.abc",
        "mine": f"gitscale-clone.{host}.{os.getpid()}.abc",
        "other-host": f"gitscale-clone.elsewhere.{dead}.abc",
        "not-ours": f"something-else.{host}.{dead}.abc",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
    (tmp_path / "target").mkdir()
    (tmp_path / f"gitscale-clone.{host}.{dead}.link").symlink_to(tmp_path / "target")
    removed = scratch.sweep(str(tmp_path))
    assert sorted(p.name for p in removed) == sorted([names["dead"], names["dead-askpass"]])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {names[k] for k in ("alive", "mine", "other-host", "not-ours")} | {
        "target", f"gitscale-clone.{host}.{dead}.link"}


def test_a_restarted_container_sweeps_the_clone_of_its_previous_process_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container gitscale is process 1 again after a restart, in the same /tmp (an
    emptyDir) under the same host name: the old process 1's clone bears this process's number,
    but nobody holds its lock any more."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    host, me = scratch._host(), os.getpid()
    before = tmp_path / f"gitscale-clone.{host}.{me}.old"  # the previous process 1's
    before.mkdir()
    (before / scratch.LOCK).touch()
    (before / "repo").mkdir()
    legacy = tmp_path / f"gitscale-clone.{host}.{me}.legacy"  # an older gitscale's: no lock
    legacy.mkdir()
    made = scratch.make("clone")
    try:
        assert not before.exists()
        assert legacy.exists()  # judged by its number, as before: it may be this process's
        assert made.exists() and (made / scratch.LOCK).is_file()
        assert scratch.sweep(str(tmp_path)) == []  # its own, held: never swept
    finally:
        scratch.remove(made)
    assert not made.exists()


def test_a_live_process_keeps_its_directory_until_it_dies(tmp_path: Path) -> None:
    """Another process's directory is kept while it lives (its lock is held), and swept once
    it is killed — whatever its number (a number may be reused)."""
    code = ("import sys, tempfile; tempfile.tempdir = sys.argv[1]\n"
            "from gitscale.repo import scratch\n"
            "print(scratch.make('clone'), flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        made = Path(child.stdout.readline().strip())
        assert made.is_dir()
        renamed = made.with_name(made.name.replace(f".{child.pid}.", f".{os.getppid()}."))
        made.rename(renamed)  # as if its number were another live process's: the lock decides
        assert scratch.sweep(str(tmp_path)) == [] and renamed.exists()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert scratch.sweep(str(tmp_path)) == [renamed] and not renamed.exists()
