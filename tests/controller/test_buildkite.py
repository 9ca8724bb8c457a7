"""Buildkite busy from the agents REST API (against a fake built from its documentation), and
the graceful-stop rule, said in status, without it."""
from __future__ import annotations

import base64
import logging
from typing import Any, Iterator

import pytest

from gitscale.redact import known_secrets, redact
from tests.controller.buildkite_fake import FakeBuildkite
from tests.controller.harness import NS, Harness, buildkite_spec

TOKEN = "bkua_rest_token_for_tests"


@pytest.fixture
def buildkite() -> Iterator[FakeBuildkite]:
    server = FakeBuildkite(TOKEN).start()
    try:
        yield server
    finally:
        server.stop()


def with_api(url: str, secret: str = "bk-api") -> dict[str, Any]:
    spec = buildkite_spec()
    spec["buildkite"].update(organization="acme", apiTokenSecret=secret, apiURL=url)
    return spec


def busy_known(harness: Harness, name: str) -> dict[str, Any]:
    return next(c for c in harness.status(name)["conditions"] if c["type"] == "BusyKnown")


def api_token(harness: Harness, token: str) -> None:
    """The Secret of the agents API's token (``bk-api``, key ``token``), as a person makes it."""
    harness.api.create_object("secrets", {"metadata": {"name": "bk-api"}, "data": {
        "token": base64.b64encode(token.encode()).decode()}}, NS)


def one_running_runner(harness: Harness, buildkite: FakeBuildkite) -> None:
    """A set of one runner with the agents API, its pod running, then a pass."""
    harness.write("bk", 1, 0, spec=with_api(buildkite.url))
    harness.sync("bk")
    harness.api.set_pod_phase(NS, harness.names("bk")[0], "Running")
    harness.sync("bk")


def test_a_busy_agent_is_kept_on_scale_down_though_its_pod_says_nothing(
        harness: Harness, buildkite: FakeBuildkite, caplog: pytest.LogCaptureFixture) -> None:
    api_token(harness, TOKEN)
    for n in range(130):  # other agents of the org: the list takes two pages
        buildkite.connect(f"elsewhere-{n:03}", busy=n % 2 == 0)
    harness.write("bk", 3, 0, spec=with_api(buildkite.url))
    harness.sync("bk")
    busy, idle, starting = harness.names("bk")
    for name in (busy, idle, starting):
        harness.api.set_pod_phase(NS, name, "Running")
    buildkite.connect(busy, busy=True)  # runs a job; its pod carries no annotation
    buildkite.connect(idle)
    caplog.set_level(logging.INFO, "gitscale")
    harness.sync("bk")
    status = harness.status("bk")
    assert (status["busy"], status["idle"], status["pending"]) == (1, 1, 1)
    assert busy_known(harness, "bk")["status"] == "True"
    assert any("page=2" in call for call in buildkite.calls)
    harness.write("bk", 0, 0)
    report = harness.sync("bk")
    assert report.deleted == [idle, starting]  # idle first, then the one not connected yet
    assert harness.names("bk") == [busy]
    assert TOKEN not in str(harness.status("bk")) + caplog.text


