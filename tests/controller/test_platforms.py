"""The platform registry: the CRD, the parsing and the busy rules all come from one map, and a
platform not in it is an explicit "unsupported" error."""
from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from gitscale.controller import crd as resource
from gitscale.controller.decide import Phase
from gitscale.controller.errors import InvalidRunnerSet, UnsupportedPlatform
from gitscale.controller.observe import parse_runnerset
from gitscale.controller.platform import Kind, Registered
from gitscale.controller.platform_buildkite import BUILDKITE
from gitscale.controller.platform_github import GITHUB
from gitscale.controller.platforms import PLATFORMS, kind_of
from gitscale.controller.podspec import runner_pod
from gitscale.controller.status import Condition


def runnerset(platform: object, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"platform": platform, "replicas": 1, "patchID": 1, "template": {
        "spec": {"containers": [{"name": "runner", "image": "runner:1"}]}}}
    if settings is not None:
        spec[str(platform)] = settings
    return {"metadata": {"name": "set", "namespace": "ci", "uid": "u"}, "spec": spec}


def test_the_crd_lists_every_platform_of_the_registry_and_its_settings() -> None:
    schema = resource.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]["properties"]
    assert spec["platform"]["enum"] == list(PLATFORMS)
    assert {"github", "buildkite"} <= set(PLATFORMS)  # and any platform added since
    for name, kind in PLATFORMS.items():
        assert spec[name] is kind.schema and kind.name == name


@pytest.mark.parametrize("platform", ["jenkins", None, 3, "GitHub"])
def test_a_platform_not_in_the_registry_is_unsupported(platform: object) -> None:
    with pytest.raises(UnsupportedPlatform, match=f"is not one of {', '.join(PLATFORMS)}: "
                                                  "this platform is not supported"):
        parse_runnerset(runnerset(platform), kind_of)
    assert issubclass(UnsupportedPlatform, InvalidRunnerSet)  # a condition, not a crash


def test_the_registry_parses_each_platforms_settings() -> None:
    gh = parse_runnerset(runnerset("github", {"configURL": "https://github.com/acme",
                                              "credentialsSecret": "creds"}), kind_of)
    assert (gh.kind, gh.settings.labels, gh.settings.credentials_secret) == (
        GITHUB, ("set",), "creds")
    bk = parse_runnerset(runnerset("buildkite", {"queue": "q"}), kind_of)
    assert (bk.kind, bk.settings.queue, bk.settings.api_url) == (
        BUILDKITE, "q", "https://api.buildkite.com")


# Every setting each platform takes, valid together (Buildkite's agents API pair left out: the
# two go together, which the CRD's structural schema cannot say; the controller says it).
FULL_SETTINGS = {
    "github": {"configURL": "https://github.com/acme", "labels": ["linux"],
               "runnerGroup": "ci", "credentialsSecret": "creds"},
    "buildkite": {"queue": "q", "tags": ["os=linux"], "agentTokenSecret": "agent",
                  "apiURL": "https://api.buildkite.com"},
}


@pytest.mark.parametrize(("name", "field"), [
    pytest.param(name, field, id=f"{name}.{field}")
    for name, settings in FULL_SETTINGS.items() for field in settings])
def test_the_crd_requires_exactly_what_the_controller_requires(name: str, field: str) -> None:
    """A manifest `gitscale validate` passes must not be an InvalidSpec in the cluster: a
    setting the platform's parsing needs is required by its schema, and no other one is."""
    kind = PLATFORMS[name]
    assert set(FULL_SETTINGS) == set(PLATFORMS)
    assert set(FULL_SETTINGS[name]) == set(kind.schema["properties"]) - {
        "organization", "apiTokenSecret"}
    kind.settings(FULL_SETTINGS[name], "set")  # all of them: valid
    without = {k: v for k, v in FULL_SETTINGS[name].items() if k != field}
    try:
        kind.settings(without, "set")
        needed = False
    except InvalidRunnerSet as exc:
        needed = True
        assert f"spec.{name}.{field}" in str(exc)
    assert (field in kind.schema.get("required", [])) == needed


