"""The whole controller pass — observe → decide → apply — as a state machine: the real
``kubernetes`` client against the local API server (``tests/kubeapi/``) and the GitHub fake,
one RunnerSet, and between passes what the world does: gitscale writes a spec (replicas up or
down, the next patch ID, patch 0, a patch ID near 2³¹−1 that wraps to 1, a backlog), the
kubelet starts a runner pod, a runner connects, takes a job, finishes it (its pod Succeeded,
its registration gone), fails (its pod Failed), a pod is deleted from outside, GitHub fails
its calls (a 5xx) or answers an unregistration 422 (a job taken since the list was read), the
API server fails a call, time passes.

Checked after every pass, from the README's controller section:

- never a busy runner's pod deleted (busy by GitHub's word at the pass's start, or by its 422
  during it), unless it had stopped for good;
- never more runners that can take the set's jobs (a pod that has not stopped, whose
  registration GitHub still has) than ``replicas``, unless there were that many before;
- a pass on a spec with ``patchID > 0`` deletes no pending or idle runner (only stopped ones,
  and ones past their registration timeout);
- a pass whose gate is shut creates no more runners than the slots lost meanwhile (pods
  deleted from outside, failed runners), the backlog's refills and their retries allow;
- a pass that changed nothing and met no error leaves a status that agrees with the pods;
- ``settle``: GitHub and the API server answering again, time passing, passes until nothing
  changes: then every slot is covered (patch 0: exactly ``replicas`` or the busy runners),
  Ready says so, every registration GitHub holds for the set has a pod, and every JIT
  Secret a present pod. Every example that has not failed ends with one (``teardown``; on
  patch 0 or the patch it has, as drawn at its start), whether or not it drew the rule.

``GITSCALE_STATEFUL_EXAMPLES`` (and ``GITSCALE_STATEFUL_STEPS``) run it longer, to hunt:
``GITSCALE_STATEFUL_EXAMPLES=400 pytest tests/controller/test_pass_state_machine.py``.
"""
from __future__ import annotations

import os
import sys
from contextlib import ExitStack, contextmanager
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
)

from gitscale.controller.context import Report
from gitscale.controller.observe import LABEL_SET, REGISTRATION_TIMEOUT
from gitscale.runnerset_api import PATCH_ID_MAX
from gitscale.timeutil import format_time, parse_time
from tests.controller.harness import NS, Harness, start

SET = "rs"
HUNTING = "GITSCALE_STATEFUL_EXAMPLES" in os.environ  # (random; else derandomized)
EXAMPLES = int(os.environ.get("GITSCALE_STATEFUL_EXAMPLES", "18"))
STEPS = int(os.environ.get("GITSCALE_STATEFUL_STEPS", "15"))
SETTLE_PASSES = 8


