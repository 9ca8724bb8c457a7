"""Hostile options, environments and tools, through the real CLI on real repos: each is a clear
error naming the option, the file and line or the tool, exit 1, no traceback, and nothing
written or left behind. Each case was a crash, a silent misreading or a leftover before."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitscale.manifest import kubeconform
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config, wait_for


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 5, running: 0}\n",
    })


def _unchanged(checkout: Path) -> tuple[str, str, str]:
    return (git(checkout, "rev-parse", "HEAD"),
            git(checkout.parent / "remote.git", "rev-parse", "main"),
            git(checkout, "status", "--porcelain", "--untracked-files=all"))


@pytest.mark.parametrize("argv", [
    pytest.param(["plan", "--demand", ""], id="plan-demand"),
    pytest.param(["reconcile", "--demand", ""], id="reconcile-demand"),
    pytest.param(["run", "--demand", "", "--max-passes", "1"], id="run-demand"),
    pytest.param(["history", "--chart", ""], id="history-chart"),
    pytest.param(["simulate", "--trace", ""], id="simulate-trace"),
    pytest.param(["simulate", "--synthetic", "steady", "--chart", ""], id="simulate-chart"),
])
def test_a_file_option_given_empty_is_an_error_not_left_out(checkout: Path, capsys,  # type: ignore[no-untyped-def]
                                                            argv: list[str]) -> None:
    """`--demand "$DEMAND"` with the variable unset read the real sources instead of the
    file, and reconcile committed what they said."""
    before = _unchanged(checkout)
    code, out, err = run(capsys, *argv, "--repo", str(checkout))
    option = argv[argv.index("") - 1]
    assert (code, err) == (1, f"error: {option}: is empty: give a file's path, or leave the "
                              "option out\n"), out
    assert _unchanged(checkout) == before


EMPTY_REPO = "is empty: give the config repo (a checkout, a bare repo or a URL), or leave the option out"
EMPTY_BRANCH = "is empty: give a branch's name, or leave the option out"


@pytest.mark.parametrize(("argv", "said"), [
    pytest.param(["reconcile", "--repo", "{remote}", "--branch", ""], EMPTY_BRANCH,
                 id="reconcile-branch"),
    pytest.param(["plan", "--repo", "{remote}", "--branch", ""], EMPTY_BRANCH, id="plan-branch"),
    pytest.param(["drain", "linux", "--repo", "{remote}", "--branch", ""], EMPTY_BRANCH,
                 id="drain-branch"),
    pytest.param(["history", "--repo", "{remote}", "--branch", ""], EMPTY_BRANCH,
                 id="history-branch"),
    pytest.param(["simulate", "--synthetic", "steady", "--repo", "{remote}", "--branch", ""],
                 EMPTY_BRANCH, id="simulate-branch"),
    pytest.param(["init", "{new}", "--gitops", "flux", "--branch", ""], EMPTY_BRANCH,
                 id="init-branch"),
    pytest.param(["reconcile", "--repo", ""], EMPTY_REPO, id="reconcile-repo"),
    pytest.param(["plan", "--repo", ""], EMPTY_REPO, id="plan-repo"),
    pytest.param(["validate", "--repo", ""], EMPTY_REPO, id="validate-repo"),
    pytest.param(["simulate", "--synthetic", "steady", "--repo", ""], EMPTY_REPO,
                 id="simulate-repo"),
    pytest.param(["init", "--repo", "", "--gitops", "flux"], EMPTY_REPO, id="init-repo"),
    pytest.param(["crd", "--repo", ""], EMPTY_REPO, id="crd-repo"),
    pytest.param(["reconcile", "--repo", "{checkout}", "--config", ""],
                 "is empty: give a file's path, or leave the option out", id="reconcile-config"),
])
def test_a_repo_option_given_empty_is_an_error_not_left_out(  # type: ignore[no-untyped-def]
        checkout: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch,
        argv: list[str], said: str) -> None:
    """`--branch "$BRANCH"` with the variable unset committed to the remote's default branch,
    and `--repo "$REPO"` worked on whatever the current directory held (`init` scaffolded
    into it): an option given empty is the same mistake as `--demand ""`, not the option left
    out."""
    monkeypatch.chdir(checkout)
    remote = checkout.parent / "remote.git"
    before = _unchanged(checkout)
    argv = [a.format(remote=remote, checkout=checkout, new=tmp_path / "new") for a in argv]
    code, out, err = run(capsys, *argv)
    option = argv[argv.index("") - 1]
    assert (code, err) == (1, f"error: {option}: {said}\n"), out
    assert _unchanged(checkout) == before and not (tmp_path / "new").exists()


@pytest.mark.parametrize("command", ["plan", "reconcile", "history"])
def test_git_missing_from_path_is_an_error_not_a_crash(checkout: Path, command: str) -> None:
    before = _unchanged(checkout)
    env = {**os.environ, "PATH": str(checkout / "no-such-bin"), "GITSCALE_CACHE_DIR": ""}
    result = subprocess.run([sys.executable, "-m", "gitscale", command, "--repo", str(checkout)],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 1, result
    assert result.stderr.startswith("error: git is not installed or not on PATH"), result.stderr
    assert "Traceback" not in result.stderr and "crashed" not in result.stderr
    assert _unchanged(checkout) == before


@pytest.mark.parametrize(("script", "said"), [
    pytest.param("#!/bin/sh\nexec sleep 30\n", "gave no answer within 1 s", id="hangs"),
    pytest.param("\x7fELF not really\n", "cannot be run: Exec format error", id="not-a-program"),
    pytest.param("#!/bin/sh\necho '[1, 2]'\n", "kubeconform: [1, 2]", id="json-not-a-report"),
    pytest.param("#!/bin/sh\necho '{\"resources\": [7, null]}'\nexit 1\n", "kubeconform: failed",
                 id="resources-not-objects"),
])
def test_a_kubeconform_on_path_that_misbehaves_is_an_error_naming_it(
        checkout: Path, capsys, monkeypatch: pytest.MonkeyPatch, script: str,  # type: ignore[no-untyped-def]
        said: str) -> None:
    """A hang was a crash after 120 s (TimeoutExpired), a file that is not a program and an
    answer of another shape were crashes at once; reconcile refuses the pass the same way."""
    tools = checkout.parent / "bin"
    tools.mkdir()
    (tools / "kubeconform").write_text(script)
    (tools / "kubeconform").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(kubeconform, "KUBECONFORM_TIMEOUT", 1)
    before = _unchanged(checkout)
    for command in ("validate", "reconcile"):
        code, out, err = run(capsys, command, "--repo", str(checkout))
        assert code == 1, (command, out, err)
        assert said in out + err and "sets/linux.yaml" in out + err, (command, out, err)
        assert "Traceback" not in out + err and "crashed" not in out + err
    assert _unchanged(checkout) == before


def _running(marker: str) -> list[str]:
    """The processes whose command line holds ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().decode(
                    errors="replace"):
                found.append(proc.name)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("command", ["validate", "reconcile"])
