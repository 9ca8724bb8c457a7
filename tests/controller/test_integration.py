"""The issue's scenarios through the real ``kubernetes`` client against the local API server.

(r, p) is a spec write of replicas r and patch ID p, at the harness clock's "now".
"""
from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path

import kubernetes.client
import pytest

from gitscale.commands.init import argocd_application
from gitscale.commands.init_choices import choose
from gitscale.controller.observe import FINALIZER
from tests.controller.harness import NS, Harness


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


def test_refused_pod_creations_do_not_burn_the_github_rate_limit(harness: Harness) -> None:
    """A quota refusing pods costs GitHub a registration and an unregistration per runner tried.
    After one refused pass, the next passes try one runner first (the ReplicaSet controller's
    slow start), so a set stuck on its quota costs two GitHub calls per pass, not 2 × missing."""
    harness.api.inject_error("create", "pods", code=403, reason="Forbidden",
                             message="exceeded quota: pods", times=23)
    harness.write("rs", 20, 0)
    first = harness.sync("rs")
    assert first.created == [] and len(first.errors) == 20  # unknown until tried: all at once
    for _ in range(3):
        harness.clock.advance(10)
        before = len(harness.github.calls)
        report = harness.sync("rs")
        assert len(harness.github.calls) - before == 2  # one register, one unregister
        assert report.created == [] and report.requeue_after == pytest.approx(10)
    status = harness.status("rs")
    assert (status["pending"], status["replicas"]) == (0, 0)
    harness.clock.advance(10)  # the quota was raised: every missing runner in one pass again
    assert len(harness.sync("rs").created) == 20
    assert len(harness.pods("rs")) == 20 and len(harness.github.runners) == 20


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
