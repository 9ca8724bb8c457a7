"""`gitscale validate`: warnings for what gitscale does not act on but a newcomer would miss —
a GitHub set whose RunnerSet registers other labels than its source counts, and CHANGE-ME left
in the repo's YAML files that gitscale does not manage — each at its file and line."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import git, make_repo, run

CONFIG = """\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source:
      github:
        org: acme
        labels: {labels}
    policy: {{maxReplicas: 5}}
"""

MANIFEST = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux
spec:
  replicas: 0
  platform: github
  github:
    configURL: https://github.com/acme
    credentialsSecret: github-app
{labels}  template:
    spec:
      containers:
        - name: runner
          image: runner:1
"""


def line_of(text: str, start: str) -> int:
    (number,) = [n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(start)]
    return number


@pytest.mark.parametrize(("source", "runners", "why"), [
    pytest.param("[self-hosted, linux]", "[self-hosted, linux]", None, id="equal"),
    pytest.param("[self-hosted, linux]", "[linux]", None, id="self-hosted-aside"),
    pytest.param("[self-hosted, Linux]", "[linux, self-hosted]", None, id="case-and-order-aside"),
    pytest.param("[self-hosted, linux]", "[self-hosted, linux, x64]",
                 "jobs asking for x64 are never counted", id="runner-has-more"),
    pytest.param("[self-hosted, linux, gpu]", "[self-hosted, linux]",
                 "jobs asking for gpu are counted but these runners never take them",
                 id="source-has-more"),
    pytest.param("[self-hosted, linux]", None, "jobs asking for linux", id="runner-default"),
])
def test_label_drift_is_a_warning_naming_both_lines(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, source: str, runners: str | None, why: str | None) -> None:
    config = CONFIG.format(labels=source)
    manifest = MANIFEST.format(labels=f"    labels: {runners}\n" if runners else "")
    if runners is None:  # the controller registers [<name>]: name the set otherwise
        manifest = manifest.replace("name: linux", "name: linux-pool")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config, "sets/linux.yaml": manifest})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err  # a warning: the config works, it just counts other jobs
    if why is None:
        assert err == "" and out.rstrip().endswith(", 0 problems"), out + err
        return
    (warning,) = err.splitlines()
    where = line_of(manifest, "labels:" if runners else "github:")
    assert warning.startswith(f"warning: gitscale.yaml:{line_of(config, 'labels:')}: runner set "
                              f"'linux': source labels {source} differ from spec.github.labels")
    assert f" at sets/linux.yaml:{where}: " in warning and why in warning, warning
    assert out.rstrip().endswith(", 0 problems, 1 warning"), out


BUILDKITE_CONFIG = """\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source:
      buildkite:
        queue: {queue}
    policy: {{maxReplicas: 5}}
"""

BUILDKITE_MANIFEST = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux
spec:
  replicas: 0
  platform: buildkite
  buildkite:
    queue: {queue}
    agentTokenSecret: buildkite-agent-token
  template:
    spec:
      containers:
        - name: agent
          image: buildkite/agent:3.137.0
