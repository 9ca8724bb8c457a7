"""The issue's scenarios through the real ``kubernetes`` client against the local API server.

(r, p) is a spec write of replicas r and patch ID p, at the harness clock's "now".
"""
from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from gitscale.commands.init import argocd_application
from gitscale.commands.init_choices import choose
from gitscale.controller.observe import FINALIZER
from gitscale.controller.platforms import Platforms
from gitscale.timeutil import format_time
from tests.controller.harness import NS, TOKEN, Harness, buildkite_spec


def test_from_nothing_5_0_creates_5_in_one_pass(harness: Harness) -> None:
    harness.write("rs", 5, 0)
    report = harness.sync("rs")
    assert len(report.created) == 5 and report.errors == []
    pods = harness.pods("rs")
    assert len(pods) == 5
    for pod in pods:
        meta = pod["metadata"]
        assert meta["labels"] == {"gitscale.dev/runnerset": "rs", "gitscale.dev/patch-id": "0"}
        assert meta["ownerReferences"][0]["kind"] == "RunnerSet"
        runner = harness.runner(meta["name"])  # registered with GitHub under the pod's name
        assert runner is not None and runner.labels == ["linux"]
        assert meta["annotations"]["gitscale.dev/runner-id"] == str(runner.id)
        secret = harness.api.get_object("secrets", meta["name"], NS)
        assert secret is not None
        assert secret["metadata"]["ownerReferences"][0]["uid"] == meta["uid"]
        assert base64.b64decode(secret["data"]["jitconfig"]).decode().startswith("jit-")
        env = pod["spec"]["containers"][0]["env"]
        assert env[-1]["valueFrom"]["secretKeyRef"] == {"name": meta["name"], "key": "jitconfig"}
    assert harness.sync("rs").created == []  # settled: nothing more


def test_1_0_then_2_1(harness: Harness) -> None:
    harness.write("rs", 1, 0)
    harness.sync("rs")
    harness.write("rs", 2, 1)
    harness.sync("rs")
    patches = sorted(p["metadata"]["labels"]["gitscale.dev/patch-id"] for p in harness.pods("rs"))
    assert patches == ["0", "1"]


def test_finished_not_replaced_under_same_patch_then_removed_on_1_2(harness: Harness) -> None:
    harness.write("rs", 2, 1)
    harness.sync("rs")
    done, running = harness.names("rs")
    harness.clock.advance(60)
    harness.running(running, busy=True)
    harness.running(done)
    harness.stop(done)
    report = harness.sync("rs")
    assert not report.created and not report.deleted
    assert harness.names("rs") == sorted([done, running])  # still 2 objects
    harness.clock.advance(10)
    harness.write("rs", 1, 2)
    report = harness.sync("rs")
    assert report.deleted == [done] and not report.created
    assert harness.names("rs") == [running]


def test_finished_and_pending_without_a_new_write_nothing_happens(harness: Harness) -> None:
    harness.write("rs", 2, 1)
    harness.sync("rs")
    done, _ = harness.names("rs")
    harness.clock.advance(30)
    harness.stop(done)
    calls = harness.api.call_count("create") + harness.api.call_count("delete")
    report = harness.sync("rs")
    assert (report.created, report.deleted) == ([], [])
    assert harness.api.call_count("create") + harness.api.call_count("delete") == calls


def test_3_2_after_one_finished_one_running_gives_3_live(harness: Harness) -> None:
    harness.write("rs", 2, 1)
    harness.sync("rs")
    done, running = harness.names("rs")
    harness.clock.advance(30)
    harness.running(running, busy=True)
    harness.stop(done)
    harness.sync("rs")
    harness.clock.advance(30)
    harness.write("rs", 3, 2)
    report = harness.sync("rs")
    assert report.deleted == [done] and len(report.created) == 2
    pods = harness.pods("rs")
    assert len(pods) == 3 and done not in harness.names("rs")
    assert all(p["status"].get("phase") in ("Pending", "Running") for p in pods)


def test_0_2_keeps_the_pending_runner_until_it_finishes(harness: Harness) -> None:
    harness.write("rs", 2, 1)
    harness.sync("rs")
    done, pending = harness.names("rs")
    harness.clock.advance(30)
    harness.stop(done)
    harness.sync("rs")
    harness.clock.advance(30)
    harness.write("rs", 0, 2)
    assert harness.sync("rs").deleted == [done]
    assert harness.names("rs") == [pending]  # patch > 0 never scales down
    harness.clock.advance(30)
    harness.running(pending, busy=True)
    harness.stop(pending)
    harness.sync("rs")
    assert harness.names("rs") == []
    status = harness.status("rs")
    assert (status["replicas"], status["observedPatchID"]) == (0, 2)


def test_0_0_deletes_idle_first_then_pending(harness: Harness) -> None:
    harness.write("rs", 2, 1)
    harness.sync("rs")
    idle, pending = harness.names("rs")
    harness.running(idle)  # online, not busy
    harness.sync("rs")
    harness.api.reset_calls()
    harness.write("rs", 0, 0)
    report = harness.sync("rs")
    assert report.deleted == [idle, pending]
    assert harness.pod_deletes() == [idle, pending]  # the order the API server saw
    unregistered = [p for m, p in harness.github.calls if m == "DELETE"]
    assert len(unregistered) == 2 and harness.github.runners == {}
    assert harness.names("rs") == []


def test_1_0_deletes_the_two_idle_and_keeps_the_busy(harness: Harness) -> None:
    harness.write("rs", 3, 0)
    harness.sync("rs")
    a, b, c = harness.names("rs")
    harness.running(a)
    harness.running(b, busy=True)
    harness.running(c)
    harness.write("rs", 1, 0)
    report = harness.sync("rs")
    assert sorted(report.deleted) == sorted([a, c])
    assert harness.names("rs") == [b]
    status = harness.status("rs")
    assert (status["busy"], status["idle"], status["replicas"]) == (1, 0, 1)


def test_1_0_deletes_the_idle_and_keeps_the_pending(harness: Harness) -> None:
    harness.write("rs", 2, 0)
    harness.sync("rs")
    idle, pending = harness.names("rs")
    harness.running(idle)
    harness.write("rs", 1, 0)
    assert harness.sync("rs").deleted == [idle]
    assert harness.names("rs") == [pending]


