"""Bad config, manifests and demand: a clear error with file and line, exit 1, nothing written."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

GOOD_DEMAND = "linux: {queued: 1, running: 0}\n"


def repo_with(tmp_path: Path, *, config: str | None = None, manifest: str | None = None,
              demand: str = GOOD_DEMAND) -> Path:
    files = {
        "gitscale.yaml": config if config is not None else simple_config({"linux": "default"}),
        "sets/linux.yaml": manifest if manifest is not None
        else RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": demand,
    }
    return make_repo(tmp_path, files)


def assert_refused(capsys, checkout: Path, where: str, *words: str) -> str:  # type: ignore[no-untyped-def]
    remote = checkout.parent / "remote.git"
    before = git(remote, "rev-parse", "main")
    snapshot = {p: p.read_bytes() for p in checkout.rglob("*") if p.is_file() and ".git" not in p.parts}
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1, (out, err)
    assert "Traceback" not in out + err
    assert err.startswith("error: "), err
    assert where in err, err
    for word in words:
        assert word in err, err
    assert git(remote, "rev-parse", "main") == before  # nothing pushed
    assert git(checkout, "rev-parse", "HEAD") == before  # nothing committed
    after = {p: p.read_bytes() for p in checkout.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == snapshot  # nothing written
    # plan refuses the same input with the same exit code
    code, _, plan_err = run(capsys, "plan", "--repo", str(checkout))
    assert code == 1 and where in plan_err
    return err


CONFIG_CASES = [
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: {minReplicas: -1}\n",
                 "gitscale.yaml:5", ["minReplicas", "-1"], id="negative-min"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: {maxReplicas: 99999999999}\n",
                 "gitscale.yaml:5", ["maxReplicas"], id="huge-max"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: {maxReplicas: \"3\"}\n",
                 "gitscale.yaml:5", ["maxReplicas", "integer"], id="wrong-type"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: default\n    replica: 3\n",
                 "gitscale.yaml:6", ["unknown key 'replica'"], id="unknown-key"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy:\n      minReplicas: 1\n"
                 "      maxReplica: 3\n",
                 "gitscale.yaml:7", ["unknown key 'maxReplica'"], id="unknown-policy-key"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: {minReplicas: 5, maxReplicas: 2}\n",
                 "gitscale.yaml:5", ["greater than maxReplicas"], id="min-above-max"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: {scaleDownDelay: 10 minutes}\n",
                 "gitscale.yaml:5", ["scaleDownDelay"], id="bad-duration"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: nonesuch\n",
                 "gitscale.yaml:5", ["unknown policy preset 'nonesuch'"], id="unknown-preset"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml\n    policy: default\n",
                 "gitscale.yaml:", ["not valid YAML"], id="unparsable"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: ../outside.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: default\n",
                 "gitscale.yaml:3", ["inside the config repo"], id="path-outside"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: /etc/passwd\n"
                 "    source: {file: demand.yaml}\n    policy: default\n",
                 "gitscale.yaml:3", ["inside the config repo"], id="absolute-path"),
    pytest.param("runnerSets:\n  - name: Linux X\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: default\n",
                 "gitscale.yaml:2", ["name"], id="bad-set-name"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: default\n"
                 "  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy: default\n",
                 "gitscale.yaml:6", ["declared twice"], id="duplicate-set"),
    pytest.param("runnerSets:\n  - name: linux\n    name: linux\n", "gitscale.yaml:3",
                 ["duplicate key"], id="duplicate-key"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy:\n      schedules:\n"
                 "        - {name: x, start: 'monday', duration: 1h, minReplicas: 1}\n",
                 "gitscale.yaml:7", ["RFC 3339"], id="bad-schedule-start"),
    pytest.param("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {file: demand.yaml}\n    policy:\n      schedules:\n"
                 "        - {name: x, start: '2026-01-01T00:00:00Z', duration: 1h,\n"
                 "           recurrence: 'FREQ=SOMETIMES', minReplicas: 1}\n",
                 "gitscale.yaml:8", ["RRULE"], id="bad-rrule"),
    pytest.param("[1, 2]\n", "gitscale.yaml:1", ["not of type"], id="not-a-mapping"),
]


@pytest.mark.parametrize(("config", "where", "words"), CONFIG_CASES)
def test_bad_config(tmp_path: Path, capsys, config: str, where: str, words: list[str]) -> None:  # type: ignore[no-untyped-def]
    checkout = repo_with(tmp_path, config=config)
    assert_refused(capsys, checkout, where, *words)


def test_manifest_through_symlink(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "linux.yaml").write_text(RUNNERSET.format(name="linux", replicas=2))
    checkout = make_repo(tmp_path / "r", {
        "gitscale.yaml": simple_config({"linux": "default"}).replace("sets/linux", "link/linux"),
        "demand.yaml": GOOD_DEMAND,
    })
    os.symlink(outside, checkout / "link")
    git(checkout, "add", "link")
    git(checkout, "commit", "-qm", "link")
    git(checkout, "push", "-q")
    assert_refused(capsys, checkout, "gitscale.yaml:3", "symlink")
    assert (outside / "linux.yaml").read_text() == RUNNERSET.format(name="linux", replicas=2)


MANIFEST_CASES = [
    pytest.param(RUNNERSET.format(name="linux", replicas="-1"), "sets/linux.yaml:6",
                 ["spec.replicas", "-1"], id="negative-replicas"),
    pytest.param(RUNNERSET.format(name="linux", replicas="1e12"), "sets/linux.yaml:6",
                 ["spec.replicas"], id="float-replicas"),
    pytest.param(RUNNERSET.format(name="linux", replicas="99999999"), "sets/linux.yaml:6",
                 ["spec.replicas"], id="huge-replicas"),
    pytest.param(RUNNERSET.format(name="linux", replicas=2).replace(
        "  replicas: 2\n", "  replicas: 2\n  patchID: 2147483648\n"), "sets/linux.yaml:7",
                 ["spec.patchID"], id="patch-id-overflow"),
    pytest.param("kind: RunnerSet\nmetadata: {name: linux\nspec: {}\n", "sets/linux.yaml:",
                 ["not valid YAML"], id="unparsable"),
    pytest.param("apiVersion: gitscale.dev/v1alpha1\nkind: RunnerSet\nmetadata: {name: linux}\n",
                 "sets/linux.yaml", ["no spec"], id="no-spec"),
    pytest.param(RUNNERSET.format(name="linux", replicas=2) + "---\n"
                 + RUNNERSET.format(name="linux2", replicas=2), "sets/linux.yaml",
                 ["2 objects match"], id="ambiguous-multi-doc"),
]


@pytest.mark.parametrize(("manifest", "where", "words"), MANIFEST_CASES)
def test_bad_manifest(tmp_path: Path, capsys, manifest: str, where: str, words: list[str]) -> None:  # type: ignore[no-untyped-def]
    checkout = repo_with(tmp_path, manifest=manifest)
    assert_refused(capsys, checkout, where, *words)


def test_object_not_in_file(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = simple_config({"linux": "default"}).replace(
        "    source:", "    object: {kind: RunnerSet, name: linux}\n    source:")
    checkout = repo_with(tmp_path, config=config,
                         manifest=RUNNERSET.format(name="other", replicas=2))
    assert_refused(capsys, checkout, "sets/linux.yaml", "no object matches",
                   "name=linux")


def test_missing_manifest(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {"gitscale.yaml": simple_config({"linux": "default"}),
                                    "demand.yaml": GOOD_DEMAND})
    assert_refused(capsys, checkout, "sets/linux.yaml", "not found")


DEMAND_CASES = [
    pytest.param("linux: {queued: -1, running: 0}\n", "demand.yaml:1", ["queued", "-1"],
                 id="negative"),
    pytest.param("linux: {queued: 10000000000, running: 0}\n", "demand.yaml:1", ["queued"],
                 id="huge"),
    pytest.param("linux: {queued: two, running: 0}\n", "demand.yaml:1", ["queued"],
                 id="wrong-type"),
    pytest.param("linux: {queued: 1, running: 0, waiting: 3}\n", "demand.yaml:1",
                 ["unknown key 'waiting'"], id="unknown-key"),
    pytest.param("linux:\n  queued: 1\n", "demand.yaml:1", ["running"], id="missing-running"),
    pytest.param("linux: {queued: 1, running: 0\n", "demand.yaml:", ["not valid YAML"],
                 id="unparsable"),
    pytest.param("linus: {queued: 1, running: 0}\n", "demand.yaml", ["linus"], id="unknown-set"),
]


@pytest.mark.parametrize(("demand", "where", "words"), DEMAND_CASES)
def test_bad_demand_file_option(tmp_path: Path, capsys, demand: str, where: str,  # type: ignore[no-untyped-def]
                                words: list[str]) -> None:
    checkout = repo_with(tmp_path)
    path = tmp_path / "demand.yaml"
    path.write_text(demand)
    remote_head = git(tmp_path / "remote.git", "rev-parse", "main")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(path))
    assert code == 1 and "Traceback" not in out + err
    assert f"{path}:" in err or str(path) in err
    assert where.split(":")[1:] == [] or f"{path}:{where.split(':')[1]}" in err, err
    for word in words:
        assert word in err
    assert git(tmp_path / "remote.git", "rev-parse", "main") == remote_head


def test_broken_source_leaves_only_its_sets_untouched(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A set whose demand cannot be read is left alone; the others land; exit 1."""
    config = ("runnerSets:\n"
              "  - {name: linux, manifest: sets/linux.yaml, source: {file: demand.yaml}, "
              "policy: default}\n"
              "  - {name: arm, manifest: sets/arm.yaml, source: {file: broken.yaml}, "
              "policy: default}\n")
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "sets/arm.yaml": RUNNERSET.format(name="arm", replicas=4),
        "demand.yaml": "linux: {queued: 5, running: 0}\n",
        "broken.yaml": "arm: {queued: -3, running: 0}\n",
    })
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1
    assert "arm" in err and "broken.yaml:1" in err and "left untouched" in err
    assert "Traceback" not in out + err
    shown = git(tmp_path / "remote.git", "show", "main:sets/linux.yaml")
    assert "replicas: 5" in shown
    assert git(tmp_path / "remote.git", "show", "main:sets/arm.yaml") == \
        RUNNERSET.format(name="arm", replicas=4).rstrip("\n")
    assert "Gitscale-Set: arm" not in git(tmp_path / "remote.git", "log", "-1", "--format=%B")


def test_bad_options(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = repo_with(tmp_path)
    code, _, err = run(capsys, "plan", "--repo", str(checkout), "--now", "tomorrow")
    assert code == 1 and "--now" in err and "RFC 3339" in err
    code, _, err = run(capsys, "plan", "--repo", str(tmp_path / "nope"))
    assert code == 1 and "nope" in err
    code, _, err = run(capsys, "plan", "--repo", str(checkout), "--output", "xml")
    assert code == 1  # a usage error is 1, never plan's 2
    code, _, err = run(capsys, "drain", "--repo", str(checkout), "nonesuch")
    assert code == 1 and "no runner set named 'nonesuch'" in err