"""


@pytest.mark.parametrize(("source", "agents"), [
    pytest.param("linux", "linux", id="equal"),
    pytest.param("linux", "linux-large", id="other-queue"),
])
def test_buildkite_queue_drift_is_a_warning_naming_both_lines(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, source: str, agents: str) -> None:
    """The source counts the jobs of its queue; the RunnerSet's agents take the jobs of theirs:
    two queues scale agents that never take the jobs counted, and leave those jobs waiting."""
    config = BUILDKITE_CONFIG.format(queue=source)
    manifest = BUILDKITE_MANIFEST.format(queue=agents)
    checkout = make_repo(tmp_path, {"gitscale.yaml": config, "sets/linux.yaml": manifest})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err  # a warning: the config works, it just counts other jobs
    if source == agents:
        assert err == "" and out.rstrip().endswith(", 0 problems"), out + err
        return
    (warning,) = err.splitlines()
    assert warning == (
        f"warning: gitscale.yaml:{line_of(config, 'queue:')}: runner set 'linux': source queue "
        f"{source!r} differs from spec.buildkite.queue {agents!r} at "
        f"sets/linux.yaml:{line_of(manifest, 'queue:')}: the source counts the jobs of queue "
        f"{source!r}, and these agents take only the jobs of queue {agents!r} (keep the two "
        "equal)"), warning
    assert out.rstrip().endswith(", 0 problems, 1 warning"), out


SIDECAR = "        - name: {name}\n          image: {image}\n"


@pytest.mark.parametrize(("before", "after", "warned"), [
    pytest.param("", "", False, id="one-container"),
    pytest.param("", SIDECAR.format(name="logs", image="fluent-bit:3"), False,
                 id="sidecar-after-the-agent"),
    pytest.param(SIDECAR.format(name="dind", image="docker:dind"), "", True,
                 id="sidecar-before-the-agent"),
    pytest.param(SIDECAR.format(name="dind", image="docker:dind"), "", False,
                 id="the-agent-named-runner"),
])
def test_a_runner_container_taken_by_position_before_another_is_a_warning(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, before: str, after: str, warned: bool, request) -> None:
    """init names a Buildkite set's container `agent`; the controller takes the container named
    `runner` as the runner, else the first. A sidecar listed before `agent` (a docker:dind a
    newcomer adds above it) silently becomes the runner: it gets the agent's environment and
    the pod is judged by it, while the agent starts with no token, tags or name."""
    manifest = BUILDKITE_MANIFEST.format(queue="linux").replace(
        "        - name: agent\n", before + "        - name: agent\n")
    manifest += after
    if request.node.callspec.id == "the-agent-named-runner":
        manifest = manifest.replace("- name: agent", "- name: runner")
    config = BUILDKITE_CONFIG.format(queue="linux")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config, "sets/linux.yaml": manifest})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err  # a warning: the controller does as documented
    if not warned:
        assert err == "" and out.rstrip().endswith(", 0 problems"), out + err
        return
    (warning,) = err.splitlines()
    assert warning == (
        f"warning: sets/linux.yaml:{line_of(manifest, '- name: dind')}: RunnerSet linux: "
        "no container is named 'runner', so the controller takes the first, 'dind', as the "
        "runner: it gets the platform's environment and the pod is judged by it, not by "
        "'agent'; name the runner's container 'runner' (or list it first)"), warning
    assert out.rstrip().endswith(", 0 problems, 1 warning"), out


TOKEN_SECRET = "    agentTokenSecret: buildkite-agent-token\n"
AGENT = "        - name: agent\n          image: buildkite/agent:3.137.0\n"


@pytest.mark.parametrize(("secret", "container", "warned"), [
    pytest.param(True, AGENT, False, id="agent-token-secret"),
    pytest.param(False, AGENT, True, id="no-token-at-all"),
    pytest.param(False, AGENT + "          env:\n            - name: BUILDKITE_AGENT_TOKEN\n"
                 "              valueFrom: {secretKeyRef: {name: bk, key: token}}\n", False,
                 id="token-in-env"),
    pytest.param(False, AGENT + "          envFrom:\n            - secretRef: {name: bk}\n",
                 False, id="env-from"),
    pytest.param(False, AGENT.replace("buildkite/agent:3.137.0", "acme/agent:1"), False,
                 id="an-image-of-its-own"),
])
def test_a_buildkite_agent_given_no_token_is_a_warning(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, secret: bool, container: str, warned: bool) -> None:
    """A RunnerSet without `agentTokenSecret` whose agent container gets no token otherwise:
    every agent exits at start, unregistered, and the set's pods fail over and over — found by
    `validate`, not on the cluster."""
    manifest = BUILDKITE_MANIFEST.format(queue="linux").replace(AGENT, container)
    if not secret:
        manifest = manifest.replace(TOKEN_SECRET, "")
    config = BUILDKITE_CONFIG.format(queue="linux")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config, "sets/linux.yaml": manifest})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err
    if not warned:
        assert err == "" and out.rstrip().endswith(", 0 problems"), out + err
        return
    assert err.splitlines() == [
        f"warning: sets/linux.yaml:{line_of(manifest, 'buildkite:')}: RunnerSet linux: "
        "spec.buildkite names no agentTokenSecret and container 'agent' gets no "
        "BUILDKITE_AGENT_TOKEN: its agents would exit at start, unregistered; add "
        "`agentTokenSecret: buildkite-agent-token` (the Secret's key `token`: "
        "docs/credentials.md)"], err
    assert out.rstrip().endswith(", 0 problems, 1 warning"), out


@pytest.mark.skipif(shutil.which("kubeconform") is not None, reason="in-process validation")
@pytest.mark.parametrize(("api_version", "kind", "hint"), [
    ("actions.summerwind.dev/v1alpha1", "RunnerDeployment",
     "commit its CustomResourceDefinition in the config repo"),
    ("apps/v1", "Deployment", "install kubeconform to check built-in kinds"),
])
def test_a_kind_without_a_schema_is_skipped_saying_how_to_check_it(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, api_version: str, kind: str, hint: str) -> None:
    """An ARC RunnerDeployment without its CRD in the repo was told to install kubeconform,
    which has no schema for it either (docs/migrating-from-arc.md, "Step 0")."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": "runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                         "    source: {file: demand.yaml}\n    policy: default\n",
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
        "sets/linux.yaml": f"apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: linux}}\n"
                           "spec:\n  replicas: 1\n"})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err
    assert out.startswith(f"skipped linux: no schema for {api_version} {kind} ({hint}"), out