def phase_of(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def stopped(pod: dict[str, Any]) -> bool:
    return phase_of(pod) in ("Succeeded", "Failed")


class PassMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._stack = ExitStack()
        self.h: Harness = self._stack.enter_context(contextmanager(start)())
        self.replicas = 0
        self.patch = 0
        self.backlog = 0
        self.seen_online: set[str] = set()  # runners a pass saw online (no registration timeout)
        self.refusing: set[str] = set()  # runners whose next unregistration answers 422
        # Slots a shut gate may fill since the write was applied: pods lost from outside,
        # failed runners, finished ones the backlog refills (counted loosely: an upper bound)
        self.allowance = 0
        self.write_applied = False
        self.log: list[str] = []
        self.labels = ["linux"]  # the set's runner labels (github_spec's)
        self.made_for: dict[str, list[str]] = {}  # the labels each pod was made for
        self.timed_out: set[str] = set()  # runners past their registration timeout

    def teardown(self) -> None:
        """The example's last step, whatever it drew: a settle and its convergence checks —
        unless it failed (or Hypothesis stopped it), which its exception, being raised, says."""
        try:
            if sys.exc_info()[1] is None and hasattr(self, "end_on_zero"):
                self.settle(self.end_on_zero)
                event("settled at the end")
        finally:
            if os.environ.get("SHOWHIST"):
                print("=====\n" + "\n".join(self.log))
            self._stack.close()

    # -- helpers --------------------------------------------------------------------------------
    def pods(self) -> list[dict[str, Any]]:
        return self.h.pods(SET)  # (not being deleted)

    def by_phase(self, *phases: str) -> list[str]:
        return [p["metadata"]["name"] for p in self.pods() if phase_of(p) in phases]

    def connecting(self) -> list[str]:
        return [n for n in self.by_phase("Running")
                if (r := self.runner(n)) is not None and not r.online]

    def idle(self) -> list[str]:
        return [n for n in self.by_phase("Running")
                if (r := self.runner(n)) is not None and r.online and not r.busy]

    def busy(self) -> list[str]:
        return [n for n in self.by_phase("Running")
                if (r := self.runner(n)) is not None and r.busy]

    def runner(self, name: str) -> Any:
        return self.h.github.by_name(name)

    def pick(self, names: list[str], index: int) -> str | None:
        return sorted(names)[index % len(names)] if names else None

    def note(self, line: str) -> None:
        self.log.append(f"{format_time(self.h.clock.now)} {line}")

    # -- gitscale ---------------------------------------------------------------------------------
    @initialize(replicas=st.integers(0, 4), zero=st.booleans(), backlog=st.integers(0, 2),
                graceful=st.booleans(), end_on_zero=st.booleans())
    def first_write(self, replicas: int, zero: bool, backlog: int, graceful: bool,
                    end_on_zero: bool) -> None:
        # graceful: deleted pods linger, terminating, until the kubelet is done with them
        self.h.api.graceful_pod_deletion = graceful
        self.end_on_zero = end_on_zero  # (the teardown's settle: scaled on patch 0, or not)
        self.write(replicas, "zero" if zero else "next", backlog)

    @rule(replicas=st.integers(0, 5), how=st.sampled_from(["next", "next", "zero", "wrap"]),
          backlog=st.integers(0, 3), watch=st.booleans())
    def write(self, replicas: int, how: str, backlog: int, watch: bool = False) -> None:
        self.h.clock.advance(1)  # (a new effectiveTime, to the second)
        if how == "zero":
            self.patch = 0
        elif how == "wrap":
            self.patch = PATCH_ID_MAX - 1 if self.patch < PATCH_ID_MAX - 1 else PATCH_ID_MAX
        else:
            self.patch = self.patch % PATCH_ID_MAX + 1
        self.replicas, self.backlog = replicas, backlog
        self.h.write(SET, replicas, self.patch, backlog=backlog)
        self.effective = format_time(self.h.clock.now)
        self.allowance, self.write_applied = backlog, False
        self.note(f"write ({replicas}, {self.patch}, backlog {backlog})")
        self.watched(watch)

    @rule(watch=st.booleans())
    def labels_edited(self, watch: bool) -> None:
        """Someone edits the set's runner labels (not a gitscale write): the runners made
        for the old ones are outdated."""
        self.labels = ["linux"] if self.labels != ["linux"] else ["linux", "x64"]
        labels = list(self.labels)
        self.h.api.mutate_object("runnersets", SET,
                                 lambda o: o["spec"]["github"].update(labels=labels), NS)
        self.allowance += len(self.pods())  # each outdated runner is replaced
        self.note(f"labels {labels}")
        self.watched(watch)

    # -- the kubelet and the runners ---------------------------------------------------------------
    @rule(index=st.integers(0, 9), online=st.booleans(), watch=st.booleans())
    def pod_runs(self, index: int, online: bool, watch: bool = False) -> None:
        name = self.pick(self.by_phase("Pending"), index)
        if name is None:
            return
        self.h.api.set_pod_phase(NS, name, "Running", [
            {"name": "runner", "ready": True, "state": {"running": {
                "startedAt": format_time(self.h.clock.now)}}}])
        if online and self.runner(name) is not None:
            self.h.github.set_state(name, online=True, busy=False)
        self.note(f"{name} runs{' online' if online else ''}")
        self.watched(watch)

    @rule()
    def all_up(self) -> None:
        """The kubelet and GitHub catch up: every pending pod runs, its runner online."""
        for name in self.by_phase("Pending"):
            self.pod_runs(0, True)

    @rule(index=st.integers(0, 9))
    def runner_connects(self, index: int) -> None:
        name = self.pick(self.connecting(), index)
        if name is not None:
            self.h.github.set_state(name, online=True, busy=False)
            self.note(f"{name} online")

    @rule(index=st.integers(0, 9), watch=st.booleans())
    def takes_job(self, index: int, watch: bool) -> None:
        name = self.pick(self.idle(), index)
        if name is not None:
            self.h.github.set_state(name, online=True, busy=True)
            self.note(f"{name} busy")
            self.watched(watch)

    @rule(index=st.integers(0, 9), watch=st.booleans())
    def job_done(self, index: int, watch: bool) -> None:
        name = self.pick(self.busy(), index)
        if name is not None:
            self.h.stop(name)  # (the ephemeral runner unregisters itself)
            self.allowance += 1
            self.note(f"{name} done")
            self.watched(watch)

    @rule(index=st.integers(0, 9), github_notices=st.booleans(), watch=st.booleans())
    def pod_fails(self, index: int, github_notices: bool, watch: bool) -> None:
        name = self.pick(self.by_phase("Pending", "Running"), index)
        if name is None:
            return
        self.h.api.set_pod_phase(NS, name, "Failed", [
            {"name": "runner", "ready": False, "state": {"terminated": {
                "exitCode": 1, "finishedAt": format_time(self.h.clock.now)}}}])
        runner = self.runner(name)
        if runner is not None:
            self.h.github.set_state(name, online=False,
                                    busy=runner.busy and not github_notices)
        self.allowance += 1
        self.note(f"{name} failed")
        self.watched(watch)

    @rule(index=st.integers(0, 9), watch=st.booleans())
    def deleted_from_outside(self, index: int, watch: bool) -> None:
        name = self.pick([p["metadata"]["name"] for p in self.pods()], index)
        if name is None:
            return
        rt = self.h.api.registry.resolve("pods")
        self.h.api.store.delete(rt, NS, name, {})
        runner = self.runner(name)
        if runner is not None:  # its runner killed: GitHub sees it go offline (busy or not)
            self.h.github.set_state(name, online=False, busy=runner.busy)
        self.allowance += 1
        self.note(f"{name} deleted from outside")
        self.watched(watch)

    @rule()
    def kubelet_done_deleting(self) -> None:
        if self.h.api.finish_pod_deletions():
            self.note("terminating pods gone")

    # -- GitHub and the API server failing ---------------------------------------------------------
    @rule(method=st.sampled_from(["DELETE", "POST", "GET", None]))
    def github_down(self, method: str | None) -> None:
        self.h.github.outage(502, method=method)
        self.note(f"GitHub answers {method or 'everything'} 502")

    @rule()
    def github_up(self) -> None:
        self.h.github.outage(None)
        self.note("GitHub answers again")

    @rule(index=st.integers(0, 9))
    def job_taken_before_unregister(self, index: int) -> None:
        """The next unregistration of an idle runner answers 422: it took a job after the
        runner list was read (made busy in the list once it has answered so)."""
        name = self.pick(self.idle(), index)
        if name is not None:
            self.h.github.refuse_delete(name)
            self.refusing.add(name)
            self.note(f"{name} will answer 422")

    @rule(which=st.sampled_from([
        ("create", "pods", 500, False), ("create", "pods", 403, False),
        ("create", "pods", 504, True), ("delete", "pods", 500, False),
        ("patch", "runnersets/status", 500, False), ("create", "secrets", 500, False),
        ("patch", "runnersets", 500, False), ("list", "runnersets", 500, False),
        ("patch", "secrets", 500, False), ("delete", "secrets", 500, False)]),
        skip=st.integers(0, 2))
    def api_fails(self, which: tuple[str, str, int, bool], skip: int) -> None:
        verb, resource, code, applied = which
        reason = {403: "Forbidden", 504: "Timeout"}.get(code, "InternalError")
        message = "exceeded quota: pods" if code == 403 else "injected failure"
        self.h.api.inject_error(verb, resource, code=code, reason=reason, message=message,
                                skip=skip, applied=applied)
        self.note(f"API server: {verb} {resource} answers {code} after {skip}")

    @rule(seconds=st.sampled_from([1, 5, 30, 90, 301, 610]))
    def tick(self, seconds: int) -> None:
        self.h.clock.advance(seconds)
        self.note(f"+{seconds}s")

    @rule(index=st.integers(0, 9), keep=st.integers(0, 2))
    def scale_down_as_one_takes_a_job(self, index: int, keep: int) -> None:
        """gitscale scales down on patch 0 as an idle runner takes a job after the list was
        read (its unregistration answers 422): the next runner goes in its place. (Rules
        have no preconditions: pod names are random, so a precondition on the pods would make
        Hypothesis's replays differ; a rule with nothing to act on does nothing.)"""
        if len(self.idle()) < 2:
            return
        self.job_taken_before_unregister(index)
        self.write(keep, "zero", 0)
        self.one_pass()

    def watched(self, watch: bool) -> None:
        """The watch brings the change to the controller: a pass at once (``watch``), or
        not yet (changes pile up until the next pass)."""
        if watch:
            self.one_pass()

    # -- the controller -----------------------------------------------------------------------------
    @rule()
    def reconcile(self) -> None:
        self.one_pass()

    @rule(seconds=st.sampled_from([1, 5, 20, 60]))
    def resync(self, seconds: int) -> None:
        """Time passes, then a pass (the minute's resync, a backoff's end)."""
        self.tick(seconds)
        self.one_pass()

    def one_pass(self) -> Report:
        h = self.h
        now = h.clock.now
        before = {p["metadata"]["name"]: p for p in self.pods()}
        self.terminating_before = [p for p in h.api.objects(
            "pods", NS, label_selector=f"{LABEL_SET}={SET}") if p["metadata"].get(
            "deletionTimestamp")]
        github = {n: (r.online, r.busy) for n in before if (r := self.runner(n)) is not None}
        busy = {n for n, p in before.items() if phase_of(p) == "Running"
                and github.get(n, (False, False))[1]}
        timed_out = {n for n, p in before.items() if phase_of(p) == "Running"
                     and n not in self.seen_online and not github.get(n, (False, False))[0]
                     and now - self.started(p) >= REGISTRATION_TIMEOUT}
        self.allowance += len(timed_out - self.timed_out)  # failed: each one is replaced
        self.timed_out |= timed_out
        capable_before = self.capable()
        outdated = {n for n in before if self.outdated(n)}
        log_mark = len(h.api.log)
        calls_mark = len(h.github.calls)
        ids = {str(p["metadata"].get("annotations", {}).get("gitscale.dev/runner-id")): n
               for n, p in before.items()}
        shut_before = self.write_applied and self.patch > 0

        report = h.sync(SET)
        self.note(f"pass: created {report.created} deleted {report.deleted} busy "
                  f"{report.busy} errors {report.errors}")

        for name in report.created:
            self.made_for[name] = list(self.labels)
        for what, happened in (("created", report.created), ("deleted", report.deleted),
                               ("422", report.busy), ("errors", report.errors),
                               ("leftovers", report.leftovers)):
            if happened:
                event(f"a pass with {what}")
        asked = {ids.get(path.rsplit("/", 1)[1], "") for method, path in
                 h.github.calls[calls_mark:] if method == "DELETE"}
        refused = asked & self.refusing
        for name in refused:  # it took a job: the list says so from now on
            if self.runner(name) is not None:
                h.github.set_state(name, online=True, busy=True)
            with h.github.lock:
                h.github.refused.discard(name)
            self.refusing.discard(name)
            busy.add(name)
        listed = any(m == "GET" and p.endswith("/actions/runners")
                     for m, p in h.github.calls[calls_mark:]) and (
            h.github.down is None or h.github.down[1] not in (None, "GET"))
        for name in before:
            if listed and github.get(name, (False, False)) != (False, False) \
                    and phase_of(before[name]) == "Running":
                self.seen_online.add(name)  # (the pass read the list: it saw it online)

        deleted = [line.split("/pods/")[1].split(" ")[0].split("?")[0]
                   for line in h.api.log[log_mark:]
                   if line.startswith("DELETE") and "/pods/" in line]
        # Never a busy runner (unless it stopped for good: it runs no job).
        for name in deleted:
            if name in busy and not stopped(before[name]):
                raise AssertionError(f"busy runner {name} deleted\n" + self.history())
        # Never beyond replicas: runners that can take a job (their registration kept).
        capable = self.capable()
        if capable > max(self.replicas, capable_before):
            raise AssertionError(f"{capable} runners that can take a job, replicas "
                                 f"{self.replicas}, {capable_before} before\n" + self.history())
        # patchID > 0 never scales down.
        if self.patch > 0:
            for name in deleted:
                if name in before and not stopped(before[name]) and name not in timed_out \
                        and name not in outdated:
                    raise AssertionError(f"patch {self.patch} deleted {name} "
                                         f"({phase_of(before[name])}, GitHub "
                                         f"{github.get(name)})\n" + self.history())
        # A shut gate fills only what was lost, failed or refilled from the backlog.
        actions = report.actions
        if actions is not None and not actions.acting and shut_before:
            self.allowance -= len(report.created)
            if self.allowance < 0:
                raise AssertionError(f"a shut gate created {report.created} beyond the slots "
                                     "lost, failed or refilled\n" + self.history())
        if actions is not None and actions.acting and not report.errors:
            self.write_applied = True
            self.allowance = self.backlog
        terminating = {p["metadata"]["name"] for p in self.terminating_before}
        if terminating & set(deleted):
            raise AssertionError(f"terminating pods deleted again: {terminating & set(deleted)}"
                                 "\n" + self.history())
        status = h.status(SET)
        if status.get("refilledPatchID") == self.patch and status.get(
                "refilledEffectiveTime") == self.effective and status.get(
                "refilled", 0) > self.backlog:
            raise AssertionError(f"refilled {status.get('refilled')} beyond the backlog "
                                 f"{self.backlog}\n" + self.history())
        if not report.errors and not report.stale and actions is not None and (
                status.get("appliedPatchID"), status.get("appliedEffectiveTime")) != (
                self.patch, self.effective):
            raise AssertionError(f"a pass without errors left applied "
                                 f"{status.get('appliedPatchID')} "
                                 f"{status.get('appliedEffectiveTime')}, the spec is "
                                 f"{self.patch} {self.effective}\n" + self.history())
        if not report.errors and not report.created and not report.deleted \
                and not report.busy and actions is not None:
            self.check_status()
        return report

    def started(self, pod: dict[str, Any]) -> Any:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            when = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            if when:
                return parse_time(when)
        return self.h.clock.now

    def outdated(self, name: str) -> bool:
        """Made for other labels than the set's (its registration may be gone already:
        an outdated runner is unregistered before its successor is created)."""
        return self.made_for.get(name, self.labels) != self.labels

    def capable(self) -> int:
        """Pods that have not stopped whose registration GitHub still has, for the set's
        labels: runners that can take the set's jobs."""
        return sum(1 for p in self.pods() if not stopped(p)
                   and self.runner(p["metadata"]["name"]) is not None
                   and not self.outdated(p["metadata"]["name"]))

    def check_status(self) -> None:
        """The status a pass that changed nothing wrote agrees with the pods."""
        status = self.h.status(SET)
        counts = {"pending": 0, "idle": 0, "busy": 0, "failed": 0}
        now = self.h.clock.now
        for pod in self.pods():
            name, phase = pod["metadata"]["name"], phase_of(pod)
            runner = self.runner(name)
            if phase == "Pending":
                counts["pending"] += 1
            elif phase == "Failed":
                counts["failed"] += 1
            elif phase == "Running":
                if runner is not None and runner.busy:
                    counts["busy"] += 1
                elif runner is not None and runner.online:
                    counts["idle"] += 1
                elif name not in self.seen_online and \
                        now - self.started(pod) >= REGISTRATION_TIMEOUT:
                    counts["failed"] += 1
                else:
                    counts["pending"] += 1
        counts["terminating"] = sum(1 for p in self.h.api.objects(
            "pods", NS, label_selector=f"{LABEL_SET}={SET}")
            if p["metadata"].get("deletionTimestamp") and not stopped(p))
        said = {k: status.get(k, 0) for k in counts}
        if said != counts or status.get("replicas") != sum(counts.values()) - counts[
                "terminating"] or \
                status.get("observedPatchID") != self.patch:
            raise AssertionError(f"status {said}, replicas {status.get('replicas')}, "
                                 f"observedPatchID {status.get('observedPatchID')}; the pods "
                                 f"say {counts}, patch {self.patch}\n" + self.history())

    # -- everything answering again -------------------------------------------------------------------
    @rule(zero=st.booleans())
    def settle(self, zero: bool) -> None:
        h = self.h
        h.github.outage(None)
        with h.github.lock:
            h.github.refused.clear()
            h.github.failing.clear()
        self.refusing.clear()
        h.api.clear_errors()
        if zero and self.patch != 0:
            self.write(self.replicas, "zero", self.backlog)
        # GitHub releases the registrations of runners that are gone or stopped
        gone = {p["metadata"]["name"] for p in self.pods() if stopped(p)}
        with h.github.lock:
            names = {p["metadata"]["name"] for p in self.pods()}
            for r in h.github.runners.values():
                if r.name not in names or r.name in gone:
                    r.online = r.busy = False
        self.note("settle")
        h.api.finish_pod_deletions()
        last: tuple[Any, ...] | None = None
        for i in range(SETTLE_PASSES):
            h.clock.advance(301)  # past every backoff, sweep interval and grace
            report = self.one_pass()
            h.api.finish_pod_deletions()
            state = (tuple(report.created), tuple(report.deleted), tuple(report.leftovers))
            if i >= 3 and not report.errors and state == ((), (), ()) and last == state:
                break
            last = state
        else:
            raise AssertionError("no quiet pass after settling\n" + self.history())
        assert not report.errors, report.errors
        pods = self.pods()
        alive = [p for p in pods if not stopped(p)]
        succeeded = [p for p in pods if phase_of(p) == "Succeeded"]
        failed = [p for p in pods if phase_of(p) == "Failed"]
        busy = [p for p in alive if (r := self.runner(p["metadata"]["name"])) is not None
                and r.busy]
        problems = []
        if failed:
            problems.append(f"failed pods left: {[p['metadata']['name'] for p in failed]}")
        if self.patch == 0 and len(alive) + len(succeeded) != max(self.replicas, len(busy)):
            problems.append(f"patch 0: {len(alive)} alive + {len(succeeded)} finished, "
                            f"replicas {self.replicas}, {len(busy)} busy")
        if self.patch > 0 and len(alive) + len(succeeded) < self.replicas:
            problems.append(f"{len(alive)} alive + {len(succeeded)} finished < replicas "
                            f"{self.replicas}")
        names = {p["metadata"]["name"] for p in pods}
        with h.github.lock:
            # (one made for labels the set no longer has all of is not known as the set's:
            # GitHub drops an ephemeral runner's offline registration after a day)
            leaked = sorted(r.name for r in h.github.runners.values() if r.name not in names
                            and set(self.labels) <= set(r.labels))
        if leaked:
            problems.append(f"registrations without a pod: {leaked}")
        secrets = [s["metadata"]["name"] for s in h.api.objects(
            "secrets", NS, label_selector=f"{LABEL_SET}={SET}")]
        orphans = sorted(set(secrets) - names)
        if orphans:
            problems.append(f"JIT Secrets without a pod: {orphans}")
        ready = next(c for c in h.status(SET)["conditions"] if c["type"] == "Ready")
        if ready["status"] != "True":
            problems.append(f"Ready {ready}")
        if problems:
            raise AssertionError("; ".join(problems) + "\n" + self.history())

    def history(self) -> str:
        return "\n".join(self.log[-60:])


PassMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
    derandomize=not HUNTING,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])
test_the_controller_pass_against_the_world = PassMachine.TestCase
