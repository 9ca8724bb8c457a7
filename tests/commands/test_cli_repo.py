"""The everyday CLI: `--repo` on init, crd and demo (and why not on the controller), and the
shell completion the README documents."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gitscale import __version__
from gitscale.controller.crd import crd_yaml
from tests.helpers import RUNNERSET, git, make_repo, run

SCAFFOLD_CRD = "clusters/prod/gitscale-system/crd.yaml"


def commits(repo: Path) -> int:
    return int(git(repo, "rev-list", "--count", "HEAD"))


def test_init_takes_repo_as_its_directory(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run(capsys, "init", "--repo", str(tmp_path / "a"), "--gitops", "flux")
    assert code == 0, err
    assert (tmp_path / "a" / SCAFFOLD_CRD).read_text() == crd_yaml()
    code, _, err = run(capsys, "init", str(tmp_path / "b"), "--repo", str(tmp_path / "c"),
                       "--gitops", "flux")
    assert code == 1 and "differ: give one" in err
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    code, out, err = run(capsys, "init", "--gitops", "argocd")  # like `git init`: here
    assert code == 0, err
    assert (tmp_path / "here" / "argocd" / "application.yaml").is_file()


@pytest.mark.parametrize("command", ["plan", "validate", "history", "reconcile", "drain"])
def test_repo_in_a_subfolder_or_no_checkout_says_where_to_point_it(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, command: str) -> None:
    """Run from clusters/prod of the config repo, the advice was "git init it", which would
    nest a second repo in the checkout."""
    repo = make_repo(tmp_path, {"sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0)},
                     bare_remote=False)
    extra = ["linux"] if command == "drain" else []
    code, _, err = run(capsys, command, *extra, "--repo", str(repo / "sets"))
    assert code == 1, err
    assert (f"error: {repo / 'sets'}: is inside the checkout {repo.resolve()}, not its top: "
            f"gitscale reads the config repo from its root (--repo {repo.resolve()})") in err
    assert "git init" not in err
    (tmp_path / "plain").mkdir()
    code, _, err = run(capsys, command, *extra, "--repo", str(tmp_path / "plain"))
    assert code == 1 and ": is not a git checkout: pass --repo with the config repo's checkout " \
        "or URL, or scaffold one with `gitscale init DIR`" in err, err
    assert commits(repo) == 1


def test_crd_repo_updates_the_scaffolds_copy_and_commits_only_it(tmp_path: Path,
                                                                capsys) -> None:  # type: ignore[no-untyped-def]
    repo = tmp_path / "config"
    assert run(capsys, "init", str(repo), "--gitops", "flux")[0] == 0
    before = commits(repo)
    code, out, _ = run(capsys, "crd", "--repo", str(repo))
    assert code == 0 and f"{SCAFFOLD_CRD}: the RunnerSet CRD of gitscale" in out
    assert commits(repo) == before  # up to date: no commit
    crd = repo / SCAFFOLD_CRD
    crd.write_text(crd.read_text().replace("maximum: 2147483647", "maximum: 100"))
    (repo / "demand.yaml").write_text("linux: {queued: 9, running: 0}\n")
    git(repo, "add", "demand.yaml")  # someone's staged work stays staged, uncommitted
    git(repo, "commit", "-qm", "an older CRD", "--", SCAFFOLD_CRD)
    code, out, err = run(capsys, "crd", "--repo", str(repo))
    assert code == 0, err
    assert f"to {SCAFFOLD_CRD} and committed it" in out
    assert crd.read_text() == crd_yaml()
    assert git(repo, "show", "--name-only", "--format=%an: %s", "HEAD").splitlines() == [
        f"gitscale: gitscale crd: the RunnerSet CRD of gitscale {__version__}",
        "", SCAFFOLD_CRD]
    assert git(repo, "diff", "--cached", "--name-only") == "demand.yaml"


def test_crd_repo_refuses_what_it_cannot_do_safely(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    repo = make_repo(tmp_path, {
        "crds/all.yaml": crd_yaml() + "---\napiVersion: v1\nkind: Namespace\n"
                         "metadata: {name: ci}\n",
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
    }, bare_remote=False)
    code, _, err = run(capsys, "crd", "--repo", str(repo))
    assert code == 1 and "error: crds/all.yaml: holds the runnersets.gitscale.dev CRD among " \
                         "other objects" in err
    (repo / "crds/all.yaml").write_text(crd_yaml().replace("RunnerSet", "RunnerSat"))
    code, _, err = run(capsys, "crd", "--repo", str(repo))
    assert code == 1 and "crds/all.yaml: has uncommitted changes" in err
    code, _, err = run(capsys, "crd", "--repo", "https://git.example/config.git")
    assert code == 1 and "not the top of a git checkout" in err
    assert commits(repo) == 1 and "Traceback" not in err


def test_crd_repo_without_a_crd_writes_deploy_crds(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    repo = make_repo(tmp_path, {"sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0)},
                     bare_remote=False)
    code, out, err = run(capsys, "crd", "--repo", str(repo))
    assert code == 0, err
    written = repo / "deploy/crds/runnersets.gitscale.dev.yaml"
    assert yaml.safe_load(written.read_text())["metadata"]["name"] == "runnersets.gitscale.dev"
    assert commits(repo) == 2
    code, out, _ = run(capsys, "crd")  # without --repo: printed, as before
    assert code == 0 and out == crd_yaml()


def test_demo_repo_builds_where_asked(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "mine"
    code, out, err = run(capsys, "demo", "--repo", str(target))
    assert code == 0, err
    assert f"demo config repo: {target} (remote: {tmp_path / 'mine.remote.git'})" in out
    assert git(tmp_path / "mine.remote.git", "log", "-1", "--format=%s", "main").startswith(
        "gitscale: ")
    code, _, err = run(capsys, "demo", "--repo", str(target))
    assert code == 1 and "exists and is not empty" in err
    code, _, err = run(capsys, "demo", "--repo", str(tmp_path / "x"), "--dir", str(tmp_path))
    assert code == 1 and "give --dir or --repo, not both" in err


def test_the_controller_says_why_it_takes_no_repo(capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run(capsys, "controller", "--repo", ".")
    assert code == 1 and "reads RunnerSets from the cluster" in err
    code, out, _ = run(capsys, "controller", "--help")
    assert code == 0 and "It takes no --repo" in out


def test_shell_completion_as_the_readme_says() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert 'eval "$(_GITSCALE_COMPLETE=bash_source gitscale)"' in readme
    gitscale = [sys.executable, "-m", "gitscale"]
    script = subprocess.run(gitscale, env={**os.environ, "_GITSCALE_COMPLETE": "bash_source"},
                            capture_output=True, text=True, timeout=30)
    assert "_gitscale_completion()" in script.stdout
    answer = subprocess.run(gitscale, capture_output=True, text=True, timeout=30, env={
        **os.environ, "_GITSCALE_COMPLETE": "bash_complete", "COMP_WORDS": "gitscale run --me",
        "COMP_CWORD": "2"})
    assert answer.stdout.split() == ["plain,--metrics-listen"]


@pytest.mark.parametrize("on_path", [False, True], ids=["venv-not-on-path", "on-path"])
def test_the_demos_closing_hint_is_a_command_that_runs(tmp_path: Path, on_path: bool) -> None:
    """scripts/demo runs .venv/bin/gitscale, which is not on PATH: the hint names its path, so
    pasting it works; with that gitscale on PATH, the plain name."""
    exe = Path(sys.executable).with_name("gitscale")
    path = os.pathsep.join(([str(exe.parent)] if on_path else []) + ["/usr/bin", "/bin"])
    done = subprocess.run([str(exe), "demo", "--repo", str(tmp_path / "d")], text=True,
                          capture_output=True, env={**os.environ, "PATH": path}, timeout=120)
    assert done.returncode == 0, done.stderr
    hint = next(line for line in done.stdout.splitlines() if line.startswith("Try it yourself"))
    command = hint.split("`")[1].split()
    assert command[0] == ("gitscale" if on_path else str(exe))
    rerun = subprocess.run(command, text=True, capture_output=True,
                           env={**os.environ, "PATH": path}, timeout=120)
    assert rerun.returncode == 0, rerun.stderr  # nothing pending: the demo's second pass landed
    demand = tmp_path / "d" / "demand.yaml"
    demand.write_text(demand.read_text().replace("queued: ", "queued: 1"))  # 4 → 14, …
    land = next(line for line in done.stdout.splitlines() if line.startswith("To land it"))
    landed = subprocess.run(land.split("`")[1], shell=True, text=True, capture_output=True,
                            env={**os.environ, "PATH": path}, timeout=120)
    assert landed.returncode == 0, landed.stderr
    log = subprocess.run(["git", "-C", str(tmp_path / "d"), "log", "--format=%s", "-2"],
                         text=True, capture_output=True, check=True).stdout.splitlines()
    assert log[0].startswith("gitscale: ") and log[1] == "demand"