def test_a_buildkite_or_file_source_has_no_labels_to_compare(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = CONFIG.format(labels="[x]").replace(
        "      github:\n        org: acme\n        labels: [x]\n", "      file: demand.yaml\n")
    manifest = MANIFEST.format(labels="    labels: [self-hosted, gpu]\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config, "sets/linux.yaml": manifest,
                                    "demand.yaml": "linux: {queued: 0, running: 0}\n"})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert (code, err) == (0, ""), err


def test_change_me_in_unmanaged_files_is_a_warning_and_exit_0(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = CONFIG.format(labels="[self-hosted, linux]")
    manifest = MANIFEST.format(labels="    labels: [self-hosted, linux]\n")
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config, "sets/linux.yaml": manifest,
        "flux/source.yaml": "spec:\n  url: https://CHANGE-ME/c.git  # the clone URL\n",
        "ci/job.yml": "a: 1\nb: CHANGE-ME\n",
        "notes.txt": "CHANGE-ME is not YAML: not ours to report\n",
        "other.yaml": "# a comment that says CHANGE-ME is not a value\nx: 1\n",
    })
    (checkout / "untracked.yaml").write_text("x: CHANGE-ME\n")  # git does not track it
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err
    assert err.splitlines() == [
        "warning: ci/job.yml:2: replace CHANGE-ME with the value gitscale init could not guess",
        "warning: flux/source.yaml:2: replace CHANGE-ME in 'https://CHANGE-ME/c.git' with "
        "the clone URL"]
    assert out.rstrip().endswith(", 0 problems, 2 warnings"), out
    # the same in gitscale.yaml's own values is a problem: exit 1, errors before warnings
    (checkout / "gitscale.yaml").write_text(config.replace("org: acme", "org: CHANGE-ME"))
    git(checkout, "commit", "-qam", "unfinished")
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 1 and out.rstrip().endswith(", 1 problem, 2 warnings"), out
    assert err.splitlines()[0] == (f"error: gitscale.yaml:{line_of(config, 'org:')}: replace "
                                   "CHANGE-ME with the value gitscale init could not guess")


def _older_crd() -> str:
    """gitscale's RunnerSet CRD as a release before ``spec.backlog`` shipped it."""
    import yaml

    from gitscale.manifest.crd_drift import shipped_text

    crd = yaml.safe_load(shipped_text())
    for version in crd["spec"]["versions"]:
        del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["backlog"]
    return yaml.safe_dump(crd, sort_keys=False)


@pytest.mark.parametrize("crd_path", ["deploy/crds/runnersets.gitscale.dev.yaml",
                                      "clusters/prod/gitscale-system/crd.yaml"])  # init's
