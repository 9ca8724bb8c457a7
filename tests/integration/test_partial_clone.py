"""A pass over a URL clones without blobs and fetches what it reads in batches.

Served by a real ``git daemon`` (and ``git http-backend`` with a token) on loopback, with
``uploadpack.allowFilter`` on (a forge: GitHub, GitLab, Gitea) and off (a server that sends
everything). Every git process gitscale starts is counted from git's own trace (trace2).
"""
from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gitscale.plan.cache import StateCache
from gitscale.commands import RepoOptions, given_demand, pass_inputs
from gitscale.commands.reconcile import Planner
from gitscale.errors import GitError
from gitscale.repo.git import Git
from gitscale.repo.index import Tree
from gitscale.plan.landing import land
from gitscale.repo.opening import open_workspace
from tests.helpers import RUNNERSET, git
from tests.integration.conftest import GitDaemon, make_bare, rev, run_cli
from tests.integration.git_http import GitHTTPServer
from tests.integration.test_http_credentials import ArgvWatch

SETS = 24
NOW = "2026-03-02T09:00:00Z"
TEAM_POLICY = "minReplicas: 0\nmaxReplicas: 50\nbuffer: 0\nscaleDownDelay: 0s\n"


def repo_files(deployment: bool = False) -> dict[str, str]:
    """SETS RunnerSets in sets/, a policy preset only the repo has (so policies/ must be
    checked out), and optionally a Deployment (whose validation looks for CRDs in the repo)."""
    config = ["runnerSets:"]
    files = {"policies/team.yaml": TEAM_POLICY, "README.md": "runners\n"}
    for i in range(SETS):
        name = f"s{i:02d}"
        config += [f"  - name: {name}", f"    manifest: sets/{name}.yaml",
                   "    source: {file: demand.yaml}", "    policy: team"]
        files[f"sets/{name}.yaml"] = RUNNERSET.format(name=name, replicas=1)
    if deployment:
        config += ["  - name: web", "    manifest: apps/web.yaml",
                   "    object: {kind: Deployment, name: web}",
                   "    source: {file: demand.yaml}", "    policy: team"]
        files["apps/web.yaml"] = ("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
                                  "  name: web\nspec:\n  replicas: 1\n")
        files["crds/other.yaml"] = "# kind: CustomResourceDefinition (none here, only text)\n"
    files["gitscale.yaml"] = "\n".join(config) + "\n"
    files["demand.yaml"] = "{}\n"
    return files


def demand(tmp_path: Path, queued: dict[str, int], tag: str) -> str:
    """A demand file for every set: ``queued`` jobs, or none."""
    every = {f"s{i:02d}": 0 for i in range(SETS)} | queued
    path = tmp_path / f"demand-{tag}.json"
    path.write_text(json.dumps({name: {"queued": q, "running": 0}
                                for name, q in every.items()}))
    return str(path)


def allow_filters(bare: Path, allowed: bool) -> None:
    git(bare, "config", "uploadpack.allowFilter", "true" if allowed else "false")


class Trace:
    """git's trace2 events of every git process started with ``env``."""

    def __init__(self, tmp_path: Path, name: str = "trace") -> None:
        self.file = tmp_path / f"{name}.json"
        config = tmp_path / f"{name}.gitconfig"
        config.write_text(f"[trace2]\n\teventTarget = {self.file}\n")
        self.env = {"GIT_CONFIG_GLOBAL": str(config)}

    def argvs(self) -> list[list[str]]:
        if not self.file.exists():
            return []
        events = [json.loads(line) for line in self.file.read_text().splitlines()]
        return [e["argv"] for e in events if e["event"] == "start"]

    def fetches(self) -> list[list[str]]:
        """The `git fetch` processes: ours, and any git starts by itself for a missing object."""
        found = []
        for argv in self.argvs():
            args = argv[1:]
            while args[:1] == ["-c"]:
                args = args[2:]
            if args[:1] == ["fetch"]:
                found.append(argv)
        return found

    def clear(self) -> None:
        self.file.unlink(missing_ok=True)


