"""GitHub's rate limit and the runner list: one list for the sets of one Secret and scope,
read when a pass needs it — every 15 s for a decision that may remove a running runner, every
60 s for status counts —, longer for a large org and while the limit runs low.

The controller runs against ``tests/kubeapi`` and the GitHub fake, with its platforms' clock
the harness clock (simulated seconds), so list ages are exact.
"""
from __future__ import annotations

from typing import Iterator

import pytest

from gitscale.controller.platforms import Platforms
from tests.controller.github_fake import FakeRunner
from tests.controller.harness import Harness, github_spec


@pytest.fixture
def steady(harness: Harness) -> Iterator[Harness]:
    """Three sets of one Secret and configURL, two runners each (one idle, one busy), patch
    1 (no pass may scale down); the platforms' lists age with the harness clock."""
    start = harness.clock.now
    kube = harness.controller.kube
    harness.controller.ctx.platforms = Platforms(
        kube.read_secret, clock=lambda: (harness.clock.now - start).total_seconds())
    for name in ("a", "b", "c"):
        harness.write(name, 2, 1, spec=github_spec(harness.github.url))
        harness.sync(name)
        idle, busy = harness.names(name)
        harness.running(idle)
        harness.running(busy, busy=True)
    yield harness


def lists(harness: Harness) -> int:
    return harness.github.count("GET", r"/actions/runners$")


def passes(harness: Harness, seconds: int, step: int = 10) -> None:
    """A pass for every set every ``step`` seconds (pod events, the resync)."""
    for _ in range(seconds // step):
        harness.clock.advance(step)
        for name in ("a", "b", "c"):
            harness.sync(name)


def test_status_counts_read_the_shared_list_once_a_minute(steady: Harness) -> None:
    """A pass per set every 10 s read the org's list every 15 s (each page a request): 720
    requests an hour for 400 runners, 24,000 for 100 sets of 100. Now one list serves the
    three sets, read once a minute for their counts."""
    passes(steady, 30)
    before = lists(steady)
    passes(steady, 600)
    assert lists(steady) - before == 10  # 10 minutes, a list each (they share it)
    status = steady.status("a")
    assert (status["idle"], status["busy"]) == (1, 1)


def test_a_scale_down_reads_a_list_at_most_15_s_old(steady: Harness) -> None:
    passes(steady, 30)
    steady.write("a", 1, 0)  # patch 0, one runner too many: which one is idle?
    before = lists(steady)
    steady.clock.advance(20)
    idle = [n for n in steady.names("a") if not steady.runner(n).busy]  # type: ignore[union-attr]
    report = steady.sync("a")
    assert lists(steady) - before == 1 and report.deleted == idle


def test_a_runner_past_its_registration_timeout_is_judged_on_a_fresh_list(
        steady: Harness) -> None:
    """It came online within the minute the status list may be old: a fresh list (15 s) says
    so, and it is not taken for one that never registered."""
    steady.write("a", 3, 2)
    (late,) = steady.sync("a").created
    steady.api.set_pod_phase("default", late, "Running", [
        {"name": "runner", "ready": True, "state": {"running": {}}}])
    passes(steady, 570)  # 9.5 minutes: GitHub has not seen it
    steady.github.set_state(late, online=True)  # online at last, at 9 min 50 s
    steady.clock.advance(20)
    report = steady.sync("a")
    assert report.deleted == [] and late in steady.names("a")


def test_a_large_org_list_is_read_less_often(steady: Harness) -> None:
    """The org's list costs a request per 100 runners, most of them not the controller's: a
    list of P pages is reused P × 3 s at least, so it costs at most 1,200 requests an hour."""
    with steady.github.lock:
        for n in range(3994):  # 4,000 runners in all: 40 pages, reused 2 minutes
            runner_id = next(steady.github.ids)
            steady.github.runners[runner_id] = FakeRunner(runner_id, f"vm-{n}", "orgs/acme",
                                                          ["windows"], 1, online=True)
    passes(steady, 120, step=30)  # (read once here, at its new size)
    before = steady.github.count("GET", r"/actions/runners")
    passes(steady, 600, step=30)
    assert steady.github.count("GET", r"/actions/runners") - before == 40 * 5


@pytest.mark.parametrize(("remaining", "lists_in_10_min"), [
    pytest.param(5000, 10, id="plenty: once a minute"),
    pytest.param(1000, 2, id="under a quarter left: every 4 minutes"),
    pytest.param(100, 0, id="under 5 % left: not before the limit refills"),
])
def test_lists_wait_longer_while_the_rate_limit_runs_low(
        steady: Harness, remaining: int, lists_in_10_min: int) -> None:
    """Registrations are what the limit is for: the list yields as it runs low."""
    steady.github.remaining = remaining
    passes(steady, 60)  # a list read with the budget in its headers
    before = lists(steady)
    passes(steady, 600)
    assert lists(steady) - before == lists_in_10_min
    assert steady.github.count("POST") == 6  # (the registrations all came before)