def test_an_older_runnerset_crd_in_the_repo_is_a_warning_in_validate_and_reconcile(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, crd_path: str) -> None:
    """Upgraded in the wrong order (the scaler before the repo's CRD): RunnerSets are checked
    against the CRD gitscale ships, so without a warning `validate` says all is well while the
    cluster's CRD does not know the fields the scaler writes."""
    from gitscale.manifest.crd_drift import shipped_text
    from tests.helpers import RUNNERSET, simple_config

    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 5}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 2, running: 0}\n",
        crd_path: _older_crd(),
    })
    expected = (f"warning: {crd_path}: older than this gitscale's RunnerSet CRD (no "
                "spec.backlog): run `gitscale crd --repo .` and apply it before this version "
                "writes")
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err
    assert expected in err.splitlines()
    assert out.strip().endswith("0 problems, 1 warning")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout),
                         "--now", "2026-11-21T09:00:00Z")
    assert code == 0, err
    assert expected in err.splitlines()
    assert "gitscale: linux" in git(checkout, "log", "-1", "--format=%s")  # warned, not refused

    # `gitscale crd --repo .` brings it up to date: no warning any more
    assert run(capsys, "crd", "--repo", str(checkout))[0] == 0
    assert (checkout / crd_path).read_text() == shipped_text()
    git(checkout, "push", "--quiet")
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0 and "warning" not in err, err
    more = tmp_path / "more.yaml"
    more.write_text("linux: {queued: 4, running: 0}\n")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(more),
                         "--now", "2026-11-21T09:01:00Z")
    assert code == 0 and "warning" not in err, err


def test_an_older_runnerset_crd_is_not_used_for_runnersets_beside_a_legacy_set(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """A set of another kind (a legacy RunnerDeployment) makes validation read the repo's CRDs;
    the repo's copy of the RunnerSet CRD must not then replace the shipped one: a config whose
    first set was legacy refused the RunnerSet's spec.backlog (an error), the same config in
    the other order only warned."""
    from tests.helpers import REFERENCE, RUNNERSET

    legacy = ("apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerDeployment\n"
              "metadata: {name: legacy}\nspec:\n  replicas: 1\n"
              "  template: {spec: {organization: acme}}\n")
    config = ("runnerSets:\n"
              "  - {name: legacy, manifest: sets/legacy.yaml, source: {file: demand.yaml},"
              " policy: {maxReplicas: 5}}\n"
              "  - {name: linux, manifest: sets/linux.yaml, source: {file: demand.yaml},"
              " policy: {maxReplicas: 2}}\n")
    crd_path = "clusters/prod/gitscale-system/crd.yaml"
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config,
        "sets/legacy.yaml": legacy,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "legacy: {queued: 1, running: 0}\nlinux: {queued: 5, running: 0}\n",
        crd_path: _older_crd(),
        "crds/runnerdeployments.yaml": (REFERENCE / "crds" /
                                        "actions.summerwind.dev_runnerdeployments.yaml").read_text(),
    })
    # the first pass writes spec.backlog (5 jobs, at most 2 runners)
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout),
                         "--now", "2026-11-21T09:00:00Z")
    assert code == 0, err
    assert "backlog: 3" in (checkout / "sets/linux.yaml").read_text()
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err
    assert "error" not in err, err
    assert out.strip().endswith("2 checked with in-process JSON Schema, 0 skipped, "
                                "0 problems, 1 warning"), out
    # the legacy object is still checked against the committed ARC CRD
    (checkout / "sets/legacy.yaml").write_text(legacy.replace("organization", "organisation"))
    git(checkout, "commit", "-qam", "typo")
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 1 and "unknown field 'organisation'" in err, err


