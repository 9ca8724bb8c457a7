"""The controller's Prometheus metrics, per RunnerSet (labels ``namespace`` and ``set``):
runners by state, desired, missing and unschedulable runners, creations, deletions, 422 refusals, API errors,
pass duration, leadership. Served at ``/metrics`` on the health port (``exposition``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gitscale.metrics import remove

if TYPE_CHECKING:
    from gitscale.controller.context import Report

RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
RUNNER_STATES = ("pending", "idle", "busy", "failed", "terminating")


class ControllerMetrics:
    """`gitscale controller`: per RunnerSet (labels ``namespace`` and ``set``)."""

    def __init__(self) -> None:
        reg = self.registry = CollectorRegistry()
        per_set = ["namespace", "set"]
        self.runners = Gauge("gitscale_controller_runners", "Runners of the set by state, "
                             "after its last pass", [*per_set, "state"], registry=reg)
        self.desired = Gauge("gitscale_controller_desired_replicas", "spec.replicas of the set",
                             per_set, registry=reg)
        self.missing = Gauge("gitscale_controller_runners_missing", "Slots of spec.replicas "
                             "with no runner at all (what Ready=False reports)", per_set,
                             registry=reg)
        self.unschedulable = Gauge("gitscale_controller_runners_unschedulable", "Pending "
                                   "runners whose pods the scheduler could not place "
                                   "(PodScheduled=False, Unschedulable), without Ready's grace",
                                   per_set, registry=reg)
        self.created = Counter("gitscale_controller_runner_creations", "Runners created",
                               per_set, registry=reg)
        self.deleted = Counter("gitscale_controller_runner_deletions", "Runners removed",
                               per_set, registry=reg)
        self.refusals = Counter("gitscale_controller_unregister_refusals", "Unregisters "
                                "refused because the runner still runs a job (GitHub's 422)",
                                per_set, registry=reg)
        self.api_errors = Counter("gitscale_controller_api_errors", "Kubernetes, GitHub or "
                                  "Buildkite calls of a pass that failed", per_set, registry=reg)
        self.last_duration = Gauge("gitscale_controller_last_reconcile_seconds", "Wall time of "
                                   "the set's last pass", per_set, registry=reg)
        self.duration = Histogram("gitscale_controller_reconcile_duration_seconds", "Wall time "
                                  "of a pass over one set", registry=reg,
                                  buckets=RECONCILE_BUCKETS)
        self.leader = Gauge("gitscale_controller_leader", "1 while this replica acts (holds the "
                            "Lease, or runs without leader election)", registry=reg)

    def reconciled(self, report: "Report", gone: bool) -> None:
        """One pass over a set; ``gone``: the set no longer exists (its series go too)."""
        namespace, _, name = report.key.partition("/")
        self.duration.observe(report.seconds)
        if gone:
            self._forget(namespace, name)
            return
        self.last_duration.labels(namespace, name).set(report.seconds)
        for counter, items in ((self.created, report.created), (self.deleted, report.deleted),
                               (self.refusals, report.busy)):
            counter.labels(namespace, name).inc(len(items))
        # (one error said for many runners alike counts each)
        self.api_errors.labels(namespace, name).inc(len(report.errors) + report.folded)
        counts = report.counts
        if counts is not None:
            for state in RUNNER_STATES:
                self.runners.labels(namespace, name, state).set(getattr(counts, state))
            self.desired.labels(namespace, name).set(counts.wanted)
            self.missing.labels(namespace, name).set(counts.short)
            self.unschedulable.labels(namespace, name).set(report.unschedulable)

    def leading(self, acting: bool, keys: Iterable[str] = ()) -> None:
        """Leadership changed. A replica that stops acting drops its per-set gauges: the new
        leader reports them, and two replicas must not both claim a set's runners."""
        self.leader.set(1 if acting else 0)
        if not acting:
            for key in keys:
                namespace, _, name = key.partition("/")
                for gauge in (self.desired, self.missing, self.unschedulable,
                              self.last_duration):
                    remove(gauge, namespace, name)
                for state in RUNNER_STATES:
                    remove(self.runners, namespace, name, state)

    def _forget(self, namespace: str, name: str) -> None:
        for metric in (self.desired, self.missing, self.unschedulable, self.last_duration,
                       self.created, self.deleted, self.refusals, self.api_errors):
            remove(metric, namespace, name)
        for state in RUNNER_STATES:
            remove(self.runners, namespace, name, state)
