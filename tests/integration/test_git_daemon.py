"""gitscale against a real git:// server (git daemon on loopback): land, read back, refuse."""
from __future__ import annotations

import difflib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gitscale.commands import given_demand
from gitscale.config.load import load_config
from gitscale.demand.resolve import read_demand
from gitscale.plan.engine import Plan, compute_plan
from gitscale.plan.landing import land
from gitscale.timeutil import parse_time
from gitscale.repo.opening import open_workspace

from tests.integration import seed
from tests.integration.conftest import GitDaemon, rev, run_cli
from tests.integration.seed import GPU, NOW, RUNNERS


def _owned_line(line: str) -> bool:
    return bool(seed.OWNED_SPEC.match(line) or seed.OWNED_ANNOTATION.match(line))


def _documents_of(lines: list[str]) -> list[int]:
    """The YAML document index of each line (``---`` starts a new document)."""
    index, out = 0, []
    for line in lines:
        if line.startswith("---"):
            index += 1
        out.append(index)
    return out


def assert_only_owned_lines_changed(old: str, new: str, runner_set_doc: int,
                                    may_add_annotations_key: bool = False) -> None:
    """Line by line: every line not an owned field is byte-identical and in place."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    docs_a, docs_b = _documents_of(a), _documents_of(b)
    assert len(docs_a) and docs_a[-1] == docs_b[-1], "the number of documents changed"
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    changed = 0
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        for i in range(i1, i2):
            assert _owned_line(a[i]) and docs_a[i] == runner_set_doc, \
                f"a line gitscale does not own was removed or changed: {a[i]!r}"
        for j in range(j1, j2):
            ok = _owned_line(b[j]) or (may_add_annotations_key and b[j] == "  annotations:\n")
            assert ok and docs_b[j] == runner_set_doc, \
                f"a line gitscale does not own was added or changed: {b[j]!r}"
        if op == "replace" and i2 - i1 == j2 - j1:
            for old_line, new_line in zip(a[i1:i2], b[j1:j2]):
                # the same key, and whatever followed the value (a comment) kept as it was
                assert old_line.split(":")[0] == new_line.split(":")[0], (old_line, new_line)
                if "#" in old_line:
                    assert new_line.endswith(old_line[old_line.index("#"):]), (old_line, new_line)
        changed += 1
    assert changed, "nothing changed"
    assert new.endswith("\n") == old.endswith("\n")


def _strip_owned(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    for key in ("replicas", "patchID", "effectiveTime"):
        doc["spec"].pop(key, None)
    annotations = doc["metadata"].get("annotations") or {}
    for key in [k for k in annotations if k.startswith("gitscale.dev/")]:
        del annotations[key]
    if not annotations:
        doc["metadata"].pop("annotations", None)
    return doc


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# -- 1. reconcile twice: one commit, only owned fields, subject + reasons + trailers ---------
def test_reconcile_twice_lands_one_commit_with_only_owned_fields(git_server: GitDaemon,
                                                                 tmp_path: Path) -> None:
    bare = git_server.create(seed.FILES)
    before = seed.commits(bare)
    demand = _write(tmp_path / "demand.yaml", seed.demand_text((3, 2), (1, 0), jobs=[11, 12, 13]))
    url = git_server.url()

    first = run_cli("reconcile", "--repo", url, "--demand", demand, "--now", NOW, cwd=tmp_path)
    assert first.code == 0, first
    assert "pushed" in first.out, first
    later = "2026-03-02T09:05:00Z"  # the next cron tick, same queue: nothing to do
    second = run_cli("reconcile", "--repo", url, "--demand", demand, "--now", later, cwd=tmp_path)
    assert second.code == 0, second
    assert "no change" in second.out, second

    after = seed.commits(bare)
    assert len(after) == len(before) + 1, "expected exactly one new commit on the remote"
    assert after[1:] == before

    # What a fresh clone of the remote holds.
    clone = seed.fresh_clone(url, tmp_path / "fresh")
    runners_new = (clone / RUNNERS).read_bytes().decode()
    gpu_new = (clone / GPU).read_bytes().decode()
    for untouched in ("gitscale.yaml", "demand.yaml", "README.md"):
        assert (clone / untouched).read_bytes().decode() == seed.FILES[untouched]
    assert_only_owned_lines_changed(seed.RUNNERS_YAML, runners_new, runner_set_doc=2)
    assert_only_owned_lines_changed(seed.GPU_YAML, gpu_new, runner_set_doc=0,
                                    may_add_annotations_key=True)

    # Parsed: the owned values are the decision, everything else is the human's.
    old_docs = list(yaml.safe_load_all(seed.RUNNERS_YAML))
    new_docs = list(yaml.safe_load_all(runners_new))
    assert len(new_docs) == len(old_docs) == 2
    assert new_docs[0] == old_docs[0]  # the ConfigMap, decoys and all
    linux = seed.runner_set(runners_new, "linux-x64")
    assert _strip_owned(linux) == _strip_owned(seed.runner_set(seed.RUNNERS_YAML, "linux-x64"))
    assert linux["spec"]["replicas"] == 5
    assert linux["spec"]["patchID"] == 8
    assert parse_time(linux["spec"]["effectiveTime"]) == parse_time(NOW)
    assert linux["metadata"]["annotations"]["team.example.com/owner"] == "platform"
    gpu = seed.runner_set(gpu_new, "gpu")
    assert _strip_owned(gpu) == _strip_owned(seed.runner_set(seed.GPU_YAML, "gpu"))
    assert gpu["spec"]["replicas"] == 1
    assert isinstance(gpu["spec"]["patchID"], int)

    # The commit: subject, a body line per set, trailers in the last paragraph.
    msg = seed.message(bare)
    assert msg.parent == before[0]
    assert msg.subject == "gitscale: linux-x64 2→5, gpu 0→1"
    paragraphs = msg.raw.strip("\n").split("\n\n")
    trailer_lines = paragraphs[-1].splitlines()
    assert trailer_lines == [
        "Gitscale-Set: linux-x64 replicas=5 previous=2 patch=8 queued=3 running=2 "
        f"reason={msg.sets['linux-x64']['reason']}",
        f"Gitscale-Set: gpu replicas=1 previous=0 patch={gpu['spec']['patchID']} queued=1 "
        f"running=0 reason={msg.sets['gpu']['reason']}",
        f"Gitscale-Base: {before[0]}",
    ]
    assert msg.base == before[0]
    assert msg.sets["linux-x64"]["reason"] == "scale-up"
    body_lines = paragraphs[1].splitlines()
    assert [line.split(":")[0] for line in body_lines] == ["- linux-x64", "- gpu"]
    committed = seed.git(bare, "log", "-1", "--format=%an <%ae>|%cI")
    assert committed.startswith("gitscale <")
    assert parse_time(committed.split("|")[1]) == parse_time(NOW)
    changed_files = seed.git(bare, "show", "--format=", "--name-only", "refs/heads/main")
    assert sorted(changed_files.splitlines()) == sorted([RUNNERS, GPU])


# -- 2. history over git:// ---------------------------------------------------------------------
def test_history_json_over_git_protocol(git_server: GitDaemon, tmp_path: Path) -> None:
    bare = git_server.create(seed.FILES)
    demand = _write(tmp_path / "demand.yaml", seed.demand_text((4, 1)))
    url = git_server.url()
    landed = run_cli("reconcile", "--repo", url, "--demand", demand, "--now", NOW, cwd=tmp_path)
    assert landed.code == 0, landed
    head = rev(bare)

    result = run_cli("history", "--repo", url, "--output", "json", cwd=tmp_path)
    assert result.code == 0, result
    entries = json.loads(result.out)
    by_set = {e["set"]: e for e in entries}
    assert set(by_set) == {"linux-x64", "gpu"}, entries
    linux = by_set["linux-x64"]
    assert linux["commit"] == head
    assert (linux["previous"], linux["replicas"], linux["patch"]) == (2, 5, 8)
    assert (linux["queued"], linux["running"]) == (4, 1)
    assert linux["reason"] == "scale-up"
    assert parse_time(linux["time"]) == parse_time(NOW)
    gpu = by_set["gpu"]
    assert (gpu["previous"], gpu["replicas"], gpu["queued"], gpu["running"]) == (0, 0, 0, 0)
    assert gpu["patch"] == 0  # first write forces the state

    only = run_cli("history", "--repo", url, "--output", "json", "--set", "gpu", cwd=tmp_path)
    assert only.code == 0, only
    assert [e["set"] for e in json.loads(only.out)] == ["gpu"]


# -- 3b. a deterministic race: a foreign commit lands between plan and push ---------------------
def test_push_race_retries_on_top_of_a_foreign_commit(git_server: GitDaemon,
                                                      tmp_path: Path) -> None:
    bare = git_server.create(seed.FILES)
    original = rev(bare)
    url = git_server.url()
    other = seed.fresh_clone(url, tmp_path / "other")
    demand = tmp_path / "demand.yaml"
    demand.write_text(seed.demand_text((6, 0)))
    calls: list[str] = []

    def push_foreign_commit() -> str:
        (other / "README.md").write_text("Config repo for the CI runners.\nOwned by platform.\n")
        seed.git(other, "add", "README.md")
        seed.git(other, "-c", "user.name=Human", "-c", "user.email=human@example.com",
                 "commit", "--quiet", "-m", "Document the owner")
        seed.git(other, "push", "--quiet", "origin", "HEAD:main")
        return seed.git(other, "rev-parse", "HEAD")

    foreign: list[str] = []
    with open_workspace(url, None) as ws:
        make_plan = racing_plan(ws, demand, calls, push_foreign_commit, foreign)
        landed = land(ws, make_plan, date=NOW, sleep=lambda _: None)

    assert landed.pushed and landed.attempts == 2, landed
    assert calls == [original, foreign[0]], "the retry must recompute on the new head"
    assert seed.commits(bare)[:3] == [landed.commit, foreign[0], original]
    assert seed.merges(bare) == []
    msg = seed.message(bare)
    assert msg.parent == foreign[0] and msg.base == foreign[0]
    assert msg.sets["linux-x64"]["replicas"] == "6" and msg.sets["linux-x64"]["patch"] == "8"
    assert seed.show(bare, "HEAD", "README.md").endswith("Owned by platform.\n")
    linux = seed.runner_set(seed.show(bare, "HEAD", RUNNERS), "linux-x64")
    assert (linux["spec"]["replicas"], linux["spec"]["patchID"]) == (6, 8)


def racing_plan(ws, demand: Path, calls: list[str], push: Callable[[], str],  # type: ignore[no-untyped-def]
                foreign: list[str]) -> Callable[[], Plan]:
    """A make_plan that decides from one demand read (as `reconcile` does: every attempt on
    the same numbers) and, on its first call, has ``push`` land another writer's commit first
    (its id appended to ``foreign``); ``calls``: each attempt's base commit."""
    reading = None

    def make_plan() -> Plan:
        nonlocal reading
        config = load_config(ws.root, "gitscale.yaml")
        if reading is None:
            reading = read_demand(ws.root, config, given_demand(str(demand)))
        plan = compute_plan(ws.root, config, reading, parse_time(NOW), ws.base())
        calls.append(plan.base)
        if len(calls) == 1:
            foreign.append(push())  # the other writer wins the race
        return plan

    return make_plan