def test_a_kubeconform_that_hangs_is_waited_for_once_a_pass_and_ended_with_its_children(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
        command: str) -> None:
    """Each manifest waited the whole timeout (120 s) in turn: a pass of 20 changed files
    hung 40 minutes, past `run`'s pass watch; and a wrapper script's child was left running,
    holding kubeconform's pipes. Now the first file waits, the others are refused at once,
    and the hung kubeconform's process group is ended."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"a": "default", "b": "default", "c": "default"}),
        **{f"sets/{n}.yaml": RUNNERSET.format(name=n, replicas=2) for n in "abc"},
        "demand.yaml": "a: {queued: 5, running: 0}\nb: {queued: 5, running: 0}\n"
                       "c: {queued: 5, running: 0}\n",
    })
    marker = f"kubeconform-child-{os.getpid()}-{id(tmp_path)}"
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "kubeconform").write_text(f"#!/bin/sh\nsh -c 'sleep 30; : {marker}'\n")
    (tools / "kubeconform").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(kubeconform, "KUBECONFORM_TIMEOUT", 1)
    before = _unchanged(checkout)
    code, out, err = run(capsys, command, "--repo", str(checkout))
    said = out + err
    assert code == 1, said
    assert all(f"sets/{name}.yaml: kubeconform: " in said for name in "abc"), said
    assert said.count("kubeconform gave no answer within 1 s") == 3, said
    assert said.count("gave no answer within 1 s on sets/") == 2, said  # waited once
    # killed with its group (SIGKILL): gone once the kernel has run the kill, a moment later
    # on a loaded machine (it was still there when looked at at once, 1 run in ~30)
    assert wait_for(lambda: not _running(marker), timeout=10)
    assert _unchanged(checkout) == before


@pytest.mark.parametrize(("argv", "said"), [
    pytest.param(["--health-port", "70000"], "'--health-port': 70000 is not in the range",
                 id="port-too-big"),
    pytest.param(["--health-port", "-1"], "'--health-port': -1 is not in the range",
                 id="port-negative"),
    pytest.param(["--shutdown-timeout", "nan"], "'--shutdown-timeout': 'nan' is not a number",
                 id="shutdown-nan"),
    pytest.param(["--renew-deadline", "nan"], "'--renew-deadline': 'nan' is not a number",
                 id="renew-nan"),
    pytest.param(["--retry-period", "nan"], "'--retry-period': 'nan' is not a number",
                 id="retry-nan"),
    pytest.param(["--namespace", "CI_Runners"], "error: --namespace: 'CI_Runners' is not a "
                 "Kubernetes namespace name", id="namespace"),
    pytest.param(["--leader-elect", "--leader-election-namespace", "a.b"],
                 "error: --leader-election-namespace: 'a.b' is not a Kubernetes namespace "
                 "name", id="lease-namespace"),
])
def test_controller_options_out_of_range_are_refused_before_it_starts(
        capsys, tmp_path: Path, argv: list[str], said: str) -> None:  # type: ignore[no-untyped-def]
    """Each was taken: a port above 65535 failed only after the cluster was reached, nan
    seconds and a namespace no object can have were used as they were."""
    code, out, err = run(capsys, "controller", *argv, "--kubeconfig", str(tmp_path / "none"))
    assert code == 1 and said in err, (out, err)
    assert "no usable Kubernetes configuration" not in err  # refused before the cluster


def _not_a_folder(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("x")
    return tmp_path / "a-file" / "inside"


@pytest.mark.parametrize("argv", [
    pytest.param(["demo", "--dir", "{target}"], id="demo-dir"),
    pytest.param(["demo", "--repo", "{target}"], id="demo-repo"),
    pytest.param(["init", "{target}", "--gitops", "argocd"], id="init"),
])
def test_a_folder_that_cannot_be_written_is_an_error_and_nothing_is_kept(
        tmp_path: Path, capsys, argv: list[str]) -> None:  # type: ignore[no-untyped-def]
    """demo crashed (exit 70) on a path under a file or a read-only mount; init and demo left
    what they had written before a full disk stopped them."""
    target = _not_a_folder(tmp_path)
    code, out, err = run(capsys, *[a.format(target=target) for a in argv])
    assert code == 1 and "cannot be written: Not a directory" in err, (out, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_init_takes_back_what_it_wrote_when_its_commit_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A pre-commit hook of the checkout refusing init's commit left thirteen files written
    and staged in the person's checkout."""
    repo = tmp_path / "ci-config"
    repo.mkdir()
    git(repo, "init", "-q", "--initial-branch=main")
    (repo / "README.md").write_text("mine\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-qm", "mine")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'no commits today' >&2\nexit 1\n")
    hook.chmod(0o755)
    code, out, err = run(capsys, "init", str(repo), "--gitops", "flux")
    assert code == 1 and "no commits today" in err, (out, err)
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md"]
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(repo, "log", "--format=%s") == "mine"


