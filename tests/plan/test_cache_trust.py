"""The state cache, the parsed configs, the compiled schemas and the ETag caches are loaded only
from files of this user that no one else may write: pickles and marshalled code run what they
hold when loaded, so a file planted in a cache directory shared too widely must never be."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from gitscale.files import UntrustedCache, read_cache
from tests.helpers import RUNNERSET, make_repo, simple_config


class _Planted:
    """A pickle that, when loaded, writes a marker file (what an attacker's would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.write_text, (self.marker, "ran"))


def _plan(checkout: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitscale", "plan", "--repo", str(checkout),
         "--demand", str(checkout / "demand.yaml"), "--now", "2026-11-21T09:00:00Z"],
        text=True, capture_output=True, timeout=120,
        env={**os.environ, "GITSCALE_CACHE_DIR": str(cache)})


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{maxReplicas: 9}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
        "demand.yaml": "linux: {queued: 3, running: 0}\n"})


@pytest.mark.parametrize("spoil", [
    pytest.param(lambda path: path.chmod(0o666), id="world-writable"),
    pytest.param(lambda path: os.chown(path, 4321, 4321), id="another-user",
                 marks=pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")),
])
def test_a_cache_file_someone_else_could_write_is_never_loaded(
        tmp_path: Path, checkout: Path, spoil) -> None:  # type: ignore[no-untyped-def]
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    first = _plan(checkout, cache)
    assert first.returncode == 2, first.stderr
    state = next(cache.glob("config-*.pickle"))  # the parsed gitscale.yaml: a pickle
    # the file an attacker with write access to the directory puts there instead
    state.unlink()
    state.write_bytes(pickle.dumps(_Planted(marker)))
    state.chmod(0o600)
    spoil(state)
    again = _plan(checkout, cache)
    assert not marker.exists()
    assert again.returncode == 2, again.stderr  # the pass runs as without its cache
    assert f"not loading gitscale's cache file {state}" in again.stderr
    assert again.stderr.count("warning: not loading") == 1


def test_the_users_own_cache_file_is_loaded(tmp_path: Path, checkout: Path) -> None:
    """The control: the same planted pickle, owned by this user and written by no one else, is
    loaded (so the test above fails for the reason it says, not by accident)."""
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    assert _plan(checkout, cache).returncode == 2
    state = next(cache.glob("config-*.pickle"))
    state.write_bytes(pickle.dumps(_Planted(marker)))
    state.chmod(0o640)  # group-writable is fine too (an fsGroup volume): here only readable
    _plan(checkout, cache)
    assert marker.read_text() == "ran"


@pytest.mark.parametrize(("make", "said"), [
    pytest.param(lambda p: p.symlink_to(p.with_name("elsewhere")), "symbolic link", id="symlink"),
    pytest.param(lambda p: os.mkfifo(p), "not a regular file", id="fifo"),
    pytest.param(lambda p: p.mkdir(), "not a regular file", id="directory"),
])
def test_read_cache_refuses_what_is_not_a_plain_file(tmp_path: Path, make, said: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "state.pickle"
    (tmp_path / "elsewhere").write_bytes(b"x")
    make(path)
    with pytest.raises(UntrustedCache, match=said):
        read_cache(path)
    assert read_cache(tmp_path / "missing") is None
