"""A pass that read its set from a cache older than the API server, through the real
``kubernetes`` client against the local API server: Argo CD applied a write the watch has not
brought yet (the watch down, or just late). No runner is removed on the old version, and a
conflict reads the set once, so the next pass acts on the new version without waiting for
the watch.

(r, p) is a spec write of replicas r and patch ID p.
"""
from __future__ import annotations

import threading

from gitscale.controller.context import Report
from tests.controller.harness import NS, Harness
from tests.helpers import wait_for

KEY = f"{NS}/rs"


def idle_runners(harness: Harness, count: int) -> None:
    """The set written (count, 0), its runners made, running and idle."""
    harness.write("rs", count, 0)
    harness.sync("rs")
    for name in harness.names("rs"):
        harness.running(name)
    harness.sync("rs")


def watch_down(harness: Harness) -> threading.Event:
    """The RunnerSet watch stops: its stream ends, and the informer's next watch is held
    without an answer (a black-holed request) until the returned event is set. The informer
    does not list again meanwhile (it waits for its watch), so the cache keeps what it had."""
    held = threading.Event()

    def watching(verb: str, resource: str, query: dict[str, str]) -> None:
        if verb == "watch" and resource.startswith("runnersets"):
            held.set()

    harness.api.on_call(watching)
    release = harness.api.hang("watch", "runnersets")
    harness.api.drop_watches()
    wait_for(held.is_set, 5)
    return release


def run(harness: Harness) -> Report:
    """One pass now, on whatever the cache holds (``Harness.sync`` would wait for the cache to
    hold what the server holds, which it does not while the watch is down)."""
    report = harness.controller.reconcile(KEY)
    assert harness.controller.events.flush(5)
    return report


def cached_spec(harness: Harness) -> dict[str, object]:
    obj = harness.controller.runnersets.get(KEY)
    assert obj is not None
    return dict(obj["spec"])


def conflicts(harness: Harness) -> list[str]:
    return [line for line in harness.api.log if line.endswith("409")]


def test_a_scale_down_read_from_a_stale_cache_removes_no_runner(harness: Harness) -> None:
    """The cache says (2, 0): two of the four idle runners are surplus. Argo CD has just
    applied (10, 0), which the watch has not brought. The pass confirms the version before
    removing anything (one read of the set): written since, so it stops as on a 409 —
    nothing unregistered, no pod deleted, no error — and the version read is in the cache,
    so the next pass, with the watch still down, makes the six runners missing."""
    harness.write("rs", 4, 0)
    assert len(harness.sync("rs").created) == 4
    names = harness.names("rs")
    for name in names:
        harness.running(name)
    harness.sync("rs")
    harness.write("rs", 2, 0)
    harness.catch_up()  # the cache has (2, 0); no pass has run on it
    watch_down(harness)
    harness.write("rs", 10, 0)
    harness.api.reset_calls()
    unregistered = harness.github.count("DELETE")

    report = run(harness)
    assert (report.deleted, report.created, report.errors) == ([], [], [])
    assert report.stale and report.requeue_after == 1.0 and report.error_retry is None
    assert harness.names("rs") == names and harness.pod_deletes() == []
    assert harness.github.count("DELETE") == unregistered
    assert harness.api.call_count("list", "runnersets") == 1  # the one read
    assert conflicts(harness) == []
    assert cached_spec(harness)["replicas"] == 10
    assert harness.events("rs") and not [e for e in harness.events("rs")
                                         if e["type"] == "Warning"]

    report = run(harness)  # the watch still down
    assert len(report.created) == 6 and report.deleted == [] and not report.stale
    assert len(harness.names("rs")) == 10 and set(names) <= set(harness.names("rs"))
    assert harness.status("rs")["replicas"] == 10
    assert conflicts(harness) == []


def test_a_scale_down_on_the_current_version_costs_one_read(harness: Harness) -> None:
    """The cache holds what the server holds: the pass reads the set once, finds the same
    version, and removes the surplus as before; a pass with nothing to remove reads nothing."""
    idle_runners(harness, 3)
    harness.write("rs", 1, 0)
    harness.api.reset_calls()
    report = harness.sync("rs")
    assert len(report.deleted) == 2 and not report.stale and report.errors == []
    assert harness.api.call_count("list", "runnersets") == 1
    assert len(harness.names("rs")) == 1
    harness.api.reset_calls()
    harness.clock.advance(60)
    report = harness.sync("rs")
    assert (report.deleted, report.created) == ([], [])
    assert harness.api.call_count("list", "runnersets") == 0