@pytest.mark.parametrize(("option", "value", "said"), [
    pytest.param("--path", ".git/hooks", "'.git/hooks' is inside .git", id="path-in-dot-git"),
    pytest.param("--repo-url", "https://git.example/ci-config.git\nkind: Secret",
                 "holds a blank, a tab or a line break", id="repo-url-newline"),
    pytest.param("--repo-url", "https://git.example/ci config.git", "holds a blank",
                 id="repo-url-blank"),
    pytest.param("--notify-url", "https://argocd.example\t", "holds a blank",
                 id="notify-url-tab"),
])
def test_init_refuses_paths_and_urls_it_would_write_broken(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                            option: str, value: str,
                                                            said: str) -> None:
    """--path .git/hooks wrote the scaffold, then failed at the commit and left it there; a
    --repo-url with a line break was written into the Application and the Secret commands."""
    code, out, err = run(capsys, "init", str(tmp_path / "new"), "--gitops", "argocd",
                         option, value)
    assert code == 1 and err.startswith(f"error: {option}: ") and said in err, (out, err)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("path", [
    pytest.param("../../etc/passwd", id="outside"),
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param('"demand\\n.yaml"', id="newline"),
])
def test_a_demand_file_path_outside_the_repo_names_the_sets_source_line(
        tmp_path: Path, capsys, path: str) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}).replace(
            "{file: demand.yaml}", f"{{file: {path}}}"),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
    })
    before = _unchanged(checkout)
    code, out, _ = run(capsys, "plan", "--repo", str(checkout))
    assert code == 1 and "gitscale.yaml:4: runner set 'linux': source.file: " in out, out
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "gitscale.yaml:4: " in err and "left untouched" in err, err
    assert _unchanged(checkout) == before