def _crd_with(change: str) -> str:
    """gitscale's RunnerSet CRD with one part of it not the shape a CRD takes."""
    import yaml

    from gitscale.manifest.crd_drift import shipped_text

    crd = yaml.safe_load(shipped_text())
    if change == "schema-scalar":
        crd["spec"]["versions"][0]["schema"] = "broken"
    elif change == "versions-number":
        crd["spec"]["versions"] = 5
    elif change == "versions-string":
        crd["spec"]["versions"] = "v1alpha1"
    elif change == "version-list":
        crd["spec"]["versions"] = [["v1alpha1"]]
    elif change == "openapi-list":
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = []
    elif change == "spec-null":
        crd["spec"] = None
    elif change == "recursive-anchor":  # dumped as &id001 {…, properties: {spec: *id001}}
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        schema["properties"]["spec"] = schema
    elif change == "not-yaml":
        return "spec: [\n"
    elif change == "too-deep":
        return "spec: " + "[" * 1001 + "]" * 1001 + "\n"
    return yaml.safe_dump(crd, sort_keys=False)


@pytest.mark.parametrize(("change", "why"), [
    pytest.param("schema-scalar", "spec.versions[0].schema is not a mapping", id="schema-scalar"),
    pytest.param("versions-number", "spec.versions is not a list of versions",
                 id="versions-number"),
    pytest.param("versions-string", "spec.versions is not a list of versions",
                 id="versions-string"),
    pytest.param("version-list", "spec.versions[0] is not a mapping", id="version-list"),
    pytest.param("openapi-list", "spec.versions[0].schema.openAPIV3Schema is not a mapping",
                 id="openapi-list"),
    pytest.param("spec-null", "spec is not a mapping", id="spec-null"),
    pytest.param("recursive-anchor", "spec.versions[0].schema.openAPIV3Schema.properties.spec "
                 "holds itself: a recursive YAML anchor", id="recursive-anchor"),
    pytest.param("not-yaml", "line 2: not valid YAML: did not find expected node content",
                 id="not-yaml"),
    pytest.param("too-deep", "line 1: nested more than 1000 levels deep", id="too-deep"),
])
def test_a_malformed_runnerset_crd_is_a_warning_not_a_crash(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, change: str, why: str) -> None:
    """A CRD gitscale cannot read is one it cannot compare: said, as the other warnings are
    (`gitscale crd --repo .` replaces it). `reconcile` checks after it has pushed: it must not
    turn a pass that landed into a crash (it was exit 70, the commit made)."""
    from tests.helpers import RUNNERSET, simple_config

    crd_path = "clusters/prod/gitscale-system/crd.yaml"
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 5}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 2, running: 0}\n",
        crd_path: _crd_with(change),
    })
    expected = (f"warning: {crd_path}: a RunnerSet CRD gitscale cannot compare with its own "
                f"({why}): run `gitscale crd --repo .` and apply it before this version writes")
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err
    assert expected in err.splitlines(), err
    assert out.strip().endswith("0 problems, 1 warning")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout),
                         "--now", "2026-11-21T09:00:00Z")
    assert code == 0, err
    assert expected in err.splitlines(), err
    assert "gitscale: linux" in git(checkout, "log", "-1", "--format=%s")
    assert git(checkout, "rev-parse", "HEAD") == git(tmp_path / "remote.git", "rev-parse",
                                                     "main")  # pushed


REFUSED = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux
spec:
  replicas: 0
  platform: {platform}
{block}  template:
    spec:
      containers:
        - name: runner
          image: runner:1