def twin_remotes(git_server: GitDaemon, files: dict[str, str]) -> tuple[Path, Path]:
    """The same repository (the same commit) twice: filters allowed on one only."""
    on = git_server.create(files, "on.git")
    off = git_server.base / "off.git"
    shutil.copytree(on, off)
    git_server.repos.append("off.git")
    allow_filters(on, True)
    allow_filters(off, False)
    return on, off


def test_the_same_commit_lands_whether_the_server_allows_filters_or_not(
        git_server: GitDaemon, tmp_path: Path) -> None:
    on, off = twin_remotes(git_server, repo_files())
    first = demand(tmp_path, {f"s{i:02d}": 2 for i in range(SETS)}, "first")
    traces = {name: Trace(tmp_path, name) for name in ("on", "off")}
    for name in ("on", "off"):
        result = run_cli("reconcile", "--repo", git_server.url(f"{name}.git"), "--demand",
                         first, "--now", NOW, cwd=tmp_path, env=traces[name].env)
        assert result.code == 0, result
        assert "pushed" in result.out, result
        # git's "filtering not recognized by server" is not shown as if it were an error
        assert "warning" not in result.err.lower() and "filter" not in result.err, result
    assert rev(on) == rev(off)  # same tree, parent, identity, date and message
    assert len(git(on, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD").split()) == SETS

    # Filters allowed: no manifest came with the clone; the checkout (gitscale.yaml,
    # policies/) and the manifests the pass read (all, on this first pass) came in one
    # fetch each, not one per file. Without filters: everything came with the clone.
    assert len(traces["on"].fetches()) == 2, traces["on"].fetches()
    assert traces["off"].fetches() == []
    assert any("--filter=blob:none" in argv for argv in traces["off"].argvs())

    # The next pass: the state cache knows every manifest; three sets change, and their
    # three files are the only blobs fetched besides the checkout's, in one fetch.
    for trace in traces.values():
        trace.clear()
    second = demand(tmp_path, {f"s{i:02d}": 2 + (i in (3, 11, 20)) for i in range(SETS)},
                    "second")
    for name in ("on", "off"):
        result = run_cli("reconcile", "--repo", git_server.url(f"{name}.git"), "--demand",
                         second, "--now", "2026-03-02T09:01:00Z", cwd=tmp_path,
                         env=traces[name].env)
        assert result.code == 0, result
    assert rev(on) == rev(off)
    assert git(on, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD").split() == \
        ["sets/s03.yaml", "sets/s11.yaml", "sets/s20.yaml"]
    ours = [argv for argv in traces["on"].fetches() if "--quiet" in argv]
    assert len(traces["on"].fetches()) == 2 and len(ours) == 1, traces["on"].fetches()
    assert traces["off"].fetches() == []


def test_only_the_blobs_a_batch_reads_are_fetched_and_all_at_once(
        git_server: GitDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = git_server.create(repo_files())
    allow_filters(bare, True)
    trace = Trace(tmp_path)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", trace.env["GIT_CONFIG_GLOBAL"])
    with open_workspace(git_server.url(), None, sparse=True) as ws:
        assert ws.git.promisor == "origin"
        assert not (ws.root / "gitscale.yaml").exists()  # no checkout until a pass asks
        tree, config = pass_inputs(ws, "gitscale.yaml", StateCache())
        assert len(config.sets) == SETS  # the preset in policies/ was checked out
        assert (ws.root / "policies/team.yaml").read_text() == TEAM_POLICY
        assert not (ws.root / "sets").exists()

        def missing() -> set[str]:
            out = ws.git.out("rev-list", "--objects", "--missing=print", "--no-walk", "HEAD")
            return {line[1:] for line in out.splitlines() if line.startswith("?")}

        manifests = {p: b for p, b in tree.files().items() if p.startswith("sets/")}
        assert missing() == set(manifests.values())
        trace.clear()
        wanted = dict(list(manifests.items())[:5])
        contents = tree.read_blobs(wanted)
        assert {blob: data.decode() for blob, data in contents.items()} == {
            blob: RUNNERSET.format(name=Path(path).stem, replicas=1)
            for path, blob in wanted.items()}
        assert len(trace.fetches()) == 1
        assert missing() == set(manifests.values()) - set(wanted.values())
        trace.clear()
        tree.read_blobs(wanted)  # present now: nothing fetched
        assert trace.fetches() == []


def test_a_server_gone_after_the_clone_is_one_clear_error(
        git_server: GitDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = git_server.create(repo_files())
    allow_filters(bare, True)
    trace = Trace(tmp_path)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", trace.env["GIT_CONFIG_GLOBAL"])
    with open_workspace(git_server.url(), None, sparse=True) as ws:
        tree, _ = pass_inputs(ws, "gitscale.yaml", StateCache())
        git_server.stop()
        trace.clear()
        manifests = {p: b for p, b in tree.files().items() if p.startswith("sets/")}
        with pytest.raises(GitError) as failed:
            tree.read_blobs(manifests)
    assert "git -c fetch.negotiationAlgorithm=noop" in str(failed.value)
    assert len(trace.fetches()) == 1  # not one attempt per missing file


def test_a_partial_clone_with_history_finds_its_missing_blobs(
        git_server: GitDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only the one-commit clone of a pass: a head commit that does not touch the files
    asked about must not hide them from the lookup of what is missing."""
    bare = git_server.create(repo_files())
    allow_filters(bare, True)
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", git_server.url(), str(other))
    (other / "README.md").write_text("runners, and more\n")
    git(other, "-c", "user.name=Human", "-c", "user.email=h@example.com", "commit", "-qam", "doc")
    git(other, "push", "--quiet", "origin", "HEAD:main")
    clone = tmp_path / "partial"
    git(tmp_path, "clone", "--quiet", "--filter=blob:none", "--no-checkout", git_server.url(),
        str(clone))
    trace = Trace(tmp_path)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", trace.env["GIT_CONFIG_GLOBAL"])
    tree = Tree.read(Git(clone, promisor="origin"), sparse=True)
    wanted = {p: b for p, b in tree.files().items() if p.startswith("sets/s0")}
    assert len(tree.read_blobs(wanted)) == len(wanted) == 10
    assert len(trace.fetches()) == 1, trace.fetches()


@pytest.mark.parametrize("kept", [False, True], ids=["partial", "kept-by-run"])
def test_a_kept_clone_follows_the_remote(git_server: GitDaemon, tmp_path: Path,
                                         kept: bool) -> None:
    """`run` keeps its clone (whole: its sync brings each changed blob with its commit): sync
    (fetch + reset) and the next pass work, and see what others pushed meanwhile (a manifest,
    and a policy preset on disk); a partial clone could do the same."""
    bare = git_server.create(repo_files())
    allow_filters(bare, True)
    opts = RepoOptions(git_server.url(), None, "gitscale.yaml")
    now = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
    cache = StateCache()
    with open_workspace(git_server.url(), None, sparse=True, kept=kept) as ws:
        assert ws.git.promisor == (None if kept else "origin")
        first = demand(tmp_path, {"s01": 3}, "first")
        landed = land(ws, Planner(ws, opts, given_demand(first), lambda: now, cache), cache=cache)
        assert landed.pushed and rev(bare) == landed.commit

        other = tmp_path / "other"
        git(tmp_path, "clone", "--quiet", git_server.url(), str(other))
        (other / "sets/s05.yaml").write_text(RUNNERSET.format(name="s05", replicas=9))
        (other / "policies/team.yaml").write_text(TEAM_POLICY.replace("50", "40"))
        git(other, "-c", "user.name=Human", "-c", "user.email=h@example.com", "commit",
            "-qam", "by hand")
        git(other, "push", "--quiet", "origin", "HEAD:main")
        theirs = rev(bare)

        ws.sync()
        assert (ws.root / "policies/team.yaml").read_text() == TEAM_POLICY.replace("50", "40")
        second = demand(tmp_path, {"s01": 3, "s05": 4}, "second")
        landed = land(ws, Planner(ws, opts, given_demand(second), lambda: now, cache), cache=cache)
        assert landed.pushed and landed.commit == rev(bare)
        assert git(bare, "rev-parse", "HEAD~1") == theirs
        change = {c.name: c for c in landed.plan.changes}["s05"]
        assert (change.before.replicas, change.decision.replicas) == (9, 4)
        assert git(bare, "show", "HEAD:sets/s05.yaml").count("replicas: 4") == 1


def test_a_pass_that_looks_for_crds_fetches_the_repo_in_one_go(git_server: GitDaemon,
                                                               tmp_path: Path) -> None:
    """Validating a Deployment reads every file that may hold a CRD (git grep): in a partial
    clone the blobs it lacks come in one fetch first, not one fetch per file."""
    bare = git_server.create(repo_files(deployment=True))
    allow_filters(bare, True)
    trace = Trace(tmp_path)
    result = run_cli("reconcile", "--repo", git_server.url(), "--demand",
                     demand(tmp_path, {"web": 3}, "web"), "--now", NOW, cwd=tmp_path,
                     env=trace.env)
    assert result.code == 0, result
    assert "replicas: 3" in git(bare, "show", "HEAD:apps/web.yaml")
    assert len(trace.fetches()) <= 3, trace.fetches()  # checkout, manifests, the CRD search


def test_a_token_reaches_a_partial_clone_only_through_askpass(
        http_git_server: GitHTTPServer, tmp_path: Path) -> None:
    server, token = http_git_server, http_git_server.token
    bare = make_bare(server.project_root, "config.git", repo_files())
    allow_filters(bare, True)
    watch = ArgvWatch(token, f"127.0.0.1:{server.port}")
    server.on_request = watch
    trace = Trace(tmp_path)
    result = run_cli("reconcile", "--repo", server.url(), "--demand",
                     demand(tmp_path, {"s02": 5}, "http"), "--now", NOW, cwd=tmp_path,
                     env={**trace.env, "GITSCALE_GIT_TOKEN": token})
    assert result.code == 0, result
    assert "replicas: 5" in git(bare, "show", "HEAD:sets/s02.yaml")
    assert len(trace.fetches()) == 2  # the checkout's and the manifests', both authenticated
    assert watch.scans > 0 and watch.leaks == []
    for text in (result.out, result.err, trace.file.read_text(), "\n".join(server.log)):
        assert token not in text


def test_the_crd_check_after_a_pass_lists_the_tree_the_pass_listed(
        git_server: GitDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The landed commit holds the files of the commit the pass read, but those it changed:
    when none of those may hold the CRD, the check takes the pass's listing (no `ls-tree`);
    when one may, it lists the commit again. Either way the warning is the same."""
    from gitscale.commands.reconcile import crd_warnings

    ours = "clusters/prod/gitscale-system/crd.yaml"
    bare = git_server.create({**repo_files(), ours: _older_runnerset_crd()})
    allow_filters(bare, True)
    opts = RepoOptions(git_server.url(), None, "gitscale.yaml")
    now = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
    trace = Trace(tmp_path)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", trace.env["GIT_CONFIG_GLOBAL"])

    def listings() -> int:
        count = sum(1 for argv in trace.argvs() if "ls-tree" in argv)
        trace.clear()
        return count

    cache = StateCache()
    with open_workspace(git_server.url(), None, sparse=True) as ws:
        listed = given_demand(demand(tmp_path, {"s01": 3}, "listed"))
        planner = Planner(ws, opts, listed, lambda: now, cache)
        landed = land(ws, planner, cache=cache)
        assert landed.pushed and "sets/s01.yaml" in landed.plan.changed_paths
        assert ours not in landed.plan.changed_paths
        trace.clear()
        reused = crd_warnings(ws, planner.tree, landed.plan.changed_paths)
        assert listings() == 0
        relisted = crd_warnings(ws, planner.tree, [*landed.plan.changed_paths, ours])
        assert listings() == 1
        fresh = crd_warnings(ws)
    older = ": older than this gitscale's RunnerSet CRD (no spec.backlog): run `gitscale crd " \
            "--repo .` and apply it before this version writes"
    assert reused == relisted == fresh == [f"{ours}{older}"]


def _older_runnerset_crd() -> str:
    import yaml

    from gitscale.manifest.crd_drift import shipped_text

    crd = yaml.safe_load(shipped_text())
    for version in crd["spec"]["versions"]:
        del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["backlog"]
    return yaml.safe_dump(crd, sort_keys=False)


def _other_crds(kind: str, count: int) -> str:
    """A bundle of another project's CRDs (cert-manager's is ~1.5 MB), naming ours nowhere."""
    one = ("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n"
           "  name: {n}.{kind}.example.io\nspec:\n  group: {kind}.example.io\n"
           "  description: |\n" + "    padding padding padding padding padding padding\n" * 200)
    return "---\n".join(one.format(n=f"thing{i}", kind=kind) for i in range(count))


UNRELATED = {  # what the check selected before: each fetched on every scaling pass
    "infra/crds/cert-manager.crds.yaml": _other_crds("cert-manager", 100),
    "crossplane/crds/provider-aws.yaml": _other_crds("aws", 20),
    "apps/argo/crd.yaml": _other_crds("argo", 5),
    "charts/x/templates/crds.yaml": _other_crds("x", 5),
}


def test_the_crd_check_after_a_pass_fetches_only_the_file_that_holds_our_crd(
        git_server: GitDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`reconcile`'s CRD warning reads `init`'s crd.yaml (fetched: it is ours, small) and a
    ``crds.yaml`` bundle the clone holds already (top-level files are checked out), never
    another project's CRDs (megabytes, fetched again on every pass); and a check that cannot
    read is one warning line, not an error of a pass that has pushed."""
    from gitscale.commands.reconcile import crd_warnings

    ours = "clusters/prod/gitscale-system/crd.yaml"
    files = {**repo_files(), **UNRELATED, ours: _older_runnerset_crd(),
             "crds.yaml": _other_crds("top", 2) + "---\n" + _older_runnerset_crd()}
    bare = git_server.create(files)
    allow_filters(bare, True)
    opts = RepoOptions(git_server.url(), None, "gitscale.yaml")
    now = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
    trace = Trace(tmp_path)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", trace.env["GIT_CONFIG_GLOBAL"])
    older = ": older than this gitscale's RunnerSet CRD (no spec.backlog): run `gitscale crd " \
            "--repo .` and apply it before this version writes"
    for server_gone in (False, True):
        cache = StateCache()
        with open_workspace(git_server.url(), None, sparse=True) as ws:
            given = given_demand(demand(tmp_path, {"s01": 3 + server_gone},
                                        f"crd-{server_gone}"))
            landed = land(ws, Planner(ws, opts, given, lambda: now, cache), cache=cache)
            assert landed.pushed and rev(bare) == landed.commit
            blobs = Tree.read(ws.git, sparse=True).files()
            unrelated = {blobs[p] for p in UNRELATED}
            if server_gone:
                git_server.stop()
            trace.clear()
            warnings = crd_warnings(ws)
            missing = ws.git.missing_blobs(sorted(UNRELATED))
        if not server_gone:
            assert sorted(warnings) == [f"{ours}{older}", f"crds.yaml{older}"]
            assert len(trace.fetches()) == 1, trace.fetches()  # ours, not the others
        else:
            (warning,) = warnings  # the blob of ours cannot be fetched: said, not raised
            assert warning.startswith("the repo's RunnerSet CRD not checked: git ")
            assert "\n" not in warning
        assert missing == unrelated  # never fetched for the check
