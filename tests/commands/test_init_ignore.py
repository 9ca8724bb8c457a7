"""`gitscale init`'s steps have the user write credential files (tokens, a GitHub App's key,
webhook secrets) into the config repo's folder, to create Secrets from: the scaffold's
``.gitignore`` lists each, so the obvious ``git add -A && git commit && git push`` does not
publish them to every reader of the repo; a ``.gitignore`` that was there keeps every line; and
`gitscale validate` refuses a repo that tracks one."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gitscale.commands.init_ignore import CREDENTIAL_FILES, CREDENTIAL_PATTERNS
from tests.commands.init_variants import COMPLETE, init, options
from tests.commands.test_init_steps import SCHEDULERS, USER_FILES, VARIANTS, paste, \
    printed_steps, scaffold
from tests.helpers import git, run
from tests.ship.shipfiles import ROOT

URL = "https://git.example.com/ci/config.git"
NAMED = re.compile(r"\./([A-Za-z0-9][\w.-]*)")  # a file a command reads or writes, from DIR


def staged(root: Path) -> list[str]:
    git(root, "add", "-A")
    return git(root, "diff", "--cached", "--name-only").splitlines()


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("run_in", list(SCHEDULERS))
@pytest.mark.parametrize("gitops", ["argocd", "flux"])
def test_following_the_steps_then_git_add_all_stages_no_credential(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, run_in: str, variant: str) -> None:
    """The files a user brings, then steps 2 to 4 as printed (they write the Buildkite tokens,
    the notify secret) and, in the cluster, deploy/scaler/README.md's (serve's webhook secret):
    every file that leaves in DIR is ignored, so `git add -A` stages nothing."""
    root, out = scaffold(tmp_path, capsys, gitops, "--repo-url", URL, "--run-in", run_in,
                         "--notify-url", "https://hooks.example.com", *VARIANTS[variant])
    assert ".gitignore" in git(root, "ls-files").splitlines()  # committed with the scaffold
    for name in USER_FILES:
        (root / name).write_text(f"{name}-value-0123456789\n")
    done = paste(tmp_path, root, printed_steps(out, 2, 4))
    assert done.returncode == 0, done.stderr
    if run_in == "cluster":
        readme = (root / "deploy/scaler/README.md").read_text()
        (script,) = re.findall(r"```sh\n(.*?)```", readme, re.DOTALL)
        done = paste(tmp_path, root, script)
        assert done.returncode == 0, done.stderr
    made = sorted(p.name for p in root.iterdir() if p.is_file())
    assert set(USER_FILES) < set(made)  # (the steps made files of their own too)
    if variant == "buildkite":
        assert {"buildkite-agent-token", "buildkite-api-token"} <= set(made)
    assert staged(root) == []
    assert git(root, "status", "--porcelain") == ""


def _named_files(text: str) -> set[str]:
    return {m for m in NAMED.findall(text) if not m.endswith((".yaml", ".yml", ".md", ".sh"))}


def test_every_credential_file_the_steps_and_docs_name_is_ignored(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """Every ``./FILE`` init prints, its deploy/scaler/README.md, README and docs/credentials.md
    name
    (a file a command writes or reads a secret from) is a line of the scaffold's .gitignore."""
    named = _named_files((ROOT / "docs/credentials.md").read_text()
                         + (ROOT / "README.md").read_text()) - {"file"}  # (`NAME < ./file`)
    for n, (gitops, variant, run_in) in enumerate(
            (g, v, r) for g in ("argocd", "flux") for v in COMPLETE for r in SCHEDULERS):
        _, out = init(tmp_path, capsys, gitops, *options(gitops, variant, True, run_in),
                      "--notify-url", "https://hooks.example.com", name=f"c{n}")
        named |= _named_files(out)
        readme = tmp_path / f"c{n}" / "deploy/scaler/README.md"
        if readme.exists():
            named |= _named_files(readme.read_text())
    assert {"buildkite-graphql-token", "webhook-secret", "argocd-webhook-secret",
            "flux-receiver-token", "github-app.private-key.pem"} <= named
    assert named <= set(CREDENTIAL_FILES), named - set(CREDENTIAL_FILES)
    ignore = (tmp_path / "c0" / ".gitignore").read_text()
    assert set(CREDENTIAL_FILES) <= set(ignore.splitlines())
    assert "never commit them" in ignore


@pytest.mark.parametrize("tracked", [True, False])
def test_a_gitignore_that_was_there_keeps_every_line(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                     tracked: bool) -> None:
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    mine = "# mine\n*.swp\n!keep.swp\nbuildkite-agent-token"  # (no final newline)
    (tmp_path / ".gitignore").write_text(mine)
    if tracked:
        git(tmp_path, "add", ".gitignore")
        git(tmp_path, "commit", "--quiet", "-m", "mine")
    code, _, err = run(capsys, "init", str(tmp_path), "--gitops", "flux")
    assert code == 0, err
    text = (tmp_path / ".gitignore").read_text()
    assert text.startswith(mine + "\n")
    lines = text.splitlines()
    assert lines.count("buildkite-agent-token") == 1  # listed already: not twice
    assert set(CREDENTIAL_FILES) <= set(lines)
    assert git(tmp_path, "show", "HEAD:.gitignore") == text.rstrip("\n")
    assert git(tmp_path, "status", "--porcelain") == ""


