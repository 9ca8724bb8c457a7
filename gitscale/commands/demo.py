"""`gitscale demo`: a config repo with a bare remote and a demand file, then a full cycle.

Everything is local: no token, no cluster. The demo shows exactly what a user would run.
"""
from __future__ import annotations

import shutil
import tempfile
from importlib import resources
from pathlib import Path

import click

from gitscale.commands import EXIT_ERROR, RepoOptions
from gitscale.config import DEFAULT_CONFIG
from gitscale.commands.history import run_history
from gitscale.commands.plan import run_plan
from gitscale.commands.reconcile import run_reconcile
from gitscale.errors import GitscaleError, InputError
from gitscale.files import first_missing
from gitscale.repo.git import Git


def build_demo_repo(directory: Path, checkout: Path | None = None,
                    remote: Path | None = None) -> tuple[Path, Path]:
    """Create ``remote.git`` (bare) and ``config`` (its clone) with the embedded example, in
    ``directory`` unless given."""
    remote, checkout = remote or directory / "remote.git", checkout or directory / "config"
    Git(directory).run("init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    Git(directory).run("init", "--quiet", "--initial-branch=main", str(checkout))
    _copy_tree(resources.files("gitscale.data").joinpath("demo"), checkout)
    repo = Git(checkout)
    repo.run("add", "--all")
    repo.run("commit", "--quiet", "-m", "Add runner sets")
    repo.run("remote", "add", "origin", str(remote))
    repo.run("push", "--quiet", "--set-upstream", "origin", "main")
    return remote, checkout


def _copy_tree(source: resources.abc.Traversable, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name.startswith("__"):
            continue
        if item.is_dir():
            _copy_tree(item, dest / item.name)
        else:
            (dest / item.name).write_bytes(item.read_bytes())


def _build(base: Path, checkout: Path, remote: Path) -> None:
    """``build_demo_repo``, whole or not at all: a folder that cannot be written (read-only, a
    full disk, a path under a file) is an error naming it, and what the demo had created by
    then is removed."""
    created = [p for p in (first_missing(base), checkout, remote) if p is not None
               and not p.exists()]
    try:
        base.mkdir(parents=True, exist_ok=True)
        build_demo_repo(base, checkout, remote)
    except (OSError, GitscaleError) as exc:
        for path in created:
            shutil.rmtree(path, ignore_errors=True)
        if isinstance(exc, OSError):  # (mkdir -p says "File exists" of a file on the way)
            why = "Not a directory" if isinstance(exc, FileExistsError) else \
                exc.strerror or type(exc).__name__
            raise InputError(str(exc.filename or base), f"cannot be written: {why}; nothing "
                             "was kept") from None
        raise


def run_demo(directory: str | None, repo: str | None = None) -> int:
    if directory and repo:
        raise InputError("--repo", "give --dir or --repo, not both")
    if repo:  # the checkout at REPO, its remote beside it
        checkout = Path(repo).expanduser().absolute()
        remote = checkout.parent / f"{checkout.name}.remote.git"
        base = checkout.parent
        for path in (checkout, remote):
            if path.exists() and (not path.is_dir() or any(path.iterdir())):
                raise InputError(str(path), "exists and is not empty; pick a new path for the "
                                 "demo")
        _build(base, checkout, remote)
    else:
        base = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="gitscale-demo-"))
        if base.exists() and any(base.iterdir()):
            raise InputError(str(base), "is not empty; pick a new directory for the demo")
        remote, checkout = base / "remote.git", base / "config"
        _build(base, checkout, remote)
    demand = str(checkout / "demand.yaml")
    opts = RepoOptions(str(checkout), None, DEFAULT_CONFIG)

    def step(title: str) -> None:
        click.secho(f"\n$ {title}", bold=True)

    click.echo(f"demo config repo: {checkout} (remote: {remote})")
    step(f"gitscale plan --repo {checkout} --demand {demand}")
    code = run_plan(opts, demand=demand, now=None, output="text")
    click.echo(f"(exit {code}: 2 means changes are pending)")
    step(f"gitscale reconcile --repo {checkout} --demand {demand}")
    if run_reconcile(opts, demand=demand, now=None, push=True) != 0:
        return EXIT_ERROR
    step(f"gitscale reconcile --repo {checkout} --demand {demand}   # again: nothing to do")
    run_reconcile(opts, demand=demand, now=None, push=True)
    step(f"gitscale history --repo {checkout}")
    run_history(opts, only=None, since=None, output="text", chart=None)
    step(f"git -C {checkout} show HEAD")
    click.echo(Git(checkout).run("show", "--format=fuller", "HEAD").stdout)
    click.echo(f"Try it yourself: edit {demand} and run "
               f"`{_command()} plan --repo {checkout}` (files are kept in {base}).")
    # reconcile refuses a checkout with edits not on its remote (it would push them unreviewed).
    click.echo(f"To land it, commit and push the edit first: `git -C {checkout} commit -qam "
               f"demand && git -C {checkout} push -q && {_command()} reconcile --repo "
               f"{checkout}`")
    if repo:
        click.echo(f"Remove it with: rm -rf {checkout} {remote}")
    elif directory is None:
        click.echo(f"Remove it with: rm -rf {base.resolve()}")
    return 0


def _command() -> str:
    """How to call this gitscale again: its name when the shell finds this one on PATH, else
    its path (scripts/demo runs it from .venv/bin, which is not on PATH)."""
    import shutil
    import sys
    from pathlib import Path

    here = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    on_path = shutil.which("gitscale")
    if here is None or not here.name.startswith("gitscale") or (
            on_path is not None and Path(on_path).resolve() == here):
        return "gitscale"
    return str(here)