@pytest.mark.parametrize("value", ['"true"', '"TRUE"', "true", '"false"', "false", '""'])
def test_paused_takes_true_and_false_in_any_case(tmp_path: Path, capsys, value: str) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2).replace(
            "  name: linux\n", f"  name: linux\n  annotations:\n    gitscale.dev/paused: {value}\n"),
        "demand.yaml": "linux: {queued: 5, running: 0}\n",
    })
    code, out, err = run(capsys, "plan", "--repo", str(checkout))
    paused = value.strip('"').lower() == "true"
    assert (code, "first-write" in out) == ((0, False) if paused else (2, True)), (out, err)


def test_set_names_from_commits_are_drawn_as_text(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                  checkout: Path) -> None:
    """A Gitscale-Set trailer is anyone's text: `$\\frac{a}$` was parsed as matplotlib math and
    crashed history --chart (exit 70), and an escape character reached the terminal inside a
    missing-glyph warning that quoted matplotlib's source."""
    for name in ("$\\frac{a}$", "\x1b[31mred", "a$b"):
        git(checkout, "commit", "--allow-empty", "-qm",
            f"gitscale: odd\n\nGitscale-Set: {name} replicas=1 previous=0 patch=1")
    chart = tmp_path / "history.svg"
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--chart", str(chart))
    assert (code, err) == (0, ""), err
    drawn = chart.read_text()
    assert "\x1b" not in drawn and "\\x1b[31mred" in drawn


@pytest.mark.parametrize("command", [["history"], ["simulate", "--synthetic", "steady",
                                                   "--hours", "0.5"]])
def test_a_chart_path_that_is_a_directory_says_so(checkout: Path, tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                  command: list[str]) -> None:
    """It was refused as "not 'a file without a suffix'"."""
    code, out, err = run(capsys, *command, "--repo", str(checkout), "--chart", str(tmp_path))
    assert (code, err) == (1, f"error: {tmp_path}: is a directory; name the chart's file, "
                              f"such as {tmp_path / 'history.svg'}\n"), out


def test_a_serve_claim_that_is_not_utf_8_names_its_line(checkout: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """plan and reconcile read every .gitscale/*.yaml for the sets serve scales: a file in
    another encoding was "cannot be read: 'utf-8' codec can't decode byte 0xe9 in position
    30"."""
    (checkout / ".gitscale").mkdir()
    (checkout / ".gitscale" / "reservations.yaml").write_bytes(b"served: [linux]\n# caf\xe9\n")
    git(checkout, "add", ".gitscale")
    git(checkout, "commit", "-qm", "a claim")
    git(checkout, "push", "-q")
    before = _unchanged(checkout)
    for command in ("plan", "reconcile"):
        code, out, err = run(capsys, command, "--repo", str(checkout))
        assert (code, err) == (1, "error: .gitscale/reservations.yaml:2: is not UTF-8 text: byte "
                                  "0xe9 at column 6; save the file as UTF-8\n"), out
    assert _unchanged(checkout) == before