# -- 3c. the race is with a person's hand edit of the same set's count ------------------------
@pytest.mark.parametrize("pause", [False, True], ids=["count", "pause-and-count"])
def test_a_hand_edit_that_wins_the_race_is_the_retrys_starting_point(
        git_server: GitDaemon, tmp_path: Path, pause: bool) -> None:
    """A person pushes `replicas: 9` for linux-x64 while a pass is in flight. The retry
    recomputes on the person's commit: it scales from 9 (the commit says 9→6), or, when the
    person paused the set in the same commit, leaves the person's count and patch 0 as they
    are (README, "Changing a working setup")."""
    bare = git_server.create(seed.FILES)
    url = git_server.url()
    other = seed.fresh_clone(url, tmp_path / "other")
    demand = tmp_path / "demand.yaml"
    demand.write_text(seed.demand_text((6, 0)))
    calls: list[str] = []

    def push_hand_edit() -> str:
        text = (other / RUNNERS).read_text()
        edited = text.replace("  replicas: 2      # written by gitscale",
                              "  replicas: 9      # written by gitscale")
        if pause:
            edited = edited.replace('    team.example.com/owner: "platform"',
                                    '    team.example.com/owner: "platform"\n'
                                    '    gitscale.dev/paused: "true"').replace(
                "  patchID: 7\n", "  patchID: 0\n")
        assert edited != text
        (other / RUNNERS).write_text(edited)
        seed.git(other, "-c", "user.name=Human", "-c", "user.email=human@example.com",
                 "commit", "--quiet", "-am", "linux-x64 to 9 by hand")
        seed.git(other, "push", "--quiet", "origin", "HEAD:main")
        return seed.git(other, "rev-parse", "HEAD")

    foreign: list[str] = []
    with open_workspace(url, None) as ws:
        make_plan = racing_plan(ws, demand, calls, push_hand_edit, foreign)
        landed = land(ws, make_plan, date=NOW, sleep=lambda _: None)

    assert landed.attempts == 2 and calls[1] == foreign[0], (landed, calls)
    linux = seed.runner_set(seed.show(bare, "HEAD", RUNNERS), "linux-x64")
    if pause:
        assert (linux["spec"]["replicas"], linux["spec"]["patchID"]) == (9, 0)
        assert landed.pushed and seed.message(bare).parent == foreign[0], landed
        assert set(seed.message(bare).sets) == {"gpu"}  # the paused set is left as written
        return
    assert landed.pushed, landed
    msg = seed.message(bare)
    assert msg.parent == foreign[0]
    assert (msg.sets["linux-x64"]["previous"], msg.sets["linux-x64"]["replicas"],
            msg.sets["linux-x64"]["patch"]) == ("9", "6", "8")
    assert (linux["spec"]["replicas"], linux["spec"]["patchID"]) == (6, 8)


