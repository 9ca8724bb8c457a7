"""deploy/controller/: the RBAC allows exactly what the controller does, and the Deployment
runs the real command with probes on the endpoints it serves."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import yaml

from gitscale.controller import kube
from gitscale.cli import cli
from tests.controller.github_fake import FakeRunner
from gitscale.controller.leader import LeaderElector, LeaseConfig
from gitscale.controller.podspec import instance
from tests.controller.harness import NS, Harness

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "controller"


def manifests() -> dict[str, dict[str, Any]]:
    docs = [d for f in sorted(DEPLOY.glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def test_rbac_allows_exactly_the_calls_the_controller_makes(harness: Harness) -> None:
    # Exercise every verb: create (pods, JIT secrets), credentials, scale-down, status, events.
    harness.write("rs", 2, 0)
    harness.sync("rs")
    for pod in harness.names("rs"):
        harness.running(pod)
    harness.write("rs", 0, 0)
    harness.sync("rs")
    # A registration a crash left without a pod: removed with its Secret after the grace.
    name = f"rs-{instance(harness.api.get_object('runnersets', 'rs', NS)['metadata']['uid'])}" \
        "-0a1b2c"  # type: ignore[index]
    with harness.github.lock:
        runner_id = next(harness.github.ids)
        harness.github.runners[runner_id] = FakeRunner(runner_id, name, "orgs/acme",
                                                       ["linux"], 1)
    harness.clock.advance(301)
    harness.sync("rs")
    harness.clock.advance(61)
    assert harness.sync("rs").leftovers == [name]
    # Events: a warning posted, then counted again (harness.sync waits for them).
    harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"].pop("template"), NS)
    harness.sync("rs")
    harness.sync("rs")
    assert [e["count"] for e in harness.events("rs")
            if e["reason"] == "InvalidSpec"] == [2]
    # Leader election: take the Lease, renew it, give it up.
    elector = LeaderElector(harness.controller.kube, LeaseConfig(NS, "me"),
                            on_start=lambda: None, on_stop=lambda: None)
    assert elector._try(5.0) == "ours" and elector._try(5.0) == "ours"
    elector._release()
    used = {(verb, resource.replace(".gitscale.dev", "").replace(".coordination.k8s.io", ""))
            for (verb, resource), n in harness.api.calls_snapshot().items() if n}
    objects = manifests()
    allowed = {(verb, resource) for name in ("Role/gitscale-controller",
                                             "Role/gitscale-controller-leader-election")
               for rule in objects[name]["rules"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert used == allowed
    lease_role = objects["Role/gitscale-controller-leader-election"]
    assert lease_role["rules"][0]["resources"] == ["leases"]


CLIENTS = ("core", "custom", "coordination")  # kube.py's kubernetes client APIs


def client_methods() -> set[tuple[str, bool]]:
    """Each kubernetes client method kube.py names (``self.core.list_namespaced_pod``), and
    whether it is streamed as a watch (named inside a call of ``self._stream``)."""
    tree = ast.parse(Path(kube.__file__).read_text())
    streamed = {id(node) for call in ast.walk(tree) if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute) and call.func.attr == "_stream"
                for node in ast.walk(call)}
    return {(node.attr, id(node) in streamed) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            and node.value.attr in CLIENTS and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "self"}


def authorization(method: str, watch: bool) -> tuple[str, str]:
    """The (verb, resource) the API server authorizes a client method's request as:
    ``read_namespaced_secret`` is get on secrets, a list streamed as a watch is watch,
    ``patch_namespaced_custom_object_status`` is patch on runnersets/status (the one custom
    resource kube.py speaks to)."""
    verb, _, rest = method.partition("_")
    verb = {"read": "get", "replace": "update"}.get(verb, verb)
    if watch:
        assert verb == "list", method
        verb = "watch"
    rest = rest.replace("namespaced_", "").replace("_for_all_namespaces", "") \
        .replace("cluster_", "")
    if rest.startswith("custom_object"):
        return verb, rest.replace("custom_object", "runnersets").replace("_status", "/status")
    return verb, f"{rest}s"


def test_rbac_grants_exactly_the_calls_kube_py_can_make() -> None:
    """Read from kube.py's code, not from the calls a test made: a call no test exercises is
    still granted (a 403 in a real cluster otherwise), and nothing is granted that no call
    needs."""
    methods = client_methods()
    assert ("list_namespaced_pod", True) in methods  # the watch of runner pods
    assert ("patch_namespaced_custom_object_status", False) in methods  # named, not called
    used = {authorization(method, watch) for method, watch in methods}
    objects = manifests()
    granted = {(verb, resource) for name in ("Role/gitscale-controller",
                                             "Role/gitscale-controller-leader-election")
               for rule in objects[name]["rules"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert used == granted


def test_deployment_runs_the_controller_with_probes() -> None:
    objects = manifests()
    deployment = objects["Deployment/gitscale-controller"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ctx = cli.make_context("gitscale", list(container["args"]))
    sub = cli.get_command(ctx, container["args"][0])
    assert sub is not None
    params = sub.make_context("controller", list(container["args"][1:])).params
    assert params["namespace"] == "ci-runners" and params["health_port"] == 8081
    assert container["ports"][0]["containerPort"] == 8081
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert deployment["spec"]["replicas"] == 2 and params["leader_elect"] is True
    (env,) = container["env"]
    assert env == {"name": "POD_NAMESPACE",
                   "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    assert deployment["metadata"]["namespace"] == "gitscale-system"
    binding = objects["RoleBinding/gitscale-controller-leader-election"]
    assert binding["metadata"]["namespace"] == "gitscale-system"
    # the Lease it may read and update is the one it elects with (create cannot be by name)
    leases = [rule for rule in objects["Role/gitscale-controller-leader-election"]["rules"]
              if rule["resources"] == ["leases"]]
    assert {tuple(r["verbs"]): r.get("resourceNames") for r in leases} == {
        ("get", "update"): [params["leader_election_id"]], ("create",): None}
    # the passes' shutdown, a thread's last join, a Kubernetes call in flight (loop.stop)
    assert pod["terminationGracePeriodSeconds"] > params["shutdown_timeout"] + 5 + kube.TIMEOUT
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    hardened = container["securityContext"]
    assert hardened["readOnlyRootFilesystem"] is True
    assert hardened["allowPrivilegeEscalation"] is False
    assert hardened["capabilities"]["drop"] == ["ALL"]
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    account = objects["ServiceAccount/gitscale-controller"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    binding = objects["RoleBinding/gitscale-controller"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gitscale-controller",
                                    "namespace": account["metadata"]["namespace"]}]
    assert binding["metadata"]["namespace"] == params["namespace"]
    assert {"Namespace/gitscale-system", "Namespace/ci-runners"} <= set(objects)


def test_owner_references_need_no_more_than_the_role_grants(harness: Harness) -> None:
    # Where the OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift enables it),
    # an ownerReference with blockOwnerDeletion: true may only be set by whoever may update the
    # owner's finalizers: the Role grants no such thing, so every create would be refused.
    harness.write("rs", 2, 0)
    harness.sync("rs")
    role = manifests()["Role/gitscale-controller"]
    allowed = {(resource, verb) for rule in role["rules"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    plural = {"RunnerSet": "runnersets", "Pod": "pods"}
    created = harness.pods("rs") + harness.api.objects("secrets", "default",
                                                       label_selector="gitscale.dev/runnerset")
    assert len(created) == 4
    for obj in created:
        for ref in obj["metadata"]["ownerReferences"]:
            if ref.get("blockOwnerDeletion"):
                assert (f"{plural[ref['kind']]}/finalizers", "update") in allowed, (
                    f"{obj['kind']} {obj['metadata']['name']}: blockOwnerDeletion on its "
                    f"{ref['kind']} owner needs update on {plural[ref['kind']]}/finalizers")


def test_readme_permission_table_matches_the_role() -> None:
    """deploy/controller/README.md tells people what they grant: every verb, no more, no less."""
    rows = re.findall(r"^\| `([a-z/]+)` \| ([a-z, ]+) \|", (DEPLOY / "README.md").read_text(),
                      re.MULTILINE)
    documented = {(resource, verb.strip()) for resource, verbs in rows
                  for verb in verbs.split(",")}
    granted = {(resource, verb) for name, obj in manifests().items()
               if name.startswith("Role/") for rule in obj["rules"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert documented == granted


def test_rbac_comment_says_what_the_controller_can_serve() -> None:
    """rbac.yaml's header (init copies it into every config repo) said to bind the Role in more
    namespaces and drop --namespace; the controller watches one namespace or all of them."""
    option = next(p for p in cli.commands["controller"].params if p.name == "namespace")
    assert not option.multiple and option.nargs == 1  # one namespace, or none: every one
    header = " ".join(line.lstrip("# ") for line in (DEPLOY / "rbac.yaml").read_text()
                      .split("\napiVersion:")[0].splitlines())
    assert "bind the same Role in each" not in header
    for words in ("one controller per namespace", "--leader-election-id", "drop --namespace",
                  "ClusterRole of the same rules and a ClusterRoleBinding",
                  "docs/multiple-orgs.md"):
        assert words in header, words
    docs = (DEPLOY.parents[1] / "docs/multiple-orgs.md").read_text()
    assert "ClusterRoleBinding" in docs and "--leader-election-id" in docs


def test_multiple_orgs_cluster_role_rules_are_the_roles() -> None:
    """docs/multiple-orgs.md lists the rules to copy into a ClusterRole for a controller of
    every namespace: it left out `list` on Secrets (the sweep of JIT configs an earlier run
    left behind), so a ClusterRole written from it was refused that list every pass."""
    docs = " ".join((DEPLOY.parents[1] / "docs/multiple-orgs.md").read_text().split())
    listed = re.search(r"the rules of `rbac.yaml` beside it \(([^)]*)\)", docs)
    assert listed is not None
    names = {"RunnerSets": "runnersets", "`runnersets/status`": "runnersets/status",
             "pods": "pods", "Secrets": "secrets", "events": "events"}
    documented = {(names[what.strip()], verb.strip()) for part in listed[1].split(";")
                  for what, verbs in [part.split(":")] for verb in verbs.split(",")}
    granted = {(resource, verb) for obj in manifests().values()
               if obj["kind"] == "Role" and obj["metadata"]["name"] == "gitscale-controller"
               for rule in obj["rules"] for resource in rule["resources"]
               for verb in rule["verbs"]}
    assert documented == granted
