"""Every pod gitscale itself runs meets the `restricted` Pod Security Standard: the controller
that `init` writes into the config repo, and the scaler's CronJob and its `run` and `serve`
Deployments (deploy/scaler/), as `kubectl kustomize` builds them for each GitOps tool and
platform. A namespace that enforces `restricted` (gitscale-system may) must admit all of them.

The rules are those of tests/ship/pod_security.py; the first test shows that each rule it
encodes can fail."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.commands.init_variants import URL, init
from tests.ship.pod_security import Level, level, pod_templates, violations

RESTRICTED_POD: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "c", "image": "i", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
    "volumes": [{"name": "tmp", "emptyDir": {}}],
}


def changed(path: str, value: object) -> dict[str, Any]:
    """RESTRICTED_POD with one field set (``path`` dotted; a number indexes a list)."""
    spec: dict[str, Any] = yaml.safe_load(yaml.safe_dump(RESTRICTED_POD))
    *parents, last = path.split(".")
    node: Any = spec
    for key in parents:
        node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
    if value is None:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return spec


@pytest.mark.parametrize(("path", "value", "meets"), [
    pytest.param("hostNetwork", True, "privileged", id="host-network"),
    pytest.param("containers.0.securityContext.privileged", True, "privileged",
                 id="privileged"),
    pytest.param("containers.0.securityContext.capabilities.add", ["SYS_ADMIN"], "privileged",
                 id="capability-beyond-baseline"),
    pytest.param("volumes.0", {"name": "h", "hostPath": {"path": "/"}}, "privileged",
                 id="host-path"),
    pytest.param("containers.0.ports", [{"containerPort": 80, "hostPort": 80}], "privileged",
                 id="host-port"),
    pytest.param("securityContext.seccompProfile", {"type": "Unconfined"}, "privileged",
                 id="seccomp-unconfined"),
    pytest.param("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}],
                 "privileged", id="unsafe-sysctl"),
    pytest.param("containers.0.securityContext.procMount", "Unmasked", "privileged",
                 id="proc-mount"),
    pytest.param("securityContext.seLinuxOptions", {"type": "spc_t"}, "privileged",
                 id="selinux-type"),
    pytest.param("containers.0.securityContext.capabilities.add", ["CHOWN"], "baseline",
                 id="capability-added"),
    pytest.param("containers.0.securityContext.capabilities.drop", None, "baseline",
                 id="capabilities-kept"),
    pytest.param("containers.0.securityContext.allowPrivilegeEscalation", None, "baseline",
                 id="privilege-escalation-unset"),
    pytest.param("securityContext.runAsNonRoot", None, "baseline", id="may-run-as-root"),
    pytest.param("securityContext.runAsUser", 0, "baseline", id="root-user"),
    pytest.param("securityContext.seccompProfile", None, "baseline", id="no-seccomp-profile"),
    pytest.param("volumes.0", {"name": "n", "nfs": {"server": "s", "path": "/"}}, "baseline",
                 id="nfs-volume"),
    pytest.param("containers.0.securityContext.capabilities.add", ["NET_BIND_SERVICE"],
                 "restricted", id="net-bind-service-allowed"),
    pytest.param("containers.0.securityContext.runAsNonRoot", True, "restricted",
                 id="non-root-said-twice"),
])
def test_the_checker_places_a_pod_at_the_level_the_standard_gives(
        path: str, value: object, meets: Level) -> None:
    spec = changed(path, value)
    assert level(spec) == meets, violations(spec, "restricted")


def test_the_checker_sees_init_and_ephemeral_containers_and_annotations() -> None:
    sidecar = {"name": "s", "image": "i", "securityContext": {"privileged": True}}
    assert level({**RESTRICTED_POD, "initContainers": [sidecar]}) == "privileged"
    assert level({**RESTRICTED_POD, "ephemeralContainers": [{"name": "d", "image": "i"}]}) \
        == "baseline"
    unconfined = {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
    assert level(RESTRICTED_POD, unconfined) == "privileged"
    assert level(RESTRICTED_POD) == "restricted"


def rendered(folder: Path) -> list[dict[str, Any]]:
    """The objects of a kustomization as `kubectl kustomize` builds them; without kubectl, the
    files it lists (init's kustomizations only set a namespace on what they list)."""
    if shutil.which("kubectl"):
        built = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True,
                               text=True, timeout=60)
        assert built.returncode == 0, built.stderr
        return [d for d in yaml.safe_load_all(built.stdout) if d]
    listed = yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]
    return [d for name in listed for d in yaml.safe_load_all((folder / name).read_text()) if d]


def every_scaler(folder: Path) -> None:
    """The scaler's kustomization made to list every workload init wrote (the README's swap
    of the CronJob for `run` or `serve`, all three at once)."""
    kustomization = folder / "kustomization.yaml"
    text = kustomization.read_text()
    more = sorted(p.name for p in folder.glob("deployment-*.yaml")) + ["service-serve.yaml"] * \
        (folder / "service-serve.yaml").is_file()
    kustomization.write_text(text + "".join(f"- {name}\n" for name in more))


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
@pytest.mark.parametrize("platform", ["github", "buildkite"])
def test_every_pod_gitscale_runs_meets_the_restricted_standard(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, platform: str) -> None:
    root, _ = init(tmp_path, capsys, gitops, "--platform", platform, "--repo-url", URL,
                   "--run-in", "cluster")
    every_scaler(root / "deploy/scaler")
    objects = rendered(root / "clusters/prod") + rendered(root / "deploy/scaler")
    pods = {f"{o['kind']}/{o['metadata']['name']}": pod_templates(o) for o in objects}
    pods = {name: found for name, found in pods.items() if found}
    assert sorted(pods) == sorted(["Deployment/gitscale-controller", "CronJob/gitscale-reconcile",
                                   "Deployment/gitscale-run"] +
                                  ["Deployment/gitscale-serve"] * (platform == "github"))
    for name, [(spec, notes)] in pods.items():
        assert violations(spec, "restricted", notes) == [], name
    # ... and the namespace they run in says so: the API server refuses what breaks it there
    enforced = {o["metadata"]["name"]: o["metadata"].get("labels", {}).get(
        "pod-security.kubernetes.io/enforce") for o in objects if o["kind"] == "Namespace"}
    assert enforced == {"gitscale-system": "restricted", "ci-runners": None}
    assert {o["metadata"].get("namespace") for o in objects
            if pod_templates(o)} == {"gitscale-system"}