# -- 4. a server hook refuses the push: exit 1, said so, not retried ---------------------------
def test_hook_rejection_is_reported_and_not_retried(git_server: GitDaemon,
                                                    tmp_path: Path) -> None:
    bare = git_server.create(seed.FILES)
    original = rev(bare)
    counter = tmp_path / "hook-calls"
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\n"
                    f"echo called >> '{counter}'\n"
                    "echo 'GH006: Protected branch update failed for refs/heads/main.' >&2\n"
                    "exit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    demand = _write(tmp_path / "demand.yaml", seed.demand_text((3, 0)))

    result = run_cli("reconcile", "--repo", git_server.url(), "--demand", demand, "--now", NOW,
                     cwd=tmp_path)
    assert result.code == 1, result
    assert "refused" in result.err and "not retried" in result.err, result
    assert "hook" in result.err, result
    assert "GH006: Protected branch update failed" in result.err, result
    assert "Traceback" not in result.err
    assert counter.read_text().splitlines() == ["called"], "the push must not be retried"
    assert rev(bare) == original
    assert seed.commits(bare) == [original]


# -- 6. bad input: nothing is written ---------------------------------------------------------
def test_negative_demand_is_refused_naming_file_and_line(git_server: GitDaemon,
                                                         tmp_path: Path) -> None:
    bare = git_server.create(seed.FILES)
    original = rev(bare)
    demand = tmp_path / "bad-demand.yaml"
    demand.write_text("# queues at 9:00\n"
                      "linux-x64: {queued: 3, running: 0}\n"
                      "gpu:\n"
                      "  queued: -2\n"
                      "  running: 0\n")

    result = run_cli("reconcile", "--repo", git_server.url(), "--demand", str(demand),
                     "--now", NOW, cwd=tmp_path)
    assert result.code == 1, result
    assert f"{demand}:4" in result.err, result
    assert "Traceback" not in result.err + result.out
    assert "pushed" not in result.out
    assert seed.commits(bare) == [original]
    assert rev(bare) == original
    assert os.listdir(bare / "refs" / "heads") == ["main"]
