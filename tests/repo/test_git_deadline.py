"""Every git command gitscale starts ends by ``GITSCALE_GIT_TIMEOUT``: a remote on 127.0.0.1 that
accepts connections and never answers held `plan`, `reconcile` and `run` for ever. Stopped, git
takes its helpers (git-remote-http, a remote helper's children) with it."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitscale.errors import GitError, InputError
from gitscale.repo.deadline import DEFAULT_TIMEOUT, descendants, git_timeout
from gitscale.repo.git import Git
from tests.repo.stuck import alive, install_stuck_helper


def processes_naming(text: str) -> list[int]:
    """The processes whose command line holds ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = (Path("/proc") / entry / "cmdline").read_bytes().replace(b"\0", b" ")
            state = (Path("/proc") / entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


def test_a_git_daemon_that_never_answers_is_given_up_at_the_deadline(
        tmp_path: Path, black_hole: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "1")
    began = time.monotonic()
    with pytest.raises(GitError) as raised:
        Git(tmp_path).run("ls-remote", f"git://127.0.0.1:{black_hole}/config.git")
    assert time.monotonic() - began < 8
    assert str(raised.value).startswith("git ls-remote did not finish within 1 s and was "
                                        "stopped (GITSCALE_GIT_TIMEOUT sets the limit)")


def test_plan_on_an_http_remote_that_never_answers_exits_1_and_leaves_no_helper(
        tmp_path: Path, black_hole: int) -> None:
    url = f"http://127.0.0.1:{black_hole}/stalled-{os.getpid()}.git"
    env = {**os.environ, "GITSCALE_GIT_TIMEOUT": "2s", "GITSCALE_CACHE_DIR": str(tmp_path)}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gitscale", "plan", "--repo", url,
                           "--demand", os.devnull], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - began
    assert done.returncode == 1, done.stderr
    assert "git clone did not finish within 2 s and was stopped" in done.stderr
    assert "Traceback" not in done.stderr
    assert took < 20, f"plan took {took:.1f} s"
    # git-remote-http named the URL in its argv: it was ended with git, not left hanging
    deadline = time.monotonic() + 5
    while processes_naming(url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_naming(url) == []


def test_a_streamed_read_is_ended_at_the_deadline_with_the_helpers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids_file = install_stuck_helper(tmp_path, monkeypatch)
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "1.5")
    with pytest.raises(GitError, match=r"^git ls-remote did not finish within 1.5 s"):
        list(Git(tmp_path).records("ls-remote", "stuck::nowhere", separator="\n"))
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)], "the helper or its child outlived git"


def test_binary_output_has_the_deadline_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_stuck_helper(tmp_path, monkeypatch)
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "1")
    with pytest.raises(GitError, match=r"^git ls-remote did not finish within 1 s"):
        Git(tmp_path).run_bytes("ls-remote", "stuck::nowhere")