def test_a_new_platform_is_one_entry() -> None:
    """Everything platform-specific reaches the controller through the entry."""
    calls: list[Any] = []
    toy = Kind(name="toy", schema={"type": "object"},
               settings=lambda raw, name: calls.append((raw, name)) or ("toy", raw),
               running=lambda *_: Phase.IDLE, adapter=lambda *_: None,  # type: ignore[arg-type,return-value]
               secrets=lambda _: frozenset(),
               busy_known=lambda *_: Condition("BusyKnown", True, "Toy", ""),
               pod_defaults={"priorityClassName": "ci"}, runner_defaults={"command": ["/start"]})
    view = parse_runnerset(runnerset("toy", {"x": 1}), {"toy": toy}.__getitem__)
    assert (view.platform, view.settings, calls) == ("toy", ("toy", {"x": 1}), [({"x": 1}, "set")])
    assert runner_pod(view, "set-1", 1, 0, [])["spec"]["priorityClassName"] == "ci"
    assert runner_pod(view, "set-1", 1, 0, [])["spec"]["containers"][0]["command"] == ["/start"]
    assert "terminationGracePeriodSeconds" not in runner_pod(view, "set-1", 1, 0, [])["spec"]
    buildkite = parse_runnerset(runnerset("buildkite", {"queue": "q"}), kind_of)
    assert runner_pod(buildkite, "set-1", 1, 0, [])["spec"]["terminationGracePeriodSeconds"] \
        == 3600


ID, NAME = 7, "set-abc123"


@pytest.mark.parametrize(
    ("kind", "annotations", "runner_id", "registered", "phase"),
    [
        pytest.param(GITHUB, {}, ID, None, Phase.BUSY, id="github-no-list-busy"),
        pytest.param(GITHUB, {}, ID, {ID: Registered(True, False, NAME)}, Phase.IDLE,
                     id="github-idle"),
        pytest.param(GITHUB, {}, ID, {ID: Registered(True, True, NAME)}, Phase.BUSY,
                     id="github-busy"),
        pytest.param(GITHUB, {}, ID, {ID: Registered(False, False, NAME)}, Phase.PENDING,
                     id="github-offline"),
        pytest.param(GITHUB, {}, ID, {}, Phase.PENDING, id="github-not-listed-yet"),
        pytest.param(GITHUB, {}, ID, {ID: Registered(False, True, NAME)}, Phase.BUSY,
                     id="github-offline-mid-job"),
        # A GitHub pod without its runner-id annotation is found by name (it used to fall
        # under Buildkite's rule, and without the list counted as idle).
        pytest.param(GITHUB, {}, None, {ID: Registered(True, True, NAME)}, Phase.BUSY,
                     id="github-no-id-by-name"),
        pytest.param(GITHUB, {}, None, None, Phase.BUSY, id="github-no-id-no-list"),
        pytest.param(BUILDKITE, {}, None, None, Phase.IDLE, id="buildkite-graceful"),
        pytest.param(BUILDKITE, {"gitscale.dev/busy": "true"}, None, None, Phase.BUSY,
                     id="buildkite-hooks-say-busy"),
        pytest.param(BUILDKITE, {}, None, {NAME: Registered(True, True, NAME)}, Phase.BUSY,
                     id="buildkite-agent-busy"),
        pytest.param(BUILDKITE, {}, None, {NAME: Registered(True, False, NAME)}, Phase.IDLE,
                     id="buildkite-agent-idle"),
        pytest.param(BUILDKITE, {}, None, {}, Phase.PENDING, id="buildkite-not-connected"),
    ],
)
def test_each_platform_owns_its_busy_rule(kind: Kind, annotations: dict[str, str],
                                          runner_id: int | None,
                                          registered: dict[Any, Registered] | None,
                                          phase: Phase) -> None:
    assert kind.running(NAME, annotations, runner_id, registered) == phase


def test_the_registry_imports_no_http_client() -> None:
    """gitscale.controller.crd (`gitscale crd`) builds the CRD from the registry: it must stay light."""
    code = ("import sys, gitscale.controller.crd, gitscale.controller.platforms; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('httpx', 'jwt', 'kubernetes', 'urllib3')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