def test_a_pass_that_writes_before_it_removes_reads_nothing_more(harness: Harness) -> None:
    """A new write replaces finished runners (their markers go, new runners come): the
    `Creating` status, written on the version read before anything is created or removed,
    already confirms that version — no read of the set."""
    harness.write("rs", 2, 1)
    harness.sync("rs")
    first, second = harness.names("rs")
    harness.running(first, busy=True)
    harness.running(second, busy=True)
    harness.sync("rs")
    harness.clock.advance(60)
    harness.stop(first)
    harness.stop(second)
    harness.sync("rs")  # they mark their slots
    harness.clock.advance(60)
    harness.write("rs", 2, 2)
    harness.api.reset_calls()
    report = harness.sync("rs")
    assert sorted(report.deleted) == sorted((first, second)) and len(report.created) == 2
    assert harness.api.call_count("list", "runnersets") == 0
    assert harness.api.call_count("patch", "runnersets/status") == 2  # Creating, then the end


def test_after_a_conflict_the_next_pass_acts_on_the_new_spec_while_the_watch_is_down(
        harness: Harness) -> None:
    """The watch is down while Argo CD applies (5, 2). A pass on the cached (3, 1) writes its
    status (a runner came online) on the version it read: a 409. It reads the set once and
    puts the version read in the cache, so the next pass — the watch still down, for up to
    its 30 s backoff — makes the two runners of (5, 2) at once, instead of meeting the same
    409 every second until the watch comes back."""
    harness.write("rs", 3, 1)
    assert len(harness.sync("rs").created) == 3
    release = watch_down(harness)
    harness.running(harness.names("rs")[0])
    wait_for(lambda: any((p["status"] or {}).get("phase") == "Running"
                         for p in harness.controller.pods.group(KEY)), 5)
    harness.write("rs", 5, 2)
    harness.api.reset_calls()

    report = run(harness)
    assert (report.created, report.deleted, report.errors) == ([], [], [])
    assert report.stale and report.requeue_after == 1.0 and report.error_retry is None
    assert len(conflicts(harness)) == 1
    assert harness.api.call_count("list", "runnersets") == 1  # read once, after the 409
    assert cached_spec(harness)["patchID"] == 2

    report = run(harness)
    assert len(report.created) == 2 and not report.stale and report.errors == []
    assert len(conflicts(harness)) == 1 and harness.api.call_count("list", "runnersets") == 1
    status = harness.status("rs")
    assert (status["appliedPatchID"], status["replicas"], status["idle"]) == (2, 5, 1)
    assert not release.is_set()  # all of it with the watch still down


def test_runners_are_not_unregistered_for_settings_the_set_no_longer_has(
        harness: Harness) -> None:
    """The cache has new labels (its runners outdated: each idle one would be unregistered
    before its successor is made), but a human has already put the old ones back, which the
    watch has not brought. No runner is unregistered or deleted; the next pass, on the version
    read, finds its runners current."""
    harness.write("rs", 2, 1)
    harness.sync("rs")
    names = harness.names("rs")
    for name in names:
        harness.running(name)
    harness.sync("rs")
    old = harness.api.get_object("runnersets", "rs", NS)
    assert old is not None
    labels = old["spec"]["github"].get("labels")
    harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"]["github"].update(
        labels=["linux", "x64"]), NS)
    harness.catch_up()
    watch_down(harness)
    harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"]["github"].update(
        labels=labels), NS)
    unregistered = harness.github.count("DELETE")

    report = run(harness)
    assert (report.deleted, report.created, report.busy, report.errors) == ([], [], [], [])
    assert report.stale and harness.github.count("DELETE") == unregistered
    assert harness.names("rs") == names and harness.pod_deletes() == []

    report = run(harness)
    assert (report.deleted, report.created, report.errors, report.stale) == ([], [], [], False)
    assert harness.names("rs") == names


def test_a_scale_down_whose_version_cannot_be_read_removes_nothing(harness: Harness) -> None:
    """The read that confirms the version fails (a 500): no runner is removed on a version not
    known to hold; the pass is an error, tried again, and the next removes the surplus."""
    idle_runners(harness, 2)
    harness.write("rs", 1, 0)
    harness.api.inject_error("list", "runnersets", code=500)
    report = harness.sync("rs")
    assert report.deleted == [] and report.error_retry is not None
    assert any("no runner removed" in e for e in report.errors)
    assert len(harness.names("rs")) == 2 and harness.pod_deletes() == []
    report = harness.sync("rs")
    assert len(report.deleted) == 1 and report.errors == []