def test_the_api_token_read_is_held_for_masking_and_the_agent_token_never_read(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    """Whatever echoes the REST API token later (a proxy, a library, a crash report) has it
    masked: it is held as it is read. The agent token is the pod's, never the controller's."""
    harness.api.create_object("secrets", {"metadata": {"name": "bk-api"}, "data": {
        "token": base64.b64encode(f"{TOKEN}\n".encode()).decode()}}, NS)
    harness.api.create_object("secrets", {"metadata": {"name": "bk-token"}, "data": {
        "token": base64.b64encode(b"bk-agent-token-of-the-pods").decode()}}, NS)
    one_running_runner(harness, buildkite)
    assert busy_known(harness, "bk")["status"] == "True"
    assert TOKEN in known_secrets() and "bk-agent-token-of-the-pods" not in known_secrets()
    assert redact(f"echoed: {TOKEN}") == "echoed: ***"


def test_without_the_agents_api_status_says_scale_down_relies_on_graceful_stop(
        harness: Harness) -> None:
    harness.write("bk", 1, 0, spec=buildkite_spec())
    harness.sync("bk")
    cond = busy_known(harness, "bk")
    assert (cond["status"], cond["reason"]) == ("False", "NoAgentsAPIToken")
    assert "finishes its job first" in cond["message"]


def test_a_refused_token_is_said_and_the_set_still_served(harness: Harness,
                                                          buildkite: FakeBuildkite) -> None:
    api_token(harness, "wrong")
    harness.write("bk", 2, 0, spec=with_api(buildkite.url))
    assert len(harness.sync("bk").created) == 2
    pod = harness.names("bk")[0]
    harness.api.set_pod_phase(NS, pod, "Running")
    harness.sync("bk")
    cond = busy_known(harness, "bk")
    assert (cond["status"], cond["reason"]) == ("False", "AgentsAPIUnavailable")
    assert "401" in cond["message"] and "wrong" not in str(harness.status("bk"))
    assert f"(the credential of Secret {NS}/bk-api, key token)" in cond["message"], cond
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"  # served all the same, under the graceful-stop rule


def test_a_token_with_a_line_break_inside_is_said_and_never_sent(harness: Harness,
                                                               buildkite: FakeBuildkite) -> None:
    """A Secret written with a line break inside its token: refused before any request (it
    was quoted, escaped, in httpx's error), as a credentials problem, read again each pass."""
    broken = TOKEN[:8] + "\n" + TOKEN[8:]
    api_token(harness, broken)
    one_running_runner(harness, buildkite)
    cond = busy_known(harness, "bk")
    assert (cond["status"], cond["reason"]) == ("False", "AgentsAPIUnavailable")
    assert "not sent: the credential of its Authorization header contains a newline" \
        in cond["message"]
    assert buildkite.calls == []
    for shown in (TOKEN[:8], TOKEN[8:], repr(broken)[1:-1]):
        assert shown not in str(harness.status("bk"))


def test_a_missing_token_secret_does_not_stop_the_set(harness: Harness,
                                                      buildkite: FakeBuildkite) -> None:
    harness.write("bk", 1, 0, spec=with_api(buildkite.url, secret="nope"))
    assert len(harness.sync("bk").created) == 1
    cond = busy_known(harness, "bk")
    assert (cond["status"], cond["reason"]) == ("False", "AgentsAPIUnavailable")
    assert "Secret default/nope does not exist" in cond["message"]


@pytest.mark.parametrize(("change", "words"), [
    pytest.param({"organization": "acme"}, "go together", id="org-without-token"),
    pytest.param({"organization": "acme", "apiTokenSecret": "s",
                  "apiURL": "https://u:p@api.buildkite.com"}, "without credentials",
                 id="credentials-in-url"),
])
def test_bad_agents_api_settings_are_invalid(harness: Harness, change: dict[str, Any],
                                             words: str) -> None:
    spec = buildkite_spec()
    spec["buildkite"].update(change)
    harness.write("bk", 1, 0, spec=spec)
    harness.sync("bk")
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InvalidSpec" and words in ready["message"]
    assert "u:p@" not in ready["message"]


@pytest.mark.parametrize(("tags", "container", "words"), [
    pytest.param(["queue=other"], {}, "spec.buildkite.tags: 'queue=other': the queue goes in "
                 "spec.buildkite.queue", id="queue-tag"),
    pytest.param(["os=linux,queue=other"], {}, "holds a comma", id="comma-in-tag"),
    pytest.param([], {"args": ["start", "--tags", "os=linux"]}, "args passes --tags to the "
                 "agent; the controller sets BUILDKITE_AGENT_TAGS", id="args-tags"),
    pytest.param([], {"args": ["start", "--queue=other"]}, "args passes --queue", id="args-queue"),
    pytest.param([], {"command": ["buildkite-agent", "start", "--name", "x"]},
                 "command passes --name", id="command-name"),
    pytest.param([], {"args": ["start", "--disconnect-after-job=false"]},
                 "--disconnect-after-job", id="args-disconnect"),
    pytest.param([], {"args": ["start", "--token", "bkua_in_the_pod_spec"]}, "--token",
                 id="args-token"),
    pytest.param([], {"args": ["start", "--spawn=3"]}, "args passes --spawn", id="args-spawn"),
    pytest.param([], {"env": [{"name": "BUILDKITE_AGENT_QUEUE", "value": "linux"}]},
                 "env sets BUILDKITE_AGENT_QUEUE: the queue goes in spec.buildkite.queue",
                 id="env-queue"),
    pytest.param([], {"env": [{"name": "BUILDKITE_AGENT_SPAWN", "value": "4"}]},
                 "env sets BUILDKITE_AGENT_SPAWN: one agent per pod", id="env-spawn"),
])
def test_a_template_that_would_override_the_agents_settings_is_invalid(
        harness: Harness, tags: list[str], container: dict[str, Any], words: str) -> None:
    """A flag in the agent's command line wins over the variable the controller sets (the
    agent would take another queue's jobs, or run several), and BUILDKITE_AGENT_QUEUE beside
    the queue tag stops the agent at start: refused as InvalidSpec, no pod made."""
    spec = buildkite_spec()
    spec["buildkite"]["tags"] = tags
    spec["template"]["spec"]["containers"][0].update(container)
    harness.write("bk", 1, 0, spec=spec)
    assert harness.sync("bk").created == []
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InvalidSpec" and words in ready["message"], ready
    assert "bkua_in_the_pod_spec" not in ready["message"]


def test_a_queue_with_a_comma_is_invalid(harness: Harness) -> None:
    """BUILDKITE_AGENT_TAGS is split at commas by the agent: ``queue=linux,gpu`` would start
    agents of the queue ``linux`` with a tag ``gpu``, taking another queue's jobs than the one
    the set is scaled for. Refused as InvalidSpec, no pod made."""
    spec = buildkite_spec()
    spec["buildkite"]["queue"] = "linux,gpu"
    harness.write("bk", 1, 0, spec=spec)
    assert harness.sync("bk").created == []
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InvalidSpec", ready
    assert "spec.buildkite.queue: 'linux,gpu' holds a comma" in ready["message"], ready


def test_a_template_that_leaves_the_agent_alone_is_served(harness: Harness) -> None:
    """Flags the controller does not set (`--debug`), tags without a queue, spawn said as 1
    (as a variable or a flag), one job per agent said again."""
    spec = buildkite_spec()
    spec["buildkite"]["tags"] = ["os=linux", "docker"]
    spec["template"]["spec"]["containers"][0].update(
        args=["start", "--debug", "--tags-from-host", "--disconnect-after-job", "--spawn", "1"],
        env=[{"name": "BUILDKITE_AGENT_SPAWN", "value": "1"}])
    harness.write("bk", 1, 0, spec=spec)
    assert len(harness.sync("bk").created) == 1


def test_a_rate_limited_agents_api_is_said_and_the_set_still_served(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    api_token(harness, TOKEN)
    harness.write("bk", 1, 0, spec=with_api(buildkite.url))
    harness.sync("bk")
    harness.api.set_pod_phase(NS, harness.names("bk")[0], "Running")
    buildkite.limited_for = 40  # Buildkite: 429, RateLimit-Remaining 0, RateLimit-Reset 40 s
    harness.sync("bk")
    cond = busy_known(harness, "bk")
    assert (cond["status"], cond["reason"]) == ("False", "AgentsAPIUnavailable")
    assert "rate limited until" in cond["message"] and "answered 429" in cond["message"]
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_a_refused_token_fixed_in_its_secret_is_used_on_the_next_pass(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    """The agents API refused the token (401): the Secret is read again, not the refused
    client kept until it ages out, so a corrected Secret counts busy agents on the next pass."""
    api_token(harness, "wrong")
    harness.write("bk", 1, 0, spec=with_api(buildkite.url))
    harness.sync("bk")
    (pod,) = harness.names("bk")
    harness.api.set_pod_phase(NS, pod, "Running")
    buildkite.connect(pod, busy=True)
    harness.sync("bk")
    assert busy_known(harness, "bk")["reason"] == "AgentsAPIUnavailable"

    def fix(secret: dict[str, Any]) -> None:
        secret["data"]["token"] = base64.b64encode(TOKEN.encode()).decode()

    harness.api.mutate_object("secrets", "bk-api", fix, NS)
    harness.sync("bk")
    assert busy_known(harness, "bk")["status"] == "True"
    assert harness.status("bk")["busy"] == 1


def test_an_agents_list_past_its_page_bound_is_said_as_the_docs_say(
        harness: Harness, buildkite: FakeBuildkite, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agents list stops at AGENT_PAGES_MAX pages (docs/credentials.md said "all pages"):
    an organization with more connected agents runs as without the API, BusyKnown=False, and
    the set is still served."""
    from pathlib import Path

    from gitscale.clients import buildkite as client

    row = next(line for line in (Path(__file__).resolve().parents[2] / "docs/credentials.md")
               .read_text().splitlines() if "/v2/organizations/{organization}/agents" in line)
    assert f"up to {client.AGENT_PAGES_MAX}: {client.AGENT_PAGES_MAX * 100:,} connected" in row
    assert "BusyKnown=False" in row
    monkeypatch.setattr(client, "AGENT_PAGES_MAX", 2)
    api_token(harness, TOKEN)
    for n in range(201):  # three pages of 100
        buildkite.connect(f"elsewhere-{n:03}")
    one_running_runner(harness, buildkite)
    cond = busy_known(harness, "bk")
    assert (cond["status"], cond["reason"]) == ("False", "AgentsAPIUnavailable")
    assert "more than 2 pages" in cond["message"]
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_agents_that_keep_exiting_at_start_point_at_the_agent_token(harness: Harness) -> None:
    """An agent token Buildkite refuses (revoked, rotated, another organization's) makes each
    agent exit at once (its 401 at registration is not retried): RunnersFailing and its Event
    say where to look — the Secret the pods read it from and the pod's log — not only that
    runners fail."""
    harness.write("bk", 1, 1, spec=buildkite_spec())
    harness.sync("bk")
    for _ in range(4):
        (pod,) = harness.names("bk")
        harness.stop(pod, exit_code=1)
        harness.clock.advance(120)
        harness.sync("bk")
    failing = next(c for c in harness.status("bk")["conditions"]
                   if c["type"] == "RunnersFailing")
    assert failing["status"] == "True", failing
    assert ("agent token (Secret default/bk-token, key token) wrong, revoked or rotated"
            in failing["message"]), failing
    assert "kubectl -n default logs POD" in failing["message"]
    assert "spec.buildkite.organization" not in failing["message"]  # (none: no agents listed)
    events = [e["message"] for e in harness.events("bk") if e.get("reason") == "RepeatedFailures"]
    assert events and "Secret default/bk-token" in events[-1], events


def test_an_agent_stopping_with_a_job_is_busy_and_kept_on_scale_down(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    """An agent stopped from Buildkite's UI or API is listed `connection_state: stopping`
    while it finishes its job: it runs a job, so a scale-down keeps it (it was counted pending
    and deleted as a pending runner, before the idle ones were even considered busy-safe)."""
    api_token(harness, TOKEN)
    harness.write("bk", 2, 0, spec=with_api(buildkite.url))
    harness.sync("bk")
    stopping, idle = harness.names("bk")
    for name in (stopping, idle):
        harness.api.set_pod_phase(NS, name, "Running")
    buildkite.connect(stopping, busy=True, state="stopping")
    buildkite.connect(idle)
    harness.sync("bk")
    status = harness.status("bk")
    assert (status["busy"], status["idle"], status["pending"]) == (1, 1, 0)
    harness.write("bk", 0, 0)
    report = harness.sync("bk")
    assert report.deleted == [idle]
    assert harness.names("bk") == [stopping]


def test_agents_whose_token_secret_is_missing_make_ready_false_at_once(harness: Harness) -> None:
    """No agent-token Secret (made in another namespace, or under another key): the kubelet
    cannot create the agent's container, and says why. Ready was True ("2 pending") for the
    5 minutes before such pods count as failed; it is False at once now, with the kubelet's
    word, which names the Secret."""
    harness.write("bk", 2, 1, spec=buildkite_spec())
    harness.sync("bk")
    names = harness.names("bk")
    said = 'secret "bk-token" not found'
    for name in names:
        harness.api.set_pod_phase(NS, name, "Pending", [{"name": "agent", "ready": False,
                                  "state": {"waiting": {"reason": "CreateContainerConfigError",
                                                        "message": said}}}])
    report = harness.sync("bk")
    assert (report.created, report.deleted) == ([], [])  # not replaced before their 5 minutes
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "RunnersCannotStart"), ready
    assert ready["message"].startswith(
        "2 of 2 runner(s) cannot start: container agent: CreateContainerConfigError: "
        + said), ready
    from gitscale.controller.observe import STUCK_AFTER

    assert f"stays so for {STUCK_AFTER.seconds // 60} minutes counts as failed" in ready["message"]
    events = [e["message"] for e in harness.events("bk") if e.get("reason") == "RunnersCannotStart"]
    assert events and said in events[-1], events
    # 5 minutes on they count as failed and are replaced: their successors, just made, have no
    # container status yet — Ready stays False (it said True, "Reconciled", between the two)
    harness.clock.advance(STUCK_AFTER.total_seconds() + 1)
    report = harness.sync("bk")
    assert sorted(report.deleted) == sorted(names) and len(report.created) == 2, report
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "RunnersCannotStart"), ready
    assert not [e for e in harness.events("bk") if e.get("reason") == "Reconciled"]


def test_the_failing_hint_names_a_missing_agent_token_secret_too() -> None:
    """The commonest day-zero failure is no Secret at all (created in another namespace, or
    under another key): the pod never starts (CreateContainerConfigError, failed after 5
    minutes), so it has no log to read and Buildkite refused nothing. The hint says that case
    and where the kubelet says which it is, not only "refused by Buildkite"."""
    from gitscale.controller.platform_buildkite import BuildkiteSettings, failing_hint

    hint = failing_hint(BuildkiteSettings("linux", (), "bk-token", None, None), "ci")
    assert ("a pod that never started (CreateContainerConfigError) has no log: the Secret "
            "ci/bk-token, or its key token, is missing") in hint, hint
    assert "kubectl -n ci describe pod POD" in hint, hint
    # without agentTokenSecret the template gives the token: no Secret of ours to name
    assert "CreateContainerConfigError" not in failing_hint(
        BuildkiteSettings("linux", (), None, None, None), "ci")


def test_the_failing_hint_names_the_organization_agents_are_listed_in() -> None:
    """Agents whose token joins them to another organization than spec.buildkite.organization
    run, are never listed by the agents API, and are replaced after the registration timeout,
    again and again: the hint names the organization looked in, when there is one."""
    from gitscale.controller.platform_buildkite import BuildkiteSettings, failing_hint

    listed = failing_hint(BuildkiteSettings("linux", (), "bk-token", "acme", "bk-api"), "ci")
    assert ("agents that run but are replaced after 10 minutes were never listed in "
            "organization 'acme' (spec.buildkite.organization)") in listed
    assert "organization 'acme'" not in failing_hint(
        BuildkiteSettings("linux", (), "bk-token", None, None), "ci")