def test_unregister_422_keeps_the_pod_says_so_once_and_waits_30s(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.write("rs", 1, 0)
    harness.sync("rs")
    (pod,) = harness.names("rs")
    harness.running(pod)  # GitHub's list says idle ...
    harness.github.refuse_delete(pod)  # ... but it took a job just before the DELETE
    harness.write("rs", 0, 0)
    caplog.set_level(logging.INFO, "gitscale.controller")
    report = harness.sync("rs")
    assert report.busy == [pod] and report.deleted == []
    assert report.requeue_after == pytest.approx(30)
    for _ in range(3):  # passes within 30 s do not ask GitHub again
        harness.clock.advance(9)
        harness.sync("rs")
    assert harness.github.count("DELETE") == 1
    assert harness.names("rs") == [pod]
    harness.clock.advance(4)  # 31 s after the 422
    assert harness.sync("rs").busy == [pod]
    assert harness.github.count("DELETE") == 2
    said = [r for r in caplog.records if "still running a job" in r.getMessage()]
    assert len(said) == 1 and pod in said[0].getMessage()
    status = harness.status("rs")
    assert (status["busy"], status["replicas"]) == (1, 1)


@pytest.mark.parametrize("death", [
    pytest.param({"containers": [{"name": "runner", "ready": False, "state": {"terminated": {
        "exitCode": 137, "reason": "OOMKilled"}}}]}, id="oom-killed"),
    pytest.param({"containers": [], "reason": "Evicted",
                  "message": "The node was low on resource: memory."}, id="evicted"),
])
def test_a_runner_killed_mid_job_goes_though_github_still_counts_it_busy(
        harness: Harness, death: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    """GitHub answers 422 for a runner it still counts busy; a dead pod is not kept for it
    (that would hold its slot and retry every 30 s, "still running a job"). Its registration
    stays until GitHub releases it, then the leftover sweep removes it."""
    harness.write("rs", 1, 1)
    harness.sync("rs")
    (pod,) = harness.names("rs")
    harness.running(pod, busy=True)
    harness.sync("rs")
    harness.clock.advance(60)
    extra = {k: v for k, v in death.items() if k != "containers"}
    harness.api.set_pod_phase(NS, pod, "Failed", death["containers"], **extra)
    caplog.set_level(logging.INFO, "gitscale.controller")
    report = harness.sync("rs")
    assert report.deleted == [pod] and report.busy == [] and report.errors == []
    (successor,) = report.created
    assert harness.names("rs") == [successor]
    assert harness.runner(pod) is not None  # GitHub's to release: left for now
    assert "still counts it busy" in caplog.text and "still running a job" not in caplog.text
    harness.github.set_state(pod, online=False, busy=False)  # GitHub noticed: offline, idle
    harness.clock.advance(301)  # the next look for leftovers: suspected ...
    assert harness.sync("rs").leftovers == []
    harness.clock.advance(61)  # ... and removed after the grace
    assert harness.sync("rs").leftovers == [pod] and harness.runner(pod) is None


def test_status_counts_pending_running_failed(harness: Harness) -> None:
    harness.write("rs", 3, 1)
    harness.sync("rs")
    pending, running, failed = harness.names("rs")
    harness.running(running, busy=True)
    harness.clock.advance(5)
    harness.stop(failed, exit_code=1)
    report = harness.sync("rs")
    status = harness.status("rs")
    assert (status["pending"], status["idle"] + status["busy"], status["failed"]) == (1, 1, 1)
    assert status["replicas"] == 3 and status["observedPatchID"] == 1
    assert len(report.created) == 1 and report.deleted == [failed]  # replaced at once (0 s)


def test_failed_runners_back_off_5_10_s(harness: Harness) -> None:
    harness.write("rs", 1, 1)
    harness.sync("rs")
    (first,) = harness.names("rs")
    harness.stop(first, exit_code=1)
    (second,) = harness.sync("rs").created
    pod = harness.pod(second)
    assert pod["metadata"]["annotations"]["gitscale.dev/failures"] == "1"
    harness.stop(second, exit_code=1)
    report = harness.sync("rs")
    assert report.created == [] and report.requeue_after == pytest.approx(5)
    harness.clock.advance(5)
    (third,) = harness.sync("rs").created
    assert harness.pod(third)["metadata"]["annotations"][
        "gitscale.dev/failures"] == "2"
    assert harness.names("rs") == [third]


def test_slot_freed_after_effective_time_waits_for_reaffirmation(harness: Harness) -> None:
    harness.write("rs", 2, 0)
    harness.sync("rs")
    a, b = harness.names("rs")
    harness.running(a, busy=True)
    harness.running(b, busy=True)
    harness.clock.advance(60)
    harness.stop(a)  # finished after effectiveTime
    report = harness.sync("rs")
    assert report.created == [] and report.actions is not None and report.actions.held == (a,)
    harness.clock.advance(30)
    harness.write("rs", 2, 0)  # re-affirmed
    report = harness.sync("rs")
    assert report.deleted == [a] and len(report.created) == 1


def test_buildkite_agents_do_once_and_keep_busy_ones(harness: Harness) -> None:
    from tests.controller.harness import buildkite_spec

    harness.write("bk", 2, 0, spec=buildkite_spec())
    report = harness.sync("bk")
    assert len(report.created) == 2
    busy, idle = harness.names("bk")
    pod = harness.pod(busy)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["BUILDKITE_AGENT_DISCONNECT_AFTER_JOB"]["value"] == "true"
    assert env["BUILDKITE_AGENT_TAGS"]["value"] == "queue=linux,arch=x64"
    assert env["BUILDKITE_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "bk-token", "key": "token"}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 3600
    assert harness.api.objects("secrets", NS, label_selector="gitscale.dev/runnerset") == []
    for name in (busy, idle):
        harness.api.set_pod_phase(NS, name, "Running")
    harness.api.mutate_object("pods", busy, lambda p: p["metadata"].setdefault(
        "annotations", {}).update({"gitscale.dev/busy": "true"}), NS)
    harness.write("bk", 0, 0)
    assert harness.sync("bk").deleted == [idle]
    assert harness.names("bk") == [busy]


def test_a_set_deleted_and_recreated_ignores_the_old_pods(harness: Harness) -> None:
    harness.write("rs", 1, 0)
    harness.sync("rs")
    (old,) = harness.names("rs")
    harness.api.mutate_object("pods", old, lambda p: p["metadata"]["ownerReferences"][0].update(
        uid="someone-else"), NS)
    report = harness.sync("rs")
    assert len(report.created) == 1 and report.deleted == []


def test_patch_sequence_restarted_by_0_does_not_shut_the_gate(harness: Harness) -> None:
    """7 → 0 → 6 → 7 while a patch-7 runner stays busy: the second 7 is a new spec and acts."""
    harness.write("rs", 2, 7)
    harness.sync("rs")
    long_job, done = harness.names("rs")
    harness.running(long_job, busy=True)
    harness.clock.advance(30)
    harness.stop(done)
    harness.clock.advance(30)
    harness.write("rs", 1, 0)  # quiet at min: self-correct
    assert harness.sync("rs").deleted == [done]
    harness.clock.advance(30)
    harness.write("rs", 2, 6)  # the sequence restarted at 1 and is at 6
    assert len(harness.sync("rs").created) == 1
    harness.clock.advance(30)
    harness.write("rs", 4, 7)
    report = harness.sync("rs")
    assert report.actions is not None and report.actions.acting
    assert len(report.created) == 2
    assert len(harness.pods("rs")) == 4


def test_patch_wrap_keeps_the_gate_shut_once_applied(harness: Harness) -> None:
    """2³¹−1 → 1: once 1 is applied, a later pass under 1 does not act again."""
    harness.write("rs", 1, 2**31 - 1)
    harness.sync("rs")
    (old,) = harness.names("rs")
    harness.running(old, busy=True)
    harness.clock.advance(30)
    harness.write("rs", 2, 1)
    assert len(harness.sync("rs").created) == 1
    harness.clock.advance(30)
    report = harness.sync("rs")
    assert report.actions is not None and not report.actions.acting


def test_same_patch_number_after_a_restart_is_a_new_spec(harness: Harness) -> None:
    """1 → 0 → 1 while the patch-1 runner is busy and still the newest: the second 1 is another
    write (another effectiveTime), so it acts."""
    harness.write("rs", 1, 1)
    harness.sync("rs")
    (busy,) = harness.names("rs")
    harness.running(busy, busy=True)
    harness.clock.advance(30)
    harness.write("rs", 1, 0)  # quiet at min: nothing to do
    assert not harness.sync("rs").created
    harness.clock.advance(30)
    harness.write("rs", 3, 1)  # the next burst restarts the sequence at 1
    report = harness.sync("rs")
    assert report.actions is not None and report.actions.acting
    assert len(report.created) == 2
    harness.clock.advance(30)
    again = harness.sync("rs")  # and once applied, the gate is shut again
    assert again.actions is not None and not again.actions.acting


def test_credentials_in_config_url_are_refused_and_never_shown(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    from tests.controller.harness import github_spec

    spec = github_spec(harness.github.url.replace("://", "://x-access-token:ghp-in-the-url@"))
    harness.write("rs", 1, 0, spec=spec)
    caplog.set_level(logging.INFO, "gitscale")
    report = harness.sync("rs")
    assert report.created == [] and harness.github.calls == []
    (ready,) = [c for c in harness.status("rs")["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "configURL" in ready["message"]
    assert "ghp-in-the-url" not in str(harness.status("rs")) + caplog.text


@pytest.mark.parametrize(("code", "reason", "message", "ready"), [
    pytest.param(403, "Forbidden", 'pods "rs-x" is forbidden: exceeded quota: pods, '
                 "requested: pods=1, used: pods=20, limited: pods=20", "QuotaExceeded",
                 id="quota"),
    pytest.param(400, "BadRequest", 'admission webhook "policy.example.com" denied the '
                 "request: images must come from registry.example.com", "CreateFailed",
                 id="webhook"),
])
def test_refused_pod_creations_do_not_burn_the_github_rate_limit(
        harness: Harness, code: int, reason: str, message: str, ready: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Each runner tried costs GitHub a registration and its removal, and GitHub allows 80
    content-creating requests a minute: 100 sets stuck on their quota, retried every 10 s,
    spent 600. One pod is first created as a dry run, so a refused pass registers nothing,
    and a set's refused creations wait 10 s, doubling to 5 minutes; once the quota is raised
    every missing runner comes in one pass again, and the backoff starts over."""
    harness.api.inject_error("create", "pods", code=code, reason=reason, message=message,
                             times=1000)
    harness.write("rs", 20, 0)
    caplog.set_level(logging.INFO, "gitscale.controller")

    def registrations() -> int:
        return harness.github.count("POST") + harness.github.count("DELETE")

    first = harness.sync("rs")
    assert first.created == [] and registrations() == 0  # nothing registered
    assert harness.api.call_count("create", "pods") == 1 and first.requeue_after == 10
    condition = next(c for c in harness.status("rs")["conditions"] if c["type"] == "Ready")
    assert (condition["status"], condition["reason"]) == ("False", ready)
    assert message in condition["message"] and "dry run" in condition["message"]
    for wait, following in [(10, 20), (20, 40), (40, 80), (80, 160), (160, 300), (300, 300)]:
        harness.clock.advance(wait - 1)  # a pass within the backoff (a resync, a pod event)
        tries = harness.api.call_count("create", "pods")
        early = harness.sync("rs")
        assert harness.api.call_count("create", "pods") == tries  # tries nothing
        assert early.requeue_after == pytest.approx(1)
        harness.clock.advance(1)
        assert harness.sync("rs").requeue_after == following
        assert harness.api.call_count("create", "pods") == tries + 1  # one dry run
    assert registrations() == 0
    said = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 7  # once per try, not once per pass
    status = harness.status("rs")
    assert (status["pending"], status["replicas"]) == (0, 0)
    harness.api.clear_errors()  # the quota was raised: every missing runner in one pass again
    harness.clock.advance(300)
    assert len(harness.sync("rs").created) == 20
    assert len(harness.pods("rs")) == 20 and len(harness.github.runners) == 20
    harness.api.inject_error("create", "pods", code=code, reason=reason, message=message)
    harness.clock.advance(10)
    harness.write("rs", 21, 0)
    assert harness.sync("rs").requeue_after == 10  # started over


def test_deleting_a_set_keeps_its_busy_runner_until_done_then_lets_it_go(
        harness: Harness) -> None:
    """Argo CD prunes a set: the finalizer holds it while a runner is busy; the idle one goes
    (unregistered first), the busy one finishes its job, then the finalizer goes, then the set."""
    harness.write("rs", 2, 0)
    harness.sync("rs")
    idle, busy = harness.names("rs")
    harness.running(idle)
    harness.running(busy, busy=True)
    harness.sync("rs")
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and obj["metadata"]["finalizers"] == ["gitscale.dev/runners"]
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", "rs")
    report = harness.sync("rs")
    assert report.deleted == [idle] and report.created == []
    assert harness.names("rs") == [busy] and harness.runner(idle) is None
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and obj["metadata"]["deletionTimestamp"]
    assert obj["metadata"]["finalizers"] == ["gitscale.dev/runners"]
    harness.clock.advance(60)
    harness.stop(busy)  # the job is done
    report = harness.sync("rs")
    assert report.deleted == [busy] and report.created == []
    assert harness.names("rs") == []
    assert harness.api.get_object("runnersets", "rs", NS) is None
    harness.catch_up()
    assert harness.sync("rs").actions is None  # gone: nothing more to do


def prune_policy_of_init_application() -> str:
    """The propagation policy Argo CD prunes with, for the Application `gitscale init` writes
    (Argo CD's default, without the sync option, is foreground)."""
    app = argocd_application(choose(gitops="argocd", repo_url=None, branch="main",
                                    path="clusters/prod", platform="github"))
    options = [o for o in app["spec"]["syncPolicy"]["syncOptions"]
               if o.startswith("PrunePropagationPolicy=")]
    return options[0].split("=", 1)[1].capitalize() if options else "Foreground"


@pytest.mark.parametrize("policy", ["init's Application", "Foreground"])
def test_pruning_a_set_keeps_its_busy_runner_only_in_the_background(
        harness: Harness, policy: str, caplog: pytest.LogCaptureFixture) -> None:
    """Argo CD prunes a set with its Application's propagation policy. In the background (what
    `init` writes, and Flux) the busy runner finishes its job. In the foreground (Argo CD's
    default, `kubectl delete --cascade=foreground`) the garbage collector deletes every runner
    pod at once, however the finalizer holds the set: the busy runner is killed mid-job and
    never unregistered, which the README warns of."""
    propagation = prune_policy_of_init_application() if policy != "Foreground" else policy
    harness.write("rs", 2, 0)
    harness.sync("rs")
    idle, busy = harness.names("rs")
    harness.running(idle)
    harness.running(busy, busy=True)
    harness.sync("rs")
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", "rs",
                                           propagation_policy=propagation)
    harness.sync("rs")
    if propagation == "Background":
        assert harness.names("rs") == [busy] and harness.runner(busy) is not None
        assert harness.runner(idle) is None  # unregistered, then deleted
        assert "Foreground" not in caplog.text
        return
    assert propagation == "Foreground"
    assert harness.names("rs") == []  # the busy one too, by the garbage collector
    assert harness.runner(busy) is not None and harness.runner(idle) is not None  # left behind
    assert harness.api.get_object("runnersets", "rs", NS) is None  # nothing held it
    assert "deleted with propagationPolicy=Foreground" in caplog.text


def test_the_documented_release_of_a_stuck_set_lets_it_go(harness: Harness) -> None:
    """docs/upgrading.md "Uninstalling": the controller gone before its sets, a deleted set
    stays Terminating on the finalizer; the merge patch the page prints releases it."""
    page = (Path(__file__).resolve().parents[2] / "docs/upgrading.md").read_text()
    section = page[page.index("\n## Uninstalling"):]
    assert f"`{FINALIZER}`" in section
    command = re.search(r"^kubectl -n \S+ patch runnerset (\S+) --type=merge -p '(.+)'$",
                        section, re.MULTILINE)
    assert command is not None
    name, patch = command[1], json.loads(command[2])
    harness.write(name, 1, 0)
    harness.sync(name)
    assert harness.api.get_object("runnersets", name, NS)["metadata"]["finalizers"] == [  # type: ignore[index]
        FINALIZER]
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", name)
    stuck = harness.api.get_object("runnersets", name, NS)  # no controller syncs it any more
    assert stuck is not None and stuck["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", name,
                                          patch, _content_type="application/merge-patch+json")
    assert harness.api.get_object("runnersets", name, NS) is None


def _delete_set(harness: Harness, name: str) -> None:
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", name)


def _delete_secret(harness: Harness, name: str = "gh-creds") -> None:
    kubernetes.client.CoreV1Api(harness.controller.kube.api).delete_namespaced_secret(name, NS)


def _busy_and_idle(harness: Harness) -> tuple[str, str]:
    """Set ``rs`` with two runners up, one running a job and one idle: (busy, idle)."""
    harness.write("rs", 2, 0)
    harness.sync("rs")
    busy, idle = harness.names("rs")
    harness.running(busy, busy=True)
    harness.running(idle)
    harness.sync("rs")
    return busy, idle


def test_a_set_whose_template_turned_invalid_is_still_seen_out_when_deleted(
        harness: Harness) -> None:
    """A template edit the controller refuses (InvalidSpec: BUILDKITE_AGENT_QUEUE in the
    agent's env, which the CRD lets through), then the set deleted: its runners are drained
    all the same — a set being deleted creates none, so its template does not matter — and
    the finalizer goes once none is left. It held the set Terminating, its runners up, for
    ever."""
    harness.write("bk", 2, 0, spec=buildkite_spec())
    harness.sync("bk")
    idle, done = harness.names("bk")
    harness.api.set_pod_phase(NS, idle, "Running")
    harness.sync("bk")
    harness.api.mutate_object("runnersets", "bk", lambda o: o["spec"]["template"]["spec"][
        "containers"][0].update(env=[{"name": "BUILDKITE_AGENT_QUEUE", "value": "linux"}]), NS)
    harness.sync("bk")
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InvalidSpec"
    harness.stop(done)
    _delete_set(harness, "bk")
    report = harness.sync("bk")
    assert sorted(report.deleted) == sorted([idle, done]) and report.created == []
    assert harness.names("bk") == []
    assert harness.api.get_object("runnersets", "bk", NS) is None


def test_a_set_deleted_with_its_secret_is_let_go(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Argo CD prunes the set and its credentials Secret together, and the controller has no
    client left from before (it restarted): runners that are not running need no GitHub to be
    removed, so they go, and the finalizer with them. Their offline registrations stay for
    GitHub to drop (an ephemeral runner's after a day)."""
    harness.write("rs", 3, 0)
    harness.sync("rs")
    pending, finished, failed = harness.names("rs")
    harness.clock.advance(30)
    harness.stop(finished)  # did its job: unregistered itself
    harness.stop(failed, exit_code=1)
    _delete_secret(harness)
    harness.controller.ctx.platforms.close()  # a restarted controller: nothing cached
    _delete_set(harness, "rs")
    calls = len(harness.github.calls)
    caplog.set_level(logging.INFO, "gitscale.controller")
    report = harness.sync("rs")
    assert sorted(report.deleted) == sorted([pending, finished, failed])
    assert harness.names("rs") == [] and harness.api.get_object("runnersets", "rs", NS) is None
    assert len(harness.github.calls) == calls  # nothing asked of GitHub: it could not be
    assert {r.name for r in harness.github.runners.values()} == {pending, failed}
    said = [r for r in caplog.records if "being deleted without its platform" in r.getMessage()]
    assert len(said) <= 1  # (none when nothing was left to say it about)


def test_a_namespace_deleted_with_a_running_runner_is_let_go(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """A namespace being deleted: its Secret goes at once, the RunnerSet waits on its
    finalizer. Running runners cannot be told idle from busy without the credentials, so the
    controller keeps them (says why, once) and lets the set go as soon as they are gone —
    here the namespace controller deletes them; the set, the namespace's last object, goes."""
    busy, idle = _busy_and_idle(harness)
    _delete_secret(harness)
    harness.controller.ctx.platforms.close()
    _delete_set(harness, "rs")
    caplog.set_level(logging.INFO, "gitscale.controller")
    waits = []
    for _ in range(2):
        report = harness.sync("rs")
        assert report.deleted == [] and harness.names("rs") == [busy, idle]
        waits.append(report.requeue_after)
        harness.clock.advance(30)
    assert waits == [30, 60]  # (tried again after 30 s, doubling while it waits: the backoff)
    said = [r.getMessage() for r in caplog.records
            if "being deleted without its platform" in r.getMessage()]
    assert len(said) == 1 and "running ones are kept until they stop" in said[0]
    assert "Secret default/gh-creds does not exist" in said[0]
    (ready,) = [c for c in harness.status("rs")["conditions"] if c["type"] == "Ready"]
    assert "delete their pods to let the set go" in ready["message"]
    harness.stop(busy)  # its job done
    assert harness.sync("rs").deleted == [busy]
    assert harness.api.get_object("runnersets", "rs", NS) is not None
    core = kubernetes.client.CoreV1Api(harness.controller.kube.api)  # the namespace
    core.delete_namespaced_pod(idle, NS, _preload_content=False)  # controller's part
    harness.sync("rs")
    assert harness.api.get_object("runnersets", "rs", NS) is None


def test_a_set_deleted_with_its_secret_keeps_the_credentials_it_last_read(
        harness: Harness) -> None:
    """The Secret pruned with the set, the controller still running: the client it last made
    (its token still valid) sees the runners out as usual, long after the 5 minutes a
    credential is kept before it is read again — the idle one unregistered and removed, the
    busy one left to finish its job."""
    seconds = [0.0]
    kube = harness.controller.kube
    harness.controller.ctx.platforms = Platforms(kube.read_secret, list_max_age=0,
                                                 clock=lambda: seconds[0])
    busy, idle = _busy_and_idle(harness)
    _delete_secret(harness)
    _delete_set(harness, "rs")
    seconds[0] += 3600
    report = harness.sync("rs")
    assert report.deleted == [idle] and harness.runner(idle) is None
    assert harness.names("rs") == [busy]
    harness.clock.advance(60)
    harness.stop(busy)
    assert harness.sync("rs").deleted == [busy]
    assert harness.api.get_object("runnersets", "rs", NS) is None


def test_a_secret_that_cannot_be_read_this_time_keeps_the_client_read_before(
        harness: Harness) -> None:
    """Every 5 minutes the credentials are read again; when that read fails for a moment
    (the API server answers 503), the client read before still serves: the pass goes on
    (a scale-up creates its runners) instead of failing, and the next pass reads it again."""
    seconds = [0.0]
    kube = harness.controller.kube
    harness.controller.ctx.platforms = Platforms(kube.read_secret, list_max_age=0,
                                                 clock=lambda: seconds[0])
    harness.write("rs", 1, 0)
    assert len(harness.sync("rs").created) == 1
    seconds[0] += 3600
    harness.api.inject_error("get", "secrets", code=503, reason="ServiceUnavailable",
                             times=1000)
    harness.write("rs", 3, 0)
    report = harness.sync("rs")
    assert len(report.created) == 2, report
    assert len(harness.names("rs")) == 3
    assert harness.api.call_count("get", "secrets") >= 1  # it was asked again
    harness.api.clear_errors()


def test_a_token_refused_at_registration_is_read_again_from_its_secret(
        harness: Harness) -> None:
    """GitHub refuses the token a registration sends (401: rotated): the Secret is read
    again on the next pass — not the refused client kept for the 5 minutes a credential
    lives —, so the rotated token registers the runner."""
    harness.write("rs", 1, 0)
    assert len(harness.sync("rs").created) == 1
    harness.github.tokens = {"ghp-rotated"}  # the old token no longer works
    harness.write("rs", 2, 0)
    report = harness.sync("rs")  # (no runner running, no sweep due: no list is read)
    assert report.created == [] and any("401" in e for e in report.errors), report.errors

    def rotate(secret: dict[str, Any]) -> None:
        secret["data"]["github_token"] = base64.b64encode(b"ghp-rotated").decode()

    harness.api.mutate_object("secrets", "gh-creds", rotate, NS)
    harness.clock.advance(10)  # refused creations back off
    assert len(harness.sync("rs").created) == 1 and len(harness.names("rs")) == 2


def test_a_template_fixed_after_a_webhook_refused_it_is_tried_at_once(harness: Harness) -> None:
    """The backoff holds new writes of replicas (they fix nothing), not a new template."""
    harness.api.inject_error("create", "pods", code=400, reason="BadRequest", times=1000,
                             message='admission webhook "policy.example.com" denied the '
                                     "request: images must come from registry.example.com")
    harness.write("rs", 2, 0)
    assert harness.sync("rs").created == []
    harness.write("rs", 3, 0)
    tries = harness.api.call_count("create", "pods")
    assert harness.sync("rs").created == []
    assert harness.api.call_count("create", "pods") == tries  # held: the same pods
    harness.api.clear_errors()
    harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"]["template"]["spec"][
        "containers"][0].update(image="registry.example.com/actions-runner:2.336.0"), NS)
    assert len(harness.sync("rs").created) == 3


def test_a_runner_that_never_comes_online_is_replaced_after_10_minutes(
        harness: Harness) -> None:
    """Its pod runs, GitHub never sees it (a bad JIT config, no way out): it was pending for
    ever, holding its slot. After REGISTRATION_TIMEOUT it is failed, unregistered, replaced."""
    harness.write("rs", 1, 1)
    harness.sync("rs")
    (silent,) = harness.names("rs")
    started = format_time(harness.clock.now)
    harness.api.set_pod_phase(NS, silent, "Running", [
        {"name": "runner", "ready": True, "state": {"running": {"startedAt": started}}}])
    harness.clock.advance(9 * 60)
    report = harness.sync("rs")
    assert (report.deleted, report.created) == ([], [])
    assert harness.status("rs")["pending"] == 1
    harness.clock.advance(60)
    report = harness.sync("rs")
    assert report.deleted == [silent] and harness.runner(silent) is None
    (successor,) = report.created
    assert harness.pod(successor)["metadata"]["annotations"]["gitscale.dev/failures"] == "1"
    # One that came online, then dropped off (a network blip), is not a registration timeout.
    harness.running(successor)
    harness.sync("rs")
    harness.github.set_state(successor, online=False)
    harness.clock.advance(3600)
    report = harness.sync("rs")
    assert (report.deleted, report.created) == ([], [])
    assert harness.names("rs") == [successor]


def _started_now(harness: Harness, pod: str) -> None:
    """The kubelet: the pod runs, its runner container started now."""
    harness.api.set_pod_phase(NS, pod, "Running", [
        {"name": "runner", "ready": True,
         "state": {"running": {"startedAt": format_time(harness.clock.now)}}}])


def _one_runner_running(harness: Harness) -> str:
    """(1, 1) applied: its one runner's pod runs, its container started now (never online)."""
    harness.write("rs", 1, 1)
    harness.sync("rs")
    (silent,) = harness.names("rs")
    _started_now(harness, silent)
    return silent


def _platforms_on_the_harness_clock(harness: Harness) -> None:
    """Lists and credentials age with the harness clock (they age in real time otherwise)."""
    start = harness.clock.now
    kube = harness.controller.kube
    harness.controller.ctx.platforms = Platforms(
        kube.read_secret, clock=lambda: (harness.clock.now - start).total_seconds())


def test_a_healthy_runner_is_not_timed_out_on_a_list_read_before_it_started(
        harness: Harness) -> None:
    """With under 5 % of GitHub's rate limit left, the runner list is reused until the limit
    refills (up to an hour). A runner that started after that list was read, and came online
    at once, is not in it as online: it is not failed after 10 minutes (and replaced, at the
    cost of a registration) — only a list read after its 10 minutes could say so."""
    _platforms_on_the_harness_clock(harness)
    harness.github.remaining = 100  # < 5 % of 5000
    harness.write("rs", 1, 1)
    harness.sync("rs")
    (first,) = harness.names("rs")
    harness.running(first, busy=True)
    harness.sync("rs")  # the list is read here, then reused
    harness.write("rs", 2, 2)
    (late,) = harness.sync("rs").created
    _started_now(harness, late)
    harness.github.set_state(late, online=True)  # online within seconds, idle
    for _ in range(15):
        harness.clock.advance(60)
        report = harness.sync("rs")
        assert (report.deleted, report.created) == ([], []), harness.clock.now
    assert harness.names("rs") == sorted([first, late])
    assert harness.github.by_name(late) is not None and harness.status("rs")["replicas"] == 2


def test_a_runner_past_its_registration_timeout_that_runs_a_job_is_kept_not_replaced(
        harness: Harness) -> None:
    """The list never showed it online, but it took a job since (GitHub answers the
    unregistration 422): it is unregistered *before* its successor is created, so it stays,
    counted busy, and no successor puts the set above replicas (patch > 0 never scales
    down)."""
    silent = _one_runner_running(harness)
    harness.github.refuse_delete(silent)
    harness.clock.advance(10 * 60)
    report = harness.sync("rs")
    assert (report.created, report.deleted, report.busy) == ([], [], [silent])
    assert harness.names("rs") == [silent] and harness.runner(silent) is not None
    status = harness.status("rs")
    assert (status["replicas"], status["busy"], status["failed"]) == (1, 1, 0)
    assert report.requeue_after == 30
    for _ in range(3):  # not asked again, not replaced
        harness.clock.advance(30)
        report = harness.sync("rs")
        assert (report.created, report.deleted) == ([], [])
    assert harness.names("rs") == [silent]


def test_a_timed_out_runner_that_cannot_be_unregistered_keeps_its_pod(
        harness: Harness) -> None:
    """GitHub answers its unregistration with a 5xx: the runner may be running a job, so
    its pod stays and no successor is made; the next pass, GitHub back, replaces it."""
    silent = _one_runner_running(harness)
    harness.github.fail_delete(silent)
    harness.clock.advance(10 * 60)
    report = harness.sync("rs")
    assert (report.created, report.deleted) == ([], [])
    assert harness.names("rs") == [silent] and harness.runner(silent) is not None
    assert any("502" in e and "not replaced" in e for e in report.errors), report.errors
    assert report.requeue_after == 10
    harness.github.fail_delete(silent, None)
    harness.clock.advance(10)
    report = harness.sync("rs")
    assert report.deleted == [silent] and harness.runner(silent) is None
    (successor,) = report.created
    assert harness.names("rs") == [successor]


def test_a_runner_removed_without_successor_keeps_its_pod_until_it_is_unregistered(
        harness: Harness) -> None:
    """Only a runner known stopped goes without being unregistered. One failed by the
    registration timeout, no longer wanted (replicas 0), whose unregistration fails (a 5xx)
    keeps its pod — it may be running a job — until a pass unregisters it."""
    silent = _one_runner_running(harness)
    harness.clock.advance(10 * 60)
    harness.write("rs", 0, 2)
    harness.github.fail_delete(silent)
    report = harness.sync("rs")
    assert (report.created, report.deleted) == ([], [])
    assert harness.names("rs") == [silent]
    assert any("502" in e for e in report.errors), report.errors
    harness.github.fail_delete(silent, None)
    harness.clock.advance(10)
    assert harness.sync("rs").deleted == [silent]
    assert harness.names("rs") == [] and harness.runner(silent) is None


QUOTA = dict(code=403, reason="Forbidden", message='pods "x" is forbidden: exceeded quota: '
             "runners")


def _refused_passes(harness: Harness, passes: int) -> list[float | None]:
    waits = []
    for _ in range(passes):
        report = harness.sync("rs")
        waits.append(report.requeue_after)
        harness.clock.advance(report.requeue_after or 0)
    return waits


def test_a_refusal_of_long_ago_does_not_lengthen_a_new_ones_wait(harness: Harness) -> None:
    """The creations' backoff doubles with the passes refused *in a row*: a pass with
    nothing to create ends it, and so does a day without a pass (a replica that did not lead
    meanwhile); a changed template starts it over too."""
    harness.api.inject_error("create", "pods", times=10_000, **QUOTA)  # type: ignore[arg-type]
    harness.write("rs", 1, 1)
    assert _refused_passes(harness, 5) == [10, 20, 40, 80, 160]
    harness.write("rs", 0, 2)  # nothing to create any more
    harness.sync("rs")
    harness.clock.advance(7 * 24 * 3600)
    harness.write("rs", 1, 3)
    assert _refused_passes(harness, 2) == [10, 20]  # not 300
    harness.clock.advance(24 * 3600)  # no pass for a day
    assert _refused_passes(harness, 2) == [10, 20]
    assert _refused_passes(harness, 1) == [40]
    harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"]["template"]["spec"][
        "containers"][0].update(image="registry.example.com/actions-runner:2.336.0"), NS)
    assert _refused_passes(harness, 2) == [10, 20]  # a new template: refused anew


def test_a_set_being_deleted_whose_secret_cannot_be_read_this_time_keeps_its_runners(
        harness: Harness) -> None:
    """The API server fails reading the credentials Secret (a 5xx) of a set being deleted,
    with no client kept from before: that says nothing of the credentials, so its runners are
    not removed without being unregistered — the pass is an error and is tried again; once
    the Secret is read, they are unregistered and removed as usual."""
    harness.write("rs", 2, 0)
    harness.sync("rs")
    idle, pending = harness.names("rs")
    harness.running(idle)
    harness.sync("rs")
    harness.controller.ctx.platforms.close()  # a restarted controller: nothing cached
    _delete_set(harness, "rs")
    harness.api.inject_error("get", "secrets", times=10_000)
    calls = len(harness.github.calls)
    report = harness.sync("rs")
    assert report.deleted == [] and harness.names("rs") == [idle, pending]
    assert len(harness.github.calls) == calls
    assert report.requeue_after is not None
    (ready,) = [c for c in harness.status("rs")["conditions"] if c["type"] == "Ready"]
    assert ready["reason"] == "PlatformUnavailable" and "Secret" in ready["message"]
    harness.api.clear_errors()
    report = harness.sync("rs")
    assert sorted(report.deleted) == [idle, pending]
    assert harness.runner(idle) is None and harness.runner(pending) is None  # unregistered
    assert harness.api.get_object("runnersets", "rs", NS) is None


def test_a_token_refused_while_listing_runners_is_said_in_ready_not_a_crash(
        harness: Harness) -> None:
    """A revoked token: the runner list of a pass answers 401, so the set's clients are
    forgotten (the Secret is read again next pass); the same pass then creates its runners
    with the adapter it holds, and that is refused too — a credentials problem in Ready,
    not "the pass crashed" on a client closed under it."""
    harness.github.tokens = {"ghp-the-token-github-now-wants"}
    harness.write("rs", 2, 0)
    report = harness.sync("rs")
    assert report.created == [] and report.errors, report
    assert all("answered 401" in error for error in report.errors), report.errors
    ready = next(c for c in harness.status("rs")["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "answered 401: Bad credentials" in ready["message"]
    assert ready["reason"] == "CredentialsRefused"  # a configuration to fix, not an outage
    harness.github.tokens.add(TOKEN)
    harness.clock.advance(60)  # past the creations' backoff
    assert len(harness.sync("rs").created) == 2  # the Secret read again: the token works


def _ready(harness: Harness, name: str) -> dict[str, Any]:
    return next(c for c in harness.status(name)["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize(("data", "said"), [
    pytest.param(None, "Secret default/gh-creds does not exist", id="no-secret"),
    pytest.param({"github_app_id": "12"}, "Secret default/gh-creds: needs the key "
                 "github_token, or github_app_id and github_app_private_key", id="no-key"),
])
def test_a_missing_credentials_secret_or_key_is_a_configuration_error_not_an_outage(
        harness: Harness, data: dict[str, str] | None, said: str) -> None:
    """Ready says CredentialsMissing, naming the Secret and the key (never a value), and
    status says which spec it was computed for (observedPatchID with observedGeneration),
    though the pass could not count or create anything; once the Secret is there, the set
    is served."""
    _delete_secret(harness)
    if data is not None:
        harness.api.create_object("secrets", {"metadata": {"name": "gh-creds"}, "data": {
            k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}, NS)
    harness.write("rs", 2, 7)
    report = harness.sync("rs")
    assert report.created == [] and harness.github.calls == []
    status = harness.status("rs")
    ready = _ready(harness, "rs")
    assert (ready["status"], ready["reason"]) == ("False", "CredentialsMissing")
    assert said in ready["message"]
    generation = harness.api.get_object("runnersets", "rs", NS)["metadata"]["generation"]
    assert (status["observedPatchID"], status["observedGeneration"]) == (7, generation)
    assert "appliedPatchID" not in status  # nothing was applied
    assert harness.controller.events.flush(5)
    assert [(e["type"], e["reason"]) for e in harness.events("rs")] == [
        ("Warning", "CredentialsMissing")]
    harness.write("rs", 2, 8)  # a new write while the Secret is still missing
    harness.sync("rs")
    assert harness.status("rs")["observedPatchID"] == 8
    if data is not None:
        _delete_secret(harness)
    harness.api.create_object("secrets", {"metadata": {"name": "gh-creds"}, "data": {
        "github_token": base64.b64encode(TOKEN.encode()).decode()}}, NS)
    harness.catch_up()
    assert len(harness.sync("rs").created) == 2
    assert (harness.status("rs")["observedPatchID"], harness.status("rs")["appliedPatchID"]) \
        == (8, 8)


def test_a_credentials_secret_the_api_server_fails_to_read_is_platform_unavailable(
        harness: Harness) -> None:
    """A 5xx reading the Secret, with no client kept from before: nothing says the
    credentials are wrong, so Ready keeps PlatformUnavailable (an outage, tried again)."""
    harness.api.inject_error("get", "secrets", times=10_000)
    harness.write("rs", 1, 3)
    report = harness.sync("rs")
    assert report.created == [] and report.requeue_after is not None
    ready = _ready(harness, "rs")
    assert (ready["status"], ready["reason"]) == ("False", "PlatformUnavailable")
    assert "Secret default/gh-creds" in ready["message"]
    assert harness.status("rs")["observedPatchID"] == 3
    harness.api.clear_errors()
    assert len(harness.sync("rs").created) == 1


def test_a_token_refused_at_unregistration_is_read_again_from_its_secret(
        harness: Harness) -> None:
    """A scale-down of pending runners (no list read: none runs) meets a rotated token on
    unregister (401): the runners stay, the pass says why, and the next pass reads the Secret
    again — not the refused client kept for the 5 minutes a credential lives —, so the new
    token unregisters and removes them."""
    harness.write("rs", 2, 1)
    assert len(harness.sync("rs").created) == 2
    pending = harness.names("rs")
    harness.github.tokens = {"ghp-rotated"}
    harness.write("rs", 0, 0)
    report = harness.sync("rs")
    assert report.deleted == [] and harness.names("rs") == pending
    assert report.errors and all("401" in e for e in report.errors), report.errors

    def rotate(secret: dict[str, Any]) -> None:
        secret["data"]["github_token"] = base64.b64encode(b"ghp-rotated").decode()

    harness.api.mutate_object("secrets", "gh-creds", rotate, NS)
    report = harness.sync("rs")
    assert sorted(report.deleted) == sorted(pending), report.errors
    assert harness.names("rs") == [] and all(harness.runner(n) is None for n in pending)


MALFORMED_KEY = "Secret default/gh-creds: key github_app_private_key: cannot sign a JWT: not a " \
    "PEM private key (its content cannot be read) (the value is not shown)"


def _malformed_app_key(harness: Harness) -> None:
    harness.api.mutate_object("secrets", "gh-creds", lambda o: o.update(data={
        k: base64.b64encode(v.encode()).decode() for k, v in {
            "github_app_id": "4242", "github_app_installation_id": "77",
            "github_app_private_key": "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n"}.items()}),
        NS)


def _said(harness: Harness, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ready and the Warning Event of its reason."""
    ready = _ready(harness, name)
    (event,) = [e for e in harness.events(name) if e["reason"] == ready["reason"]]
    return ready, event


def test_a_malformed_app_key_is_said_once_with_the_count_of_runners_it_stops(
        harness: Harness) -> None:
    """A GitHub App key that cannot sign: every runner the pass registers, lists or
    unregisters fails for that one cause. Ready and its Event say it once, with how many
    runners it kept from being made or replaced — not once per runner, nor once for the
    runner list and again for the creations."""
    _malformed_app_key(harness)
    harness.write("rs", 3, 1)
    report = harness.sync("rs")
    assert report.created == [] and harness.pods("rs") == []
    for said in _said(harness, "rs"):
        assert said["reason"] == "CredentialsRefused"
        assert said["message"].count(MALFORMED_KEY) == 1, said["message"]
        # (the others met it too, or were not tried after it: those started meanwhile)
        assert said["message"].startswith(f"3 of 3 runner(s) missing: {MALFORMED_KEY}"), said
        assert "; creations failed 1 pass(es) in a row" in said["message"], said


def test_runners_a_malformed_app_key_keeps_from_being_replaced_are_counted_once(
        harness: Harness) -> None:
    """Five runners stuck (their image cannot be pulled) are replaced after being
    unregistered; with the App key broken meanwhile none can be: one line for the five."""
    harness.write("rs", 5, 1)
    harness.sync("rs")
    names = harness.names("rs")
    for name in names:
        harness.api.set_pod_phase(NS, name, "Pending", [{"name": "runner", "ready": False,
                                  "state": {"waiting": {"reason": "ImagePullBackOff"}}}])
    _malformed_app_key(harness)
    harness.controller.ctx.platforms.close()  # (the key is read again: a restarted controller)
    harness.clock.advance(6 * 60)  # stuck for 5 minutes: failed, to be replaced
    report = harness.sync("rs")
    assert (report.created, report.deleted) == ([], []) and harness.names("rs") == names
    for said in _said(harness, "rs"):
        assert said["reason"] == "CredentialsRefused"
        message = said["message"]
        assert message.count(MALFORMED_KEY) == 1, message
        assert message.startswith("5 runners not replaced ("), message
        assert f"and 2 more): they could not be unregistered first ({MALFORMED_KEY})" in message


def test_a_deleted_set_leaves_nothing_of_its_clients_in_the_platforms(harness: Harness) -> None:
    """What a set's adapter got (its clients, the digests of their Secrets: what a refusal of
    its credentials is about) goes with the set: a long-running controller would otherwise
    keep the last clients of every set ever deleted."""
    platforms = harness.controller.ctx.platforms
    harness.write("rs", 1, 0)
    harness.sync("rs")
    (name,) = harness.names("rs")
    harness.running(name)
    harness.sync("rs")
    assert platforms.made_from(f"{NS}/rs") != ""
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", "rs")
    harness.sync("rs")
    assert harness.api.get_object("runnersets", "rs", NS) is None
    assert f"{NS}/rs" not in platforms._used
    harness.catch_up()
    harness.sync("rs")  # gone
    assert f"{NS}/rs" not in platforms._used and platforms.made_from(f"{NS}/rs") == ""