def test_a_gitignore_listing_them_all_is_left_alone(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    mine = "".join(f"/{name}\n" for name in CREDENTIAL_FILES + CREDENTIAL_PATTERNS)
    (tmp_path / ".gitignore").write_text(mine)
    code, out, err = run(capsys, "init", str(tmp_path), "--gitops", "argocd")
    assert code == 0, err
    assert (tmp_path / ".gitignore").read_text() == mine
    assert ".gitignore" not in git(tmp_path, "show", "--stat", "--format=", "HEAD")


def test_a_failed_init_gives_the_gitignore_its_text_back(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The commit fails (a pre-commit hook): nothing of the scaffold is kept, and the
    .gitignore that was there is as it was, on disk and in the index."""
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    mine = "*.swp\n"
    (tmp_path / ".gitignore").write_text(mine)
    git(tmp_path, "add", ".gitignore")
    git(tmp_path, "commit", "--quiet", "-m", "mine")
    hook = tmp_path / ".git/hooks/pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    code, _, err = run(capsys, "init", str(tmp_path), "--gitops", "flux")
    assert code == 1 and "Traceback" not in err, err
    assert (tmp_path / ".gitignore").read_text() == mine
    assert not (tmp_path / "gitscale.yaml").exists()
    assert git(tmp_path, "status", "--porcelain") == ""


@pytest.mark.parametrize("name", ["buildkite-agent-token", "deploy/github-app.private-key.pem"])
def test_validate_refuses_a_repo_that_tracks_a_credential_file(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, name: str) -> None:
    root, _ = init(tmp_path, capsys, "flux", *options("flux", "buildkite", True))
    assert run(capsys, "validate", "--repo", str(root))[0] == 0
    (root / name).write_text("bkua_S3cr3t0123456789\n")
    git(root, "add", "-f", name)  # past the .gitignore
    git(root, "commit", "--quiet", "-m", "oops")
    code, out, err = run(capsys, "validate", "--repo", str(root))
    assert code == 1, (out, err)
    assert f"error: {name}: a credential file is committed" in err
    assert f"git rm --cached {name}" in err and "bkua_" not in out + err
    assert "1 problem" in out


def test_validate_takes_a_credential_file_git_crypt_encrypts(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """git-crypt and transcrypt keep a credential in the repo encrypted, under its own name:
    tracked on purpose (a ``filter`` of ``.gitattributes``), not refused. Git LFS's filter
    stores the file as plainly as the repo: refused still."""
    root, _ = init(tmp_path, capsys, "flux", *options("flux", "buildkite", True))
    (root / ".gitattributes").write_text("secrets/** filter=git-crypt diff=git-crypt\n"
                                         "*.pem filter=lfs\n")
    (root / "secrets").mkdir()
    (root / "secrets" / "buildkite-agent-token").write_bytes(b"\x00GITCRYPT\x00...")
    (root / "github-app.private-key.pem").write_text("-----BEGIN RSA PRIVATE KEY-----\n")
    git(root, "add", "-f", ".gitattributes", "secrets/buildkite-agent-token")
    git(root, "commit", "--quiet", "-m", "the agent token, encrypted")
    assert run(capsys, "validate", "--repo", str(root))[0] == 0
    git(root, "add", "-f", "github-app.private-key.pem")
    git(root, "commit", "--quiet", "-m", "oops")
    code, out, err = run(capsys, "validate", "--repo", str(root))
    assert code == 1, (out, err)
    assert "error: github-app.private-key.pem: a credential file is committed" in err
    assert "secrets/buildkite-agent-token" not in err


def test_a_github_app_key_under_its_download_name_is_ignored_and_refused(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """GitHub names an App's private key `<app>.<date>.private-key.pem` when it downloads it,
    and step 3 says to use "the .pem as downloaded": saved into the config repo's folder under
    that name, `git add -A` staged it and `validate` passed the repo that published it."""
    root, _ = init(tmp_path, capsys, "argocd", "--github-app-id", "123456")
    downloaded = "acme-ci-runners.2026-11-27.private-key.pem"
    (root / downloaded).write_text("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n")
    assert staged(root) == []
    git(root, "add", "-f", downloaded)  # past the .gitignore
    git(root, "commit", "--quiet", "-m", "oops")
    code, out, err = run(capsys, "validate", "--repo", str(root))
    assert code == 1 and f"error: {downloaded}: a credential file is committed" in err, err
    assert "MIIE" not in out + err
