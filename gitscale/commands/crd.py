"""`gitscale crd`: print the RunnerSet CRD, or with ``--repo`` bring the config repo's copy up to
this version of gitscale (the everyday step after upgrading it).

The CRD is found in the checkout by what it is (a file whose only object is the
CustomResourceDefinition ``runnersets.gitscale.dev``), wherever `init` or a person put it;
a repo without one gets ``deploy/crds/runnersets.gitscale.dev.yaml``. The file is written and
committed (that file only), never pushed: the push is the deployment, and it is the user's.
"""
from __future__ import annotations

from pathlib import Path

import click

from gitscale import __version__
from gitscale.commands import EXIT_OK
from gitscale.errors import InputError, ManifestError
from gitscale.plan.landing import HOLD_WAIT, say_on_stderr
from gitscale.repo.clone import is_url
from gitscale.repo.git import Git, is_work_tree
from gitscale.repo.checkout_lock import hold_checkout
from gitscale.controller.crd import crd_yaml
from gitscale.yamlio.read import load_documents

CRD_NAME = "runnersets.gitscale.dev"
DEFAULT_PATH = "deploy/crds/runnersets.gitscale.dev.yaml"


def run_crd(repo: str | None) -> int:
    text = crd_yaml()
    if repo is None:
        click.echo(text, nl=False)
        return EXIT_OK
    root = Path(repo).expanduser()
    if is_url(repo) or not root.is_dir() or not is_work_tree(root):
        raise InputError("--repo", f"{repo}: not the top of a git checkout; `crd --repo` writes "
                         "and commits the CRD in a checkout (push it yourself)")
    git = Git(root)
    # a gitscale pass writing in the same checkout is waited for (its commit, then this one)
    with hold_checkout(git, str(root), HOLD_WAIT, say_on_stderr):
        return _update(root, git, text)


def _update(root: Path, git: Git, text: str) -> int:
    paths = find_crd_files(root, git.run("ls-files", "-z", "--", "*.yaml", "*.yml")
                           .stdout.split("\0"))
    paths = paths or [DEFAULT_PATH]
    stale = [p for p in paths if _read(root / p) != text]
    if not stale:
        click.echo(f"{', '.join(paths)}: the RunnerSet CRD of gitscale {__version__}, up to date")
        return EXIT_OK
    dirty = set(git.dirty_tracked()) & set(stale)
    if dirty:
        raise InputError(sorted(dirty)[0], "has uncommitted changes; commit or discard them "
                         "first (nothing was written)")
    for rel in stale:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    git.run("add", "--", *stale)
    git.run("commit", "--quiet", "--no-verify", "-m",
            f"gitscale crd: the RunnerSet CRD of gitscale {__version__}", "--", *stale)
    click.echo(f"wrote the RunnerSet CRD of gitscale {__version__} to {', '.join(stale)} and "
               f"committed it ({git.out('rev-parse', '--short', 'HEAD')}); push it to deploy")
    return EXIT_OK


def find_crd_files(root: Path, paths: list[str]) -> list[str]:
    """The tracked files that hold the RunnerSet CRD. One that holds other objects too cannot
    be rewritten whole: an error naming it."""
    found = []
    for rel in filter(None, paths):
        path = root / rel
        if path.is_symlink() or not path.is_file():
            continue
        text = _read(path)
        if text is None or CRD_NAME not in text or "CustomResourceDefinition" not in text:
            continue
        try:
            docs = [d.data for d in load_documents(text, rel, ManifestError)
                    if d.data is not None]
        except ManifestError:
            continue  # not valid YAML: not a CRD gitscale could have written
        ours = [d for d in docs if isinstance(d, dict) and d.get("kind") ==
                "CustomResourceDefinition" and (d.get("metadata") or {}).get("name") == CRD_NAME]
        if ours and len(docs) > 1:
            raise InputError(rel, f"holds the {CRD_NAME} CRD among other objects; give it a "
                             "file of its own (or edit it by hand from `gitscale crd`)")
        if ours:
            found.append(rel)
    return found


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