def test_the_command_timed_out_is_named_past_git_s_own_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(``fetch_objects`` runs ``git -c … fetch``: it said "git -c did not finish")"""
    install_stuck_helper(tmp_path, monkeypatch)
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "1")
    with pytest.raises(GitError, match=r"^git ls-remote did not finish within 1 s"):
        Git(tmp_path).run("-c", "fetch.negotiationAlgorithm=noop", "--literal-pathspecs",
                          "ls-remote", "stuck::nowhere")


def test_a_command_that_ends_in_time_is_untouched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "30")
    git = Git(tmp_path)
    git.run("init", "--quiet")
    assert git.run("rev-parse", "--is-inside-work-tree").stdout == "true\n"
    assert git.run("hash-object", "--stdin", input="x\n").stdout.strip() == \
        "587be6b4c3f93f93c489c0111bba5596147a26cb"  # (input reaches git)
    assert git.run("rev-parse", "HEAD", check=False).code != 0  # (no commit: check=False)


@pytest.mark.parametrize(("value", "seconds"), [
    pytest.param("", DEFAULT_TIMEOUT, id="unset"),
    pytest.param("45", 45.0, id="seconds"),
    pytest.param("2.5", 2.5, id="fraction"),
    pytest.param("5m", 300.0, id="duration"),
])
def test_the_timeout_is_read_from_the_environment(
        value: str, seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", value)
    assert git_timeout() == seconds


@pytest.mark.parametrize("value", ["0", "soon", "-5", "1e9", "0s"])
def test_a_timeout_that_is_not_a_positive_duration_is_refused(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", value)
    with pytest.raises(InputError, match="GITSCALE_GIT_TIMEOUT.*expected a positive duration"):
        git_timeout()


def test_a_bad_timeout_is_a_clear_error_of_the_command(tmp_path: Path) -> None:
    env = {**os.environ, "GITSCALE_GIT_TIMEOUT": "soon", "GITSCALE_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "gitscale", "plan", "--repo", str(tmp_path),
                           "--demand", os.devnull], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "GITSCALE_GIT_TIMEOUT: expected a positive duration such as 120, 90s or 5m, got " \
           "'soon'" in done.stderr
    assert "Traceback" not in done.stderr


def test_git_ends_a_stalled_http_transfer_itself_unless_told_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_HTTP_LOW_SPEED_LIMIT", raising=False)
    monkeypatch.delenv("GIT_HTTP_LOW_SPEED_TIME", raising=False)
    env = Git(tmp_path).environment()
    assert (env["GIT_HTTP_LOW_SPEED_LIMIT"], env["GIT_HTTP_LOW_SPEED_TIME"]) == ("1000", "60")
    monkeypatch.setenv("GIT_HTTP_LOW_SPEED_TIME", "600")  # the caller's own, kept
    assert Git(tmp_path).environment()["GIT_HTTP_LOW_SPEED_TIME"] == "600"


def test_descendants_are_found_through_proc() -> None:
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        found: list[int] = []
        while len(found) < 2 and time.monotonic() < deadline:
            found = descendants(shell.pid)
            time.sleep(0.02)
        assert len(found) == 2
        assert all(b"sleep" in (Path("/proc") / str(p) / "cmdline").read_bytes()
                   for p in found)
    finally:
        for pid in descendants(shell.pid):
            os.kill(pid, 9)
        shell.kill()
        shell.wait()


# writes 300,000 bytes of records at once: more than one block, and more than a pipe holds
_MANY = "!f() { yes 'record;' | head -c 300000; }; f"


def test_a_streamed_read_counts_git_s_time_not_the_reader_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gitscale history | less` read slowly holds git's pipe full: git waits on the reader,
    and was ended at the deadline all the same, the history cut short by a timeout blamed on
    the remote."""
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "1")
    git = Git(tmp_path)
    git.run("init", "--quiet")
    read = []
    for number, block in enumerate(git.blocks("-c", f"alias.many={_MANY}", "many",
                                              separator=";")):
        read.append(block)
        if number == 0:
            time.sleep(2)  # a reader paging slowly, twice git's time
    assert len("".join(read)) == 300000


def test_a_blob_fetched_from_a_promisor_that_never_answers_is_given_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Git.blob`` in a partial clone (a checkout made with ``--filter=blob:none``) has git
    fetch the blob it lacks: from a remote that does not answer, for ever."""
    install_stuck_helper(tmp_path, monkeypatch)
    source = tmp_path / "source"
    subprocess.run(["git", "init", "--quiet", str(source)], check=True)
    (source / "a.yaml").write_text("replicas: 1\n")
    subprocess.run(["git", "-C", str(source), "add", "a.yaml"], check=True)
    subprocess.run(["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "--quiet", "-m", "one"], check=True)
    subprocess.run(["git", "-C", str(source), "config", "uploadpack.allowFilter", "true"],
                   check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--filter=blob:none", "--no-checkout",
                    f"file://{source}", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "remote", "set-url", "origin", "stuck::nowhere"],
                   check=True)
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "1")
    with pytest.raises(GitError, match=r"^git show did not finish within 1 s"):
        Git(clone).blob("HEAD:a.yaml")
