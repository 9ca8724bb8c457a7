"""gitscale's cache files (`gitscale.files.write_cache`): written whole or not at all; a cache
that cannot be written is said once on stderr (until a write succeeds again), leaves no temporary file, and never stops a
pass. Tests may run as root, which ignores permission bits: the unwritable directory is a path
under a regular file, the failed rename a target that is a directory, and the full disk an
``ENOSPC`` raised by the writer the helper takes."""
from __future__ import annotations

import errno
import stat
from pathlib import Path
from typing import IO

import pytest
import yaml

from gitscale import files
from gitscale.clients.etags import EtagCache
from gitscale.files import write_cache
from gitscale.manifest import crd_schemas
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

WARNING = "warning: cannot write gitscale's cache in "


@pytest.fixture(autouse=True)
def _not_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "_cache_warned", [])  # once per process: this test's process


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_cache_file_is_written_whole_and_owner_only(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "cache" / "state.bin"
    assert write_cache(target, lambda out: out.write(b"abc"))
    assert target.read_bytes() == b"abc"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert leftovers(target.parent) == []
    assert capsys.readouterr().err == ""


def test_a_full_disk_leaves_no_temporary_file_and_is_said_once(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               capsys) -> None:
    def full(out: IO[bytes]) -> None:
        out.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    old = tmp_path / "state.bin"
    old.write_bytes(b"what the last run wrote")
    assert not write_cache(old, full)
    assert not write_cache(tmp_path / "other.bin", full)
    assert old.read_bytes() == b"what the last run wrote"  # never half a file
    assert leftovers(tmp_path) == []
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1, err
    assert f"{WARNING}{tmp_path}: No space left on device" in err
    assert "Traceback" not in err


def test_a_disk_full_again_after_a_write_succeeded_is_said_again(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                 capsys) -> None:
    """Once per streak, not once per process: a loop whose disk fills up again months after
    it was freed says so again (it said nothing more, ever)."""
    def full(out: IO[bytes]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "state.bin"
    for _ in range(2):
        assert not write_cache(target, full) and not write_cache(target, full)
        assert write_cache(target, lambda out: out.write(b"freed"))
    err = capsys.readouterr().err
    assert err.count(WARNING) == 2, err
    assert "the next process (a restart, the next CronJob run) starts without" in err


def test_a_failed_rename_removes_the_temporary_file(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "state.bin").mkdir()  # os.replace onto a directory fails
    assert not write_cache(tmp_path / "state.bin", lambda out: out.write(b"abc"))
    assert leftovers(tmp_path) == []
    assert "Is a directory" in capsys.readouterr().err


def test_the_etag_cache_on_an_unwritable_path_is_not_an_error(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               capsys) -> None:
    (tmp_path / "file").write_text("")
    cache = EtagCache(tmp_path / "file" / "sub" / "etags.json")
    cache.store("https://api.example/x", '"e1"', {"a": 1})
    cache.save()  # before: NotADirectoryError out of the pass
    assert cache.dirty  # kept, for the next save
    assert f"{WARNING}{tmp_path / 'file' / 'sub'}: Not a directory" in capsys.readouterr().err


def reconcile_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })


def test_reconcile_with_an_unwritable_cache_commits_and_says_so_once(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = reconcile_repo(tmp_path)
    (tmp_path / "volume").write_text("")  # the cache dir is under a regular file
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(tmp_path / "volume" / "gitscale"))
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    spec = yaml.safe_load(git(tmp_path / "remote.git", "show", "main:sets/linux.yaml"))["spec"]
    assert spec["replicas"] == 3
    assert err.count(WARNING) == 1, err
    assert f"{WARNING}{tmp_path / 'volume' / 'gitscale'}: Not a directory" in err
    assert "Traceback" not in err