"""


@pytest.mark.parametrize(("platform", "block", "refusal"), [
    pytest.param("github", "", "spec.github.configURL is required for platform github",
                 id="github-without-its-block"),
    pytest.param("github", "  github: {configURL: 'https://bot:s3cr3t@github.com/acme', "
                 "credentialsSecret: gh}\n", "must not carry credentials",
                 id="credentials-in-the-url"),
    pytest.param("buildkite", "  buildkite: {queue: default, organization: acme}\n",
                 "spec.buildkite.organization and spec.buildkite.apiTokenSecret go together",
                 id="buildkite-org-without-its-token"),
])
def test_a_runnerset_the_controller_would_refuse_is_a_problem(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, platform: str, block: str, refusal: str) -> None:
    """The schema accepts these; the controller would set Ready False, InvalidSpec. validate
    (the pull request's check) says so at the file and line, by the controller's own checks."""
    repo = make_repo(tmp_path, {
        "gitscale.yaml": "runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                         "    source: {file: demand.yaml}\n    policy: {maxReplicas: 5}\n",
        "sets/linux.yaml": REFUSED.format(platform=platform, block=block),
        "demand.yaml": "linux: {queued: 1, running: 0}\n"})
    code, out, err = run(capsys, "validate", "--repo", str(repo))
    assert code == 1, out + err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith("error: sets/linux.yaml:5: RunnerSet linux (set linux): the "
                           "controller would refuse it: ") and refusal in line, line
    assert "s3cr3t" not in out + err


def test_each_runnerset_of_a_file_is_checked_when_another_has_a_schema_problem(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """Two RunnerSets in one file, one with a schema problem and one the controller would
    refuse: both are said in one run (the controller's checks skipped only the object the
    schema refused), not the second after the first is fixed."""
    bad_schema = REFUSED.format(platform="github", block="  github: {configURL: "
                                "'https://github.com/acme', credentialsSecret: 7}\n")
    refused = REFUSED.format(platform="github", block="").replace("name: linux", "name: gpu")
    repo = make_repo(tmp_path, {
        "gitscale.yaml": "runnerSets:\n"
                         "  - name: linux\n    manifest: sets/both.yaml\n"
                         "    object: {kind: RunnerSet, name: linux}\n"
                         "    source: {file: demand.yaml}\n    policy: {maxReplicas: 5}\n"
                         "  - name: gpu\n    manifest: sets/both.yaml\n"
                         "    object: {kind: RunnerSet, name: gpu}\n"
                         "    source: {file: demand.yaml}\n    policy: {maxReplicas: 5}\n",
        "sets/both.yaml": bad_schema + "---\n" + refused,
        "demand.yaml": "linux: {queued: 1, running: 0}\ngpu: {queued: 0, running: 0}\n"})
    code, out, err = run(capsys, "validate", "--repo", str(repo))
    assert code == 1, out + err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert any("credentialsSecret" in line for line in errors), errors
    assert any("RunnerSet gpu (set gpu): the controller would refuse it" in line
               for line in errors), errors
    assert not any("RunnerSet linux (set linux): the controller" in line for line in errors)


def test_every_manifest_that_cannot_be_read_is_a_problem_in_one_run(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """Of many sets, one manifest that is not YAML, one whose replicas gitscale cannot read and
    one that is missing: `validate` says all three in one run, each once at its line, and
    still checks the others — not the first alone, the next after it is fixed."""
    names = [f"s{i:02d}" for i in range(1, 13)]
    manifest = MANIFEST.format(labels="")
    files = {f"sets/{n}.yaml": manifest.replace("name: linux", f"name: {n}") for n in names}
    files["sets/s03.yaml"] = "apiVersion: gitscale.dev/v1alpha1\nkind: RunnerSet\nspec: [1\n"
    files["sets/s07.yaml"] = files["sets/s07.yaml"].replace("replicas: 0", "replicas: one")
    del files["sets/s11.yaml"]
    config = "runnerSets:\n" + "".join(
        f"  - name: {n}\n    manifest: sets/{n}.yaml\n    source: {{file: demand.yaml}}\n"
        "    policy: default\n" for n in names)
    repo = make_repo(tmp_path, {"gitscale.yaml": config, "demand.yaml": "{}\n", **files})
    code, out, err = run(capsys, "validate", "--repo", str(repo))
    assert code == 1, out + err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 3, errors
    assert errors[0].startswith("error: sets/s03.yaml:4: not valid YAML"), errors
    assert errors[1] == ("error: sets/s07.yaml:6: spec.replicas must be an integer from 0 to "
                         "10000, found 'one'"), errors
    assert errors[2] == ("error: gitscale.yaml:43: runner set 's11': manifest sets/s11.yaml "
                         "not found in the config repo"), errors
    assert out.strip() == "9 checked with in-process JSON Schema, 0 skipped, 3 problems", out


def test_a_set_removed_from_the_config_whose_manifest_stays_is_a_warning(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """A set deleted from gitscale.yaml while its manifest stays (README: delete both in one
    commit) keeps its last count unscaled, and plan and reconcile say nothing: validate warns
    at the object's line, whether it is alone in its file or beside a managed set. An object
    gitscale never wrote (no patch ID, none of its annotations) is not its business."""
    manifest = MANIFEST.format(labels="")
    written = manifest.replace("name: linux", "name: gpu").replace(
        "  name: gpu\n", "  name: gpu\n  annotations:\n    gitscale.dev/jobs: \"1a2b\"\n")
    hand = manifest.replace("name: linux", "name: fixed")
    arm = manifest.replace("name: linux", "name: arm").replace(
        "replicas: 0", "replicas: 3\n  patchID: 4")
    repo = make_repo(tmp_path, {
        "gitscale.yaml": CONFIG.format(labels="[self-hosted, linux]").replace(
            "manifest: sets/linux.yaml", "manifest: sets/linux.yaml\n"
            "    object: {kind: RunnerSet, name: linux}"),
        "sets/linux.yaml": manifest.replace("labels: ", "") + "---\n" + arm,
        "sets/gpu.yaml": written, "sets/fixed.yaml": hand})
    code, out, err = run(capsys, "validate", "--repo", str(repo))
    assert code == 0, out + err
    warnings = sorted(line for line in err.splitlines() if line.startswith("warning:"))
    assert warnings == [
        "warning: sets/gpu.yaml:4: RunnerSet gpu was written by gitscale but no runner set of "
        "gitscale.yaml manages it: it stays at replicas 0, unscaled (a set removed from "
        "gitscale.yaml: remove its manifest too, or add the set back)",
        "warning: sets/linux.yaml:20: RunnerSet arm was written by gitscale but no runner set "
        "of gitscale.yaml manages it: it stays at replicas 3, unscaled (a set removed from "
        "gitscale.yaml: remove its manifest too, or add the set back)"], err


@pytest.mark.parametrize(("source", "platform"), [
    pytest.param("buildkite", "github", id="buildkite-source-github-runners"),
    pytest.param("github", "buildkite", id="github-source-buildkite-agents"),
])
def test_a_source_of_another_platform_than_the_runners_is_a_warning(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, source: str, platform: str) -> None:
    """A set's source changed on day two (github → buildkite) while its RunnerSet still runs
    the other platform's runners: they scale with jobs they can never take."""
    config = BUILDKITE_CONFIG.format(queue="linux") if source == "buildkite" else \
        CONFIG.format(labels="[self-hosted, linux]")
    manifest = BUILDKITE_MANIFEST.format(queue="linux") if platform == "buildkite" else \
        MANIFEST.format(labels="    labels: [self-hosted, linux]\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config, "sets/linux.yaml": manifest})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, err
    (warning,) = err.splitlines()
    assert warning == (
        f"warning: gitscale.yaml:{line_of(config, f'{source}:')}: runner set 'linux': its "
        f"source counts {source} jobs, and its RunnerSet at "
        f"sets/linux.yaml:{line_of(manifest, 'platform:')} runs platform {platform}: these "
        f"runners never take the jobs counted (a {platform} source, or platform: {source})"), \
        warning


def test_two_sets_on_one_object_are_a_problem_naming_both_lines(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """An entry copied on day two without changing its `object`: `plan` and `reconcile`
    refuse it, so `validate` (the review of the pull request) does too."""
    config = CONFIG.format(labels="[self-hosted, linux]") + (
        "  - name: linux-big\n    manifest: sets/linux.yaml\n    object: {name: linux}\n"
        "    source: {file: demand.yaml}\n    policy: default\n")
    manifest = MANIFEST.format(labels="    labels: [self-hosted, linux]\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config, "sets/linux.yaml": manifest,
                                    "demand.yaml": "linux-big: {queued: 0, running: 0}\n"})
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 1, out + err
    assert err.splitlines() == [
        f"error: gitscale.yaml:{line_of(config, 'object:')}: runner set 'linux-big': resolves "
        "to RunnerSet linux in sets/linux.yaml, the object of runner set 'linux' "
        "(gitscale.yaml:3): two sets would write one object; "
        "give this set its own `object: {kind: ..., name: ...}`"], err
