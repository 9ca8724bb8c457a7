"""The git a one-shot pass runs in its throwaway clone: HEAD read once for the check that the
repo has a commit and the pass's base, and nothing flushed to the disk for a clone deleted
after the pass. A base taken from that first read never outlives a move of HEAD (a sync)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitscale.repo.opening import open_workspace
from tests.helpers import git, run


def _traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    events = tmp_path / "trace.json"
    config = tmp_path / "gitconfig"
    config.write_text(f"[trace2]\n\teventTarget = {events}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    return events


def _reconcile_traced(checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys) -> tuple[str, list[list[str]]]:  # type: ignore[no-untyped-def]
    """Push what the test committed, then one traced `reconcile` in the checkout: its stderr
    and the argv (less `git`) of every git process the pass itself started."""
    git(checkout, "push", "--quiet")
    events = _traced(tmp_path, monkeypatch)
    monkeypatch.chdir(checkout)
    code, out, err = run(capsys, "reconcile", "--demand", "demand.yaml")
    assert code == 0, err
    assert "pushed to origin/main" in out
    seen = [json.loads(line) for line in events.read_text().splitlines()]
    return err, [e["argv"][1:] for e in seen
                 if e["event"] == "start" and e["sid"].count("/") == 0]


@pytest.mark.parametrize("url", [pytest.param(False, id="bare path"),
                                 pytest.param(True, id="file URL")])
def test_a_pass_reads_head_once_and_flushes_nothing_in_its_clone(
        remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,  # type: ignore[no-untyped-def]
        url: bool) -> None:
    git(remote, "config", "uploadpack.allowFilter", "true")
    before = git(remote, "rev-parse", "main")
    events = _traced(tmp_path, monkeypatch)
    code, out, err = run(capsys, "reconcile", "--repo", remote.as_uri() if url else str(remote),
                         "--demand", str(tmp_path / "config" / "demand.yaml"))
    seen = [json.loads(line) for line in events.read_text().splitlines()]  # (the pass's only)
    assert code == 0, err
    assert "committed" in out
    after = git(remote, "rev-parse", "main")
    assert git(remote, "rev-parse", "main^") == before  # committed on the commit it read
    assert "replicas: 1" not in git(remote, "show", "main:sets/linux.yaml")
    ours = [e["argv"][1:] for e in seen if e["event"] == "start" and e["sid"].count("/") == 0]
    reads = [argv for argv in ours if argv[0] == "rev-parse" and "--git-path" not in argv
             and "--is-bare-repository" not in argv]
    assert reads == [["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]], ours
    assert any(argv[0] == "fast-import" for argv in ours), ours
    # no process of the pass's own (the remote's side of the push is the remote's) flushed
    clone_side = {e["sid"] for e in seen if e["event"] == "start"
                  and "receive-pack" not in " ".join(e["argv"])}
    flushed = [e for e in seen if e["event"] == "data" and e.get("key") == "fsync/hardware-flush"
               and e["sid"] in clone_side]
    assert flushed == [], flushed
    assert after != before


def test_the_base_read_at_opening_is_not_taken_after_a_sync(remote: Path,
                                                            tmp_path: Path) -> None:
    checkout = tmp_path / "config"
    first = git(remote, "rev-parse", "main")
    with open_workspace(str(remote), None, sparse=True) as ws:
        assert ws.base() == first
        git(checkout, "commit", "--quiet", "--allow-empty", "-m", "another writer")
        git(checkout, "push", "--quiet")
        newer = git(remote, "rev-parse", "main")
        assert ws.base() == first  # (the clone has not moved yet)
        ws.sync()
        assert ws.base() == newer
    with open_workspace(str(remote), None, sparse=True) as ws:
        git(checkout, "commit", "--quiet", "--allow-empty", "-m", "and another")
        git(checkout, "push", "--quiet")
        ws.sync()  # before the first base: the commit read when the clone was opened is stale
        assert ws.base() == git(remote, "rev-parse", "main") != newer


def test_a_pass_whose_git_config_asks_commit_for_more_commits_through_git_commit(
        remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys) -> None:  # type: ignore[no-untyped-def]
    """The configuration is read while the edits are validated (``ask_commit_config``), and
    its answer still sends the commit through ``git commit`` (here: hooks from elsewhere)."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    marker = tmp_path / "hook-ran"
    hook = hooks / "post-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    events = _traced(tmp_path, monkeypatch)
    with (tmp_path / "gitconfig").open("a") as config:
        config.write(f"[core]\n\thooksPath = {hooks}\n")
    before = git(remote, "rev-parse", "main")
    code, out, err = run(capsys, "reconcile", "--repo", str(remote),
                         "--demand", str(tmp_path / "config" / "demand.yaml"))
    seen = [json.loads(line) for line in events.read_text().splitlines()]
    assert code == 0, err
    argvs = [e["argv"][1:] for e in seen if e["event"] == "start" and e["sid"].count("/") == 0]
    ours = [argv[0] for argv in argvs]
    assert "commit" in ours, ours
    # fast-import only stored the blobs (``stage_files``): it did not commit
    assert not any("--cat-blob-fd=1" in argv for argv in argvs), argvs
    assert ours.index("config") < ours.index("commit")
    assert marker.exists()  # git commit ran the configured hook
    assert git(remote, "rev-parse", "main^") == before