def test_reconcile_whose_cache_writes_fail_leaves_no_temporary_files(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = reconcile_repo(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(cache))
    monkeypatch.setattr(crd_schemas, "_COMPILED", {})  # compiled (and cached on disk) again
    # every file a pass writes there is a directory already: each rename fails
    assert run(capsys, "reconcile", "--repo", str(checkout))[0] == 0
    names = sorted(p.name for p in cache.iterdir())
    for prefix in ("manifest-state.marshal", "config-", "validator-"):
        assert any(n.startswith(prefix) for n in names), names
    for name in names:
        (cache / name).unlink()
        (cache / name).mkdir()
    demand = tmp_path / "more.yaml"
    demand.write_text("linux: {queued: 5, running: 0}\n")
    monkeypatch.setattr(crd_schemas, "_COMPILED", {})
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 0, err
    assert git(tmp_path / "remote.git", "log", "-1", "--format=%s", "main") == "gitscale: linux 3→5"
    assert leftovers(cache) == [], sorted(p.name for p in cache.iterdir())
    assert err.count(WARNING) == 1 and "Is a directory" in err, err


def test_two_writers_of_one_file_at_once_both_land_whole(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The temporary file was named after the process alone: two threads of one process
    (serve's resync saving its ETags while SIGTERM saves them too) or two processes of one
    number in two containers (each PID 1, one cache volume) wrote one temporary file at once,
    and the second rename failed: `cannot write gitscale's cache …: No such file or directory;
    every run starts without it`, or a file of both writers' bytes."""
    import threading

    target = tmp_path / "etags.json"
    both_inside = threading.Barrier(2, timeout=10)
    results: list[bool] = []

    def writer(data: bytes) -> None:
        def write(out: IO[bytes]) -> None:
            out.write(data[:3])
            both_inside.wait()  # both temporary files open and half written
            out.write(data[3:])

        results.append(write_cache(target, write))

    threads = [threading.Thread(target=writer, args=(data,))
               for data in (b"first writer's bytes", b"second writer, longer bytes")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True, True]
    assert target.read_bytes() in (b"first writer's bytes", b"second writer, longer bytes")
    assert leftovers(tmp_path) == []
    assert capsys.readouterr().err == ""


def test_a_killed_writers_temporary_file_is_removed_by_a_later_run(tmp_path: Path) -> None:
    """A writer killed mid-write (SIGKILL, an OOM kill) left its temporary file for ever, one
    per kill, each as large as the state cache. The first cache write of a later process
    removes those over an hour old; a younger one may be a live writer's, and stays."""
    import os
    import time

    dead = tmp_path / ".manifest-state.pickle.4242.tmp"  # as named before this fix
    dead_too = tmp_path / ".etags-0123456789abcdef.json.4243.k2j4_x1q.tmp"
    live = tmp_path / ".manifest-state.pickle.4244.a8f_3kqz.tmp"
    unrelated = tmp_path / ".keep.tmp"
    for path in (dead, dead_too, live, unrelated):
        path.write_bytes(b"half a pickle")
    hours_ago = time.time() - 2 * 3600
    for path in (dead, dead_too, unrelated):
        os.utime(path, (hours_ago, hours_ago))
    files._swept.clear()
    assert write_cache(tmp_path / "manifest-state.pickle", lambda out: out.write(b"state"))
    assert leftovers(tmp_path) == sorted([live.name, unrelated.name])
    assert (tmp_path / "manifest-state.pickle").read_bytes() == b"state"


CHURN = """
import os, sys, time
directory, until = sys.argv[1], time.time() + float(sys.argv[2])
print("churning", flush=True)
while time.time() < until:  # another process's configs, written and pruned as fast as it can
    for n in range(20):
        name = os.path.join(directory, f"config-{n:032x}.pickle")
        try:
            open(name, "wb").close()
            os.unlink(name)
        except OSError:
            pass
"""


def test_configs_pruned_by_another_process_at_once_are_no_crash(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every save prunes the parsed configs to the newest 8 (``ConfigStore``): listed, then
    each one's mtime read. A file another gitscale process pruned in between (two processes
    sharing the cache directory) crashed the run, exit 70 with a FileNotFoundError — after
    `reconcile` had pushed. A listed name whose file is gone is the same thing made certain
    (a dangling symlink); the other process is a real one, writing and removing config files
    while six passes save theirs (13 of 25 such passes crashed)."""
    import subprocess
    import sys

    checkout = reconcile_repo(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(cache))
    for n in range(10):  # more than the 8 kept: every save prunes
        (cache / f"config-old{n:02d}.pickle").write_bytes(b"an older config")
    (cache / "config-gone.pickle").symlink_to(cache / "pruned-by-the-other-process")
    code, _, err = run(capsys, "plan", "--repo", str(checkout))
    assert code == 2 and "crashed" not in err, err
    assert len(list(cache.glob("config-*.pickle"))) == 8

    churn = subprocess.Popen([sys.executable, "-c", CHURN, str(cache), "60"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert churn.stdout is not None and churn.stdout.readline() == "churning\n"
        for queued in range(4, 10):
            demand = tmp_path / f"demand-{queued}.yaml"
            demand.write_text(f"linux: {{queued: {queued}, running: 0}}\n")
            code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand",
                                 str(demand))
            assert code == 0 and "crashed" not in err, out + err
    finally:
        churn.kill()
        churn.wait()
    assert git(tmp_path / "remote.git", "log", "-1", "--format=%s", "main") == \
        "gitscale: linux 8→9"
