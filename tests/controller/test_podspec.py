"""The runner pods the controller creates start on the real runner images.

Through the real controller against the local API server: each pod is read back from the
server and checked against what its image needs to start.

- ``ghcr.io/actions/actions-runner`` (actions/runner ``images/Dockerfile``) declares no
  ENTRYPOINT and no CMD: a runner container without a ``command`` gets
  ``["/home/runner/run.sh"]``, as actions-runner-controller gives it; a ``command`` or ``args``
  of the template is kept as written.
- ``buildkite/agent`` starts by itself (``ENTRYPOINT ["buildkite-agent-entrypoint"]``,
  ``CMD ["start"]``): the controller adds environment variables only, never a command or
  arguments, so the image's entrypoint (tini, then ``buildkite-agent start``) runs.
"""
from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.controller.harness import Harness, buildkite_spec, github_spec

RUN_SH = ["/home/runner/run.sh"]


def created(harness: Harness, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The one pod the controller makes for ``spec``, as the API server holds it."""
    harness.write(name, 1, 0, spec=spec)
    report = harness.sync(name)
    assert len(report.created) == 1 and report.errors == [], report
    (pod,) = harness.pods(name)
    return pod


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in pod["spec"]["containers"] if c["name"] == name]
    return found


def with_runner(spec: dict[str, Any], **fields: Any) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    spec["template"]["spec"]["containers"][0].update(fields)
    return spec


def test_a_github_runner_without_a_command_starts_run_sh(harness: Harness) -> None:
    spec = github_spec(harness.github.url)
    assert "command" not in spec["template"]["spec"]["containers"][0]  # as `init` writes it
    runner = container(created(harness, "gh", spec), "runner")
    assert runner["command"] == RUN_SH
    assert "args" not in runner
    (jit,) = [e for e in runner["env"] if e["name"] == "ACTIONS_RUNNER_INPUT_JITCONFIG"]
    assert jit["valueFrom"]["secretKeyRef"]["key"] == "jitconfig"


@pytest.mark.parametrize("fields", [
    pytest.param({"command": ["/bin/bash", "-c", "exec /home/runner/run.sh"]}, id="command"),
    pytest.param({"command": ["/home/runner/run.sh"], "args": ["--once"]}, id="command-and-args"),
    pytest.param({"command": ["/opt/start.sh"], "args": []}, id="command-and-empty-args"),
])
def test_a_github_runners_own_command_and_args_are_kept(harness: Harness,
                                                        fields: dict[str, Any]) -> None:
    runner = container(created(harness, "gh", with_runner(github_spec(harness.github.url),
                                                          **fields)), "runner")
    for key, value in fields.items():
        assert runner[key] == value
    assert set(fields) | {"command"} >= {k for k in ("command", "args") if k in runner}


@pytest.mark.parametrize("fields", [
    pytest.param({"args": ["--check"]}, id="args-only"),
    pytest.param({"command": None}, id="null-command"),
    pytest.param({"command": []}, id="empty-command"),
])
def test_a_github_runner_whose_command_is_unset_gets_run_sh(harness: Harness,
                                                            fields: dict[str, Any]) -> None:
    """Kubernetes runs the image's entrypoint for a missing, null or empty command; this image
    has none, so run.sh stands for it and the template's args are run.sh's."""
    runner = container(created(harness, "gh", with_runner(github_spec(harness.github.url),
                                                          **fields)), "runner")
    assert runner["command"] == RUN_SH
    assert runner.get("args") == fields.get("args")


def test_only_the_runner_container_gets_the_command(harness: Harness) -> None:
    spec = github_spec(harness.github.url)
    spec["template"]["spec"]["containers"].insert(
        0, {"name": "dind", "image": "docker:27.5.1-dind"})
    pod = created(harness, "gh", spec)
    assert container(pod, "runner")["command"] == RUN_SH
    assert "command" not in container(pod, "dind") and "env" not in container(pod, "dind")


def test_a_buildkite_agent_keeps_its_images_entrypoint(harness: Harness) -> None:
    pod = created(harness, "bk", buildkite_spec())
    (agent,) = pod["spec"]["containers"]
    assert "command" not in agent and "args" not in agent
    env = {e["name"]: e for e in agent["env"]}
    assert set(env) == {"BUILDKITE_AGENT_NAME", "BUILDKITE_AGENT_TAGS",
                        "BUILDKITE_AGENT_DISCONNECT_AFTER_JOB", "BUILDKITE_AGENT_TOKEN"}
    assert env["BUILDKITE_AGENT_NAME"]["value"] == pod["metadata"]["name"]
    assert env["BUILDKITE_AGENT_TAGS"]["value"] == "queue=linux,arch=x64"
    assert env["BUILDKITE_AGENT_DISCONNECT_AFTER_JOB"]["value"] == "true"
    assert env["BUILDKITE_AGENT_TOKEN"] == {"name": "BUILDKITE_AGENT_TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "bk-token", "key": "token"}}}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 3600  # time to finish its job


def test_a_buildkite_agents_own_args_are_kept_and_no_command_is_added(harness: Harness) -> None:
    spec = with_runner(buildkite_spec(), args=["start", "--debug"])
    (agent,) = created(harness, "bk", spec)["spec"]["containers"]
    assert agent["args"] == ["start", "--debug"] and "command" not in agent


def test_the_platforms_defaults_never_override_the_template(harness: Harness) -> None:
    spec = buildkite_spec()
    spec["template"]["spec"]["terminationGracePeriodSeconds"] = 0
    assert created(harness, "bk", spec)["spec"]["terminationGracePeriodSeconds"] == 0


def test_quantities_written_as_numbers_make_a_pod(harness: Harness) -> None:
    """`nvidia.com/gpu: 1` (Kubernetes' own GPU example), `cpu: 2`, `cpu: 0.5`: the API server
    takes a number for a quantity, but the kubernetes client checks the pod against its models,
    whose quantities are strings, and refused it before sending anything — a GPU set never got a
    runner (`CreateFailed … Input should be a valid string`). Numbers are sent as the strings
    Kubernetes reads the same way."""
    spec = github_spec(harness.github.url)
    pod_spec = spec["template"]["spec"]
    pod_spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1, "cpu": 2},
                                              "requests": {"cpu": 0.5, "memory": "2Gi"}}
    pod_spec["containers"][0]["env"] = [{"name": "CPUS", "valueFrom": {"resourceFieldRef": {
        "resource": "limits.cpu", "divisor": 1}}}]
    pod_spec["initContainers"] = [{"name": "setup", "image": "busybox",
                                   "resources": {"limits": {"cpu": 1}}}]
    pod_spec["overhead"] = {"cpu": 1}
    pod_spec["volumes"] = [
        {"name": "scratch", "emptyDir": {"sizeLimit": 1073741824}},
        {"name": "work", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": 10}}}}}},
        {"name": "info", "downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {
            "containerName": "runner", "resource": "limits.cpu", "divisor": 1}}]}},
        {"name": "all", "projected": {"sources": [{"downwardAPI": {"items": [{
            "path": "cpu", "resourceFieldRef": {"containerName": "runner",
                                                "resource": "limits.cpu", "divisor": 1}}]}}]}},
    ]
    pod = created(harness, "gpu", spec)
    runner = container(pod, "runner")
    assert runner["resources"] == {"limits": {"nvidia.com/gpu": "1", "cpu": "2"},
                                   "requests": {"cpu": "0.5", "memory": "2Gi"}}
    assert runner["env"][0]["valueFrom"]["resourceFieldRef"]["divisor"] == "1"
    assert pod["spec"]["initContainers"][0]["resources"] == {"limits": {"cpu": "1"}}
    assert pod["spec"]["overhead"] == {"cpu": "1"}
    scratch, work, info, projected = pod["spec"]["volumes"][:4]
    assert scratch["emptyDir"]["sizeLimit"] == "1073741824"
    assert work["ephemeral"]["volumeClaimTemplate"]["spec"]["resources"] == {
        "requests": {"storage": "10"}}
    assert info["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"] == "1"
    assert projected["projected"]["sources"][0]["downwardAPI"]["items"][0][
        "resourceFieldRef"]["divisor"] == "1"