def _older_runnerset_crd() -> str:
    """gitscale's RunnerSet CRD without its newest field: what `crd --repo` wrote for an
    older gitscale, which a pass warns about after its push."""
    import yaml

    from gitscale.manifest.crd_drift import shipped_text

    crd = yaml.safe_load(shipped_text())
    for version in crd["spec"]["versions"]:
        del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["backlog"]
    return yaml.safe_dump(crd)


def test_a_pass_in_a_checkout_asks_git_each_question_once(
        remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys) -> None:  # type: ignore[no-untyped-def]
    """The cron job's case (`reconcile --repo .` in a CI checkout): the upstream's two settings
    in one `git config`, the lock's and the write record's paths in one `rev-parse`, the
    fetched tip and HEAD in one, and the CRD check after the push taking the pass's listing of
    the index (no `ls-files` and `diff-files` again) — with the same warning."""
    checkout = tmp_path / "config"
    crd = "clusters/prod/gitscale-system/crd.yaml"
    (checkout / crd).parent.mkdir(parents=True)
    (checkout / crd).write_text(_older_runnerset_crd())
    git(checkout, "add", crd)
    git(checkout, "commit", "--quiet", "-m", "an older CRD")
    err, ours = _reconcile_traced(checkout, tmp_path, monkeypatch, capsys)
    assert f"warning: {crd}: older than this gitscale's RunnerSet CRD" in err
    verbs = [argv[0] for argv in ours]
    assert verbs.count("config") == 1 and ["config", "--null", "--list"] in ours, ours
    assert [a for a in ours if "--git-path" in a] == [
        ["rev-parse", "--git-path", "gitscale.lock", "--git-path",
         "gitscale-pending-write.json"]], ours
    assert ["rev-parse", "FETCH_HEAD", "HEAD"] in ours, ours
    assert verbs.count("ls-files") == verbs.count("diff-files") == 1, ours  # the plan's only
    assert verbs.index("diff-files") < verbs.index("push")
    assert "replicas: 1\n" not in git(remote, "show", "main:sets/linux.yaml")


def test_a_crd_the_pass_changes_is_listed_again_after_the_push_in_a_checkout(
        remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys) -> None:  # type: ignore[no-untyped-def]
    """A set whose manifest is a file where the CRD may be (`…/gitscale-system/crd.yaml`):
    the commit changed it, so the check after the push lists the index again."""
    checkout = tmp_path / "config"
    moved = "clusters/prod/gitscale-system/crd.yaml"
    (checkout / moved).parent.mkdir(parents=True)
    git(checkout, "mv", "sets/linux.yaml", moved)
    config = (checkout / "gitscale.yaml").read_text()
    (checkout / "gitscale.yaml").write_text(config.replace("sets/linux.yaml", moved))
    git(checkout, "commit", "--quiet", "-am", "the set where a CRD may be")
    _, ours = _reconcile_traced(checkout, tmp_path, monkeypatch, capsys)
    verbs = [argv[0] for argv in ours]
    assert verbs.count("ls-files") == verbs.count("diff-files") == 2, verbs
    assert verbs.index("push") < len(verbs) - 1 - verbs[::-1].index("diff-files")


UPSTREAMS = """\
[branch "a"]
\tremote
\tmerge = refs/heads/a
[branch "B.x"]
\tremote = first
\tremote = second
\tmerge = refs/heads/bx
[Branch "c"]
\tREMOTE = up
\tmerge = refs/heads/c
[branch.D]
\tremote = old
\tmerge = refs/heads/d
[branch "e"]
\tremote = .
\tmerge = refs/heads/main
[branch "f"]
\tremote = origin
"""


@pytest.mark.parametrize("branch", ["a", "B.x", "b.x", "c", "C", "D", "d", "e", "f", "none"])
def test_the_upstream_read_in_one_process_is_what_git_config_says_of_each_key(
        tmp_path: Path, branch: str) -> None:
    """``Git.upstream`` reads both settings from one `git config --list`; each is the value
    `git config KEY` gives: the last of several, names in any case, the branch's as written,
    the old `[branch.D]` form (a lower-cased subsection), a key without a value."""
    from gitscale.repo.git import Git

    git(tmp_path, "init", "--quiet")
    with (tmp_path / ".git" / "config").open("a") as config:
        config.write(UPSTREAMS)

    def setting(key: str) -> str:
        result = Git(tmp_path).run("config", f"branch.{branch}.{key}", check=False)
        return result.stdout.strip()

    remote, merge = setting("remote"), setting("merge")
    expected = None if not remote or remote == "." or not merge \
        else (remote, merge.removeprefix("refs/heads/"))
    assert Git(tmp_path).upstream(branch) == expected
    assert (branch, expected) != ("B.x", None)  # (the table does hold upstreams)
