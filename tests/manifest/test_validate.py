"""The RunnerSet CRD and schema validation, in-process and through kubeconform."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from gitscale.controller import crd as resource
from gitscale.manifest.crd_schemas import SchemaValidator, crds_in_repo, shipped_crd
from tests.helpers import REFERENCE, RUNNERSET, git, make_repo, run, simple_config

ROOT = Path(__file__).resolve().parents[2]
CRDS = REFERENCE / "crds"


def test_committed_crd_is_generated_from_the_source_of_truth() -> None:
    committed = (ROOT / "deploy/crds/runnersets.gitscale.dev.yaml").read_text()
    assert committed == resource.crd_yaml(), "run: gitscale crd > deploy/crds/runnersets.gitscale.dev.yaml"
    crd = yaml.safe_load(committed)
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["patchID"]["maximum"] == 2**31 - 1
    assert spec["replicas"]["minimum"] == 0
    assert shipped_crd() == resource.crd()  # what validation reads, as the package ships it


def runnerset(**spec_changes: object) -> dict:  # type: ignore[type-arg]
    obj = yaml.safe_load(RUNNERSET.format(name="linux", replicas=2))
    obj["spec"].update(spec_changes)
    return obj


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        pytest.param(runnerset(), None, id="valid"),
        pytest.param(runnerset(patchID=3, effectiveTime="2026-11-21T09:00:00Z"), None,
                     id="valid-owned"),
        pytest.param(runnerset(replicas=-1), "spec.replicas", id="negative-replicas"),
        pytest.param(runnerset(patchID=2**31), "spec.patchID", id="patch-overflow"),
        pytest.param(runnerset(effectiveTime="yesterday"), "spec.effectiveTime",
                     id="bad-time"),
        pytest.param(runnerset(replica=3), "spec", id="unknown-field-strict"),
        pytest.param(runnerset(platform="jenkins"), "spec.platform", id="unknown-platform"),
        pytest.param(runnerset(template={"spec": {"containers": []}}),
                     "spec.template.spec.containers", id="no-containers"),
    ],
)
def test_in_process_runnerset_schema(obj: dict, problem: str | None) -> None:  # type: ignore[type-arg]
    problems = SchemaValidator().check(obj)
    if problem is None:
        assert problems == []
    else:
        assert problems and problems[0].path == problem, problems


def test_template_is_required() -> None:
    obj = runnerset()
    del obj["spec"]["template"]
    assert any("template" in p.message for p in SchemaValidator().check(obj))


def test_legacy_arc_crds_from_the_repo(tmp_path: Path) -> None:
    """CRDs committed in a config repo (here: actions-runner-controller's) validate objects."""
    (tmp_path / "crds").mkdir()
    for name in ("actions.summerwind.dev_runnerdeployments.yaml",
                 "actions.summerwind.dev_runnersets.yaml"):
        (tmp_path / "crds" / name).write_bytes((CRDS / name).read_bytes())
    crds = crds_in_repo(tmp_path, ["crds/actions.summerwind.dev_runnerdeployments.yaml",
                                   "crds/actions.summerwind.dev_runnersets.yaml"])
    validator = SchemaValidator(crds)
    good = {"apiVersion": "actions.summerwind.dev/v1alpha1", "kind": "RunnerDeployment",
            "metadata": {"name": "x"},
            "spec": {"replicas": 2, "effectiveTime": "2026-11-21T09:00:00Z",
                     "template": {"spec": {"repository": "org/repo"}}}}
    assert validator.knows(good)
    assert validator.check(good) == []
    bad = json.loads(json.dumps(good))
    bad["spec"]["replicas"] = "two"
    assert [p.path for p in validator.check(bad)] == ["spec.replicas"]


def test_crds_are_not_read_through_symlinks(tmp_path: Path) -> None:
    """A committed link to /dev/zero was read forever (and into memory) by every reconcile of a
    kind the validator did not know yet."""
    (tmp_path / "crds").mkdir()
    name = "actions.summerwind.dev_runnersets.yaml"
    (tmp_path / "crds" / name).write_bytes((CRDS / name).read_bytes())
    (tmp_path / "crds" / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "crds" / "link.yaml").symlink_to(tmp_path / "crds" / name)
    crds = crds_in_repo(tmp_path, [f"crds/{name}", "crds/zero.yaml", "crds/link.yaml"])
    assert len(crds) == 1


def test_reconcile_refuses_an_invalid_result(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The edited manifest is checked before committing: a human typo blocks the commit."""
    manifest = RUNNERSET.format(name="linux", replicas=1).replace("  platform: github",
                                                                   "  platform: jenkins")
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": manifest,
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    head = git(checkout, "rev-parse", "HEAD")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1
    assert "refusing to commit invalid manifests" in err and "spec.platform" in err
    assert git(checkout, "rev-parse", "HEAD") == head
    assert (checkout / "sets/linux.yaml").read_text() == manifest
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 1 and "spec.platform" in err and "in-process" in out


def test_validate_refuses_a_github_runnerset_without_its_credentials_secret(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The controller cannot register a runner without it (InvalidSpec in the cluster): the
    CRD requires it, so `validate` and `reconcile` refuse the manifest before it gets there."""
    manifest = RUNNERSET.format(name="linux", replicas=1).replace(
        ", credentialsSecret: github-app}", "}")
    assert "credentialsSecret" not in manifest
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": manifest,
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    head = git(checkout, "rev-parse", "HEAD")
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    # one problem, at the line of the mapping that lacks the key
    (number,) = [n for n, line in enumerate(manifest.splitlines(), 1)
                 if line.strip().startswith("github:")]
    assert code == 1 and out.rstrip().endswith(", 1 problem"), out
    assert err == f"error: sets/linux.yaml:{number}: spec.github: 'credentialsSecret' is required\n"
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "refusing to commit" in err and "credentialsSecret" in err
    assert git(checkout, "rev-parse", "HEAD") == head
    assert (checkout / "sets/linux.yaml").read_text() == manifest


def test_validate_command_ok(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    code, out, _ = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0 and "1 checked with in-process JSON Schema" in out


FAKE_KUBECONFORM = """#!{python}
# A stand-in for kubeconform (which cannot be installed on this machine) that speaks its
# documented CLI and JSON output, validating with the schema files it is pointed at.
import json, sys, pathlib, yaml, jsonschema
args = sys.argv[1:]
pathlib.Path({log!r}).write_text(json.dumps(args))
locations = [args[i + 1] for i, a in enumerate(args) if a == "-schema-location"]
template = [l for l in locations if l != "default"][0]
resources = []
for doc in yaml.safe_load_all(sys.stdin.read()):
    group, version = doc["apiVersion"].split("/")
    path = (template.replace("{{{{ .Group }}}}", group)
            .replace("{{{{ .ResourceKind }}}}", doc["kind"].lower())
            .replace("{{{{ .ResourceAPIVersion }}}}", version))
    schema = json.loads(pathlib.Path(path).read_text())
    errors = list(jsonschema.Draft4Validator(schema).iter_errors(doc))
    resources.append({{"filename": "stdin", "kind": doc["kind"], "name": doc["metadata"]["name"],
                      "version": doc["apiVersion"],
                      "status": "statusInvalid" if errors else "statusValid",
                      "msg": "; ".join(e.message for e in errors)}})
print(json.dumps({{"resources": resources}}))
sys.exit(1 if any(r["status"] == "statusInvalid" for r in resources) else 0)
"""


def test_kubeconform_is_used_when_on_path(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "kubeconform-args.json"
    fake = bindir / "kubeconform"
    fake.write_text(FAKE_KUBECONFORM.format(python=sys.executable, log=str(log)))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    manifest = RUNNERSET.format(name="linux", replicas=1).replace("  platform: github",
                                                                   "  platform: jenkins")
    checkout = make_repo(tmp_path / "r", {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": manifest,
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 1 and "with kubeconform" in out and "jenkins" in err
    args = json.loads(log.read_text())
    assert "-strict" in args and args[-1] == "-"
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "refusing to commit" in err


@pytest.mark.parametrize("change", [
    pytest.param({}, id="valid"),
    pytest.param({"replicas": -1}, id="negative-replicas"),
    pytest.param({"replica": 3}, id="unknown-field"),
    pytest.param({"effectiveTime": "yesterday"}, id="bad-date-time"),
    pytest.param({"patchID": "7"}, id="string-patch-id"),
])
def test_the_fast_check_and_jsonschema_agree(change: dict) -> None:  # type: ignore[type-arg]
    """fastjsonschema answers first; jsonschema, the reference, must never disagree with it."""
    import jsonschema

    from gitscale.manifest.crd_schemas import _format_checker

    obj = {"apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
           "metadata": {"name": "linux"},
           "spec": {"replicas": 2, "patchID": 1, "effectiveTime": "2026-11-21T09:00:00Z",
                    "platform": "github",
                    "github": {"configURL": "https://github.com/x", "credentialsSecret": "gh"},
                    "template": {"spec": {"containers": [{"name": "runner",
                                                          "image": "runner:1"}]}}}}
    obj["spec"].update(change)
    validator = SchemaValidator()
    schema = validator.schemas[("gitscale.dev/v1alpha1", "RunnerSet")]
    reference = jsonschema.Draft4Validator(schema, format_checker=_format_checker())
    expected = sorted(".".join(map(str, e.absolute_path)) for e in reference.iter_errors(obj))
    assert sorted(p.path for p in validator.check(obj)) == expected
    assert bool(expected) == bool(change)


LEGACY = """\
apiVersion: actions.summerwind.dev/v1alpha1
kind: RunnerDeployment
metadata:
  name: legacy
spec:
  replicas: 1
  template:
    spec:
      repository: org/repo
"""


@pytest.mark.parametrize("kubeconform", [False, True], ids=["in-process", "kubeconform"])
def test_reconcile_and_validate_check_with_the_same_schemas(
        kubeconform: bool, tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One entry point: a custom resource whose CRD is committed in the repo is checked with
    that CRD by both commands, whichever checker runs (kubeconform was once given only
    gitscale's own schema when reconcile ran it)."""
    import sys

    if kubeconform:
        bindir = tmp_path / "bin"
        bindir.mkdir()
        fake = bindir / "kubeconform"
        fake.write_text(FAKE_KUBECONFORM.format(python=sys.executable,
                                                log=str(tmp_path / "args.json")))
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    crd = "actions.summerwind.dev_runnerdeployments.yaml"
    checkout = make_repo(tmp_path / "r", {
        "gitscale.yaml": simple_config({"legacy": "default"}),
        "sets/legacy.yaml": LEGACY,
        f"crds/{crd}": (CRDS / crd).read_text(),
        "demand.yaml": "legacy: {queued: 3, running: 0}\n",
    })
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert (code, out.splitlines()[-1]) == (0, "1 checked with " + (
        "kubeconform" if kubeconform else "in-process JSON Schema") + ", 0 skipped, 0 problems")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert yaml.safe_load((checkout / "sets/legacy.yaml").read_text())["spec"]["replicas"] == 3
    typo = (checkout / "sets/legacy.yaml").read_text().replace("replicas:", "replica:")
    (checkout / "sets/legacy.yaml").write_text(typo)
    git(checkout, "commit", "-qam", "a typo")
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    # one problem, at the line of the unknown key (kubeconform's: its pointer, else the object)
    (number,) = [n for n, line in enumerate(typo.splitlines(), 1)
                 if line.strip().startswith("replica:")]
    assert code == 1 and out.rstrip().endswith(", 1 problem"), out
    (line,) = err.splitlines()
    assert line.startswith("error: sets/legacy.yaml:") and "replica" in line, err
    if not kubeconform:
        assert line == (f"error: sets/legacy.yaml:{number}: spec: unknown field 'replica': "
                        "did you mean 'replicas'?"), line



@pytest.mark.skipif(shutil.which("kubeconform") is not None,
                    reason="the in-process checker's words (kubeconform says its own)")
def test_keys_yaml_reads_as_null_or_true_are_said_at_their_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``~:`` and ``yes:`` are a null and a boolean to YAML: each is said at its own line,
    as such (it was "unknown field 'None'" at the line of ``spec``)."""
    manifest = RUNNERSET.format(name="linux", replicas=2).replace(
        "  platform: github\n", "  platform: github\n  ~: 1\n  yes: 2\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": simple_config({"linux": "default"}),
                                    "sets/linux.yaml": manifest,
                                    "demand.yaml": "linux: {queued: 1, running: 0}\n"})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 1 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "sets/linux.yaml" in line]
    assert lines == [
        "error: sets/linux.yaml:8: spec: a key YAML reads as null, not as a field name: quote "
        "it, or remove it",
        "error: sets/linux.yaml:9: spec: a key YAML reads as true, not as a field name: quote "
        "it, or remove it"], err


@pytest.mark.parametrize(("github", "expected"), [
    pytest.param({"configURL": "https://github.com/x", "credentialSecret": "gh"},
                 ["unknown field 'credentialSecret': did you mean 'credentialsSecret' "
                  "(required)?"], id="typo-of-a-required-key-is-one-problem"),
    pytest.param({"configURL": "https://github.com/x", "credentialsSecret": "gh", "lables": []},
                 ["unknown field 'lables': did you mean 'labels'?"], id="typo-of-an-optional-key"),
    pytest.param({"configURL": "https://github.com/x", "zzz": 1, "qqq": 2},
                 ["unknown field 'qqq'", "unknown field 'zzz'", "'credentialsSecret' is required"],
                 id="each-unknown-key-its-own-problem"),
])
def test_schema_problems_are_one_per_thing_to_fix(github: dict, expected: list[str]) -> None:  # type: ignore[type-arg]
    obj = runnerset(github=github)
    problems = SchemaValidator().check(obj)
    assert sorted(p.message for p in problems) == sorted(expected)
    assert {p.path for p in problems} == {"spec.github"}


@pytest.mark.parametrize(("value", "said"), [(None, "null"), (True, "true"), (False, "false")])
def test_a_null_or_a_boolean_is_said_as_the_file_says_it(value: object, said: str) -> None:
    """jsonschema says Python's None and True; the YAML said null and true."""
    obj = runnerset(github={"configURL": "https://github.com/x", "credentialsSecret": value})
    problems = SchemaValidator().check(obj)
    assert [(p.path, p.message) for p in problems] == [
        ("spec.github.credentialsSecret", f"{said} is not of type 'string'")]

