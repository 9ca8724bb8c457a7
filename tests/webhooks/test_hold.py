"""`serve --hold`: a batch that changes only the reservations file is held, not committed, and
lands with the next scaling commit, at the hold's limit, or at a stop (``batch_plan`` with a
``Hold``, in a tmp dir: what `Batch` lands is what these plans say)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gitscale.core.reservations import Action
from gitscale.plan.cache import StateCache
from gitscale.plan.engine import Plan
from gitscale.webhooks.batch import batch_plan
from gitscale.webhooks.delivery import JobEvent
from gitscale.webhooks.hold import Hold
from gitscale.webhooks.reservations_file import parse_state
from gitscale.webhooks.resync import Listing
from tests.helpers import RUNNERSET


@pytest.fixture(autouse=True)
def _no_still_waiting_reaffirm(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about what serve holds and commits of its reservations alone. A job
    queued for more than 10 minutes with its runner counted is also re-affirmed for by the
    scaling rule (``core.still_waiting``: a commit 10, 20, 40... minutes after the last,
    which carries what is held; tested in tests/plan/test_still_waiting.py): out of the way
    here."""
    import gitscale.core.still_waiting as still_waiting

    monkeypatch.setattr(still_waiting, "STILL_WAITING", timedelta(days=1))
    monkeypatch.setattr(still_waiting, "STILL_WAITING_MAX", timedelta(days=1))

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
STATE = ".gitscale/reservations.yaml"
LIMIT = timedelta(minutes=5)
CONFIG = ("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
          "    source: {github: {org: octo-org, labels: [self-hosted, linux]}}\n"
          "    policy: {minReplicas: 0, maxReplicas: 2, scaleDownDelay: 0s}\n")


class Serve:
    """A serve's batches over a config repo in a tmp dir: each plan's files written as its
    commit would write them, and the hold applied as `Batch` applies it once landed."""

    def __init__(self, root: Path, cache_dir: Path, limit: timedelta = LIMIT) -> None:
        self.root, self.cache = root, StateCache.load(cache_dir)
        (root / "sets").mkdir(parents=True)
        (root / "sets/linux.yaml").write_text(RUNNERSET.format(name="linux", replicas=0))
        (root / "gitscale.yaml").write_text(CONFIG)
        self.hold = Hold(limit)
        self.commits: list[Plan] = []

    def batch(self, now: datetime, *events: tuple[int, Action], final: bool = False,
              listed: dict[int, bool] | None = None, expire: bool = True) -> Plan:
        """``listed``: a resync's listing of linux's jobs (job → running), polled just now."""
        self.hold.final = final
        listing = None if listed is None else Listing(now, {"linux": listed})
        plan = batch_plan(self.root, "base", "gitscale.yaml",
                          [JobEvent(job, action, ("self-hosted", "linux"), "octo-org/app",
                                    "octo-org", now) for job, action in events],
                          now, timedelta(minutes=10), STATE, self.cache, listing, hold=self.hold,
                          expire=expire)
        for rel, (_, new) in plan.files.items():
            (self.root / rel).parent.mkdir(exist_ok=True)
            (self.root / rel).write_text(new)
        self.cache.apply(plan.cache_writes)
        self.hold.landed()
        if plan.changed_paths:
            self.commits.append(plan)
        return plan

    def expiries(self) -> dict[int, datetime]:
        """job → expires, as the reservations file in the repo says."""
        state = parse_state((self.root / STATE).read_text(), STATE)
        return {r.job: r.expires for r in state.books["linux"].reservations}

    def committed(self) -> dict[int, bool]:
        """job → running, as the reservations file in the repo says."""
        state = parse_state((self.root / STATE).read_text(), STATE)
        return {r.job: r.running for r in state.books["linux"].reservations}

    def replicas(self) -> int:
        return int(yaml.safe_load((self.root / "sets/linux.yaml").read_text())["spec"]["replicas"])


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    return Serve(tmp_path / "config", tmp_path / "cache")


def test_a_change_to_the_reservations_alone_is_held_and_lands_with_the_next_scaling(
        serve: Serve) -> None:
    serve.batch(T0, (1, Action.QUEUED))  # 0 → 1: committed with its reservation
    assert serve.replicas() == 1 and serve.committed() == {1: False}
    started = serve.batch(T0 + timedelta(seconds=10), (1, Action.IN_PROGRESS))
    assert started.files == {} and started.events == {"in_progress": 1}
    assert serve.committed() == {1: False}, "held, not written"
    assert serve.hold.held is not None and serve.hold.held.since == T0 + timedelta(seconds=10)
    # the next batch starts from what is held: job 1 stays running when job 2 scales up
    grew = serve.batch(T0 + timedelta(seconds=20), (2, Action.QUEUED))
    assert serve.replicas() == 2 and serve.committed() == {1: True, 2: False}
    assert grew.events == {"in_progress": 1, "queued": 1}, "the held batch's events, counted"
    assert serve.hold.held is None and len(serve.commits) == 2


def test_saturated_events_are_held_until_the_limit(serve: Serve) -> None:
    """Five jobs at a max of 2: one write (replicas 2, a backlog of 3 the controller refills
    by itself); the jobs starting and completing after it change the reservations only."""
    serve.batch(T0, *((job, Action.QUEUED) for job in range(1, 6)))
    steps = [(1, Action.IN_PROGRESS), (2, Action.IN_PROGRESS), (1, Action.COMPLETED),
             (3, Action.IN_PROGRESS), (2, Action.COMPLETED), (4, Action.IN_PROGRESS)]
    for i, event in enumerate(steps):
        serve.batch(T0 + timedelta(seconds=30 * (i + 1)), event)
    assert len(serve.commits) == 1 and serve.replicas() == 2
    assert serve.committed() == dict.fromkeys(range(1, 6), False), "as the write left them"
    assert serve.hold.held is not None and serve.hold.held.since == T0 + timedelta(seconds=30)
    limit = serve.batch(T0 + timedelta(seconds=30) + LIMIT)  # no event: the limit is reached
    assert limit.changed_paths == [STATE] and len(serve.commits) == 2
    assert serve.committed() == {3: True, 4: True, 5: False}
    assert limit.events == {"in_progress": 4, "completed": 2}, "every held event, counted"
    assert serve.hold.held is None


def test_a_stop_commits_what_is_held(serve: Serve) -> None:
    serve.batch(T0, (1, Action.QUEUED))
    serve.batch(T0 + timedelta(seconds=10), (1, Action.IN_PROGRESS))
    last = serve.batch(T0 + timedelta(seconds=11), final=True)
    assert last.changed_paths == [STATE] and serve.committed() == {1: True}
    assert last.events == {"in_progress": 1}
    assert serve.hold.held is None and serve.hold.final is False


def test_hold_0_commits_every_change(tmp_path: Path) -> None:
    serve = Serve(tmp_path / "config", tmp_path / "cache", limit=timedelta(0))
    serve.batch(T0, (1, Action.QUEUED))
    started = serve.batch(T0 + timedelta(seconds=10), (1, Action.IN_PROGRESS))
    assert started.changed_paths == [STATE] and serve.committed() == {1: True}
    assert serve.hold.held is None


def test_a_file_changed_in_the_repo_drops_what_is_held(serve: Serve) -> None:
    """Someone deleted the file (or another serve wrote it): serve goes on from the repo's,
    and says so (`Batch` logs ``hold.dropped``)."""
    serve.batch(T0, (1, Action.QUEUED))
    serve.batch(T0 + timedelta(seconds=10), (1, Action.IN_PROGRESS))
    (serve.root / STATE).unlink()
    plan = serve.batch(T0 + timedelta(seconds=20), (2, Action.QUEUED))
    assert serve.hold.dropped is not None and serve.hold.dropped.events == {"in_progress": 1}
    assert serve.committed() == {2: False}, "job 1's held reservation went with the file"
    assert plan.events == {"queued": 1}


def test_a_batch_that_changes_nothing_keeps_what_is_held(serve: Serve) -> None:
    serve.batch(T0, (1, Action.QUEUED))
    serve.batch(T0 + timedelta(seconds=10), (1, Action.IN_PROGRESS))
    held = serve.hold.held
    quiet = serve.batch(T0 + timedelta(seconds=70))  # the minute's batch, no event
    assert quiet.files == {} and serve.hold.held == held, "the same hold, its time kept"


def long_queued(serve: Serve, minutes: int, *, final: bool = False) -> None:
    """Job 1 queued at T0 (0 → 1, committed) and still queued ``minutes`` later: a batch
    every minute, a resync every 5 that lists it (the last batch ``final``: a stop)."""
    serve.batch(T0, (1, Action.QUEUED))
    for minute in range(1, minutes + 1):
        serve.batch(T0 + timedelta(minutes=minute), final=final and minute == minutes,
                    listed={1: False} if minute % 5 == 0 else None)


@pytest.mark.parametrize("limit", [pytest.param(LIMIT, id="hold-5m"),
                                   pytest.param(timedelta(0), id="hold-0")])
def test_a_resyncs_renewals_alone_are_never_committed(tmp_path: Path, limit: timedelta) -> None:
    """A job queued for 45 minutes, longer than its reservation (10m): the resync that lists
    it renews its expiry, so it never expires (1 → 0, then 1 again at the next resync: two
    commits every 10 to 15 minutes); the renewals are held with no limit (nobody reads them:
    a restarted serve waits for its first resync), even with --hold 0."""
    serve = Serve(tmp_path / "config", tmp_path / "cache", limit=limit)
    long_queued(serve, 45)
    assert len(serve.commits) == 1 and serve.replicas() == 1
    assert serve.expiries() == {1: T0 + timedelta(minutes=10)}, "the file as first committed"
    assert serve.hold.held is not None and serve.hold.waiting() is None
    held = parse_state(serve.hold.held.text, STATE).books["linux"].reservations
    assert [(r.job, r.expires) for r in held] == [(1, T0 + timedelta(minutes=55))]


def test_a_stop_leaves_renewals_alone_uncommitted(serve: Serve) -> None:
    long_queued(serve, 15, final=True)
    assert len(serve.commits) == 1 and serve.expiries() == {1: T0 + timedelta(minutes=10)}


def test_renewals_land_with_the_next_commit(serve: Serve) -> None:
    long_queued(serve, 15)
    grew = serve.batch(T0 + timedelta(minutes=15, seconds=30), (2, Action.QUEUED))
    assert grew.changed_paths and serve.replicas() == 2 and len(serve.commits) == 2
    assert serve.expiries() == {1: T0 + timedelta(minutes=25),
                                2: T0 + timedelta(minutes=25, seconds=30)}
    assert grew.events == {"queued": 1}
    assert serve.hold.held is None


def test_a_held_change_keeps_its_limit_through_renewals(serve: Serve) -> None:
    """A job started (held at 10s) then a resync's renewal: the hold's clock is the
    start's, and at its limit the start lands with the renewal."""
    serve.batch(T0, (1, Action.QUEUED), (2, Action.QUEUED))
    serve.batch(T0 + timedelta(seconds=10), (1, Action.IN_PROGRESS))
    serve.batch(T0 + timedelta(minutes=1), listed={1: True, 2: False})
    assert serve.hold.waiting() == T0 + timedelta(seconds=10)
    landed = serve.batch(T0 + timedelta(seconds=10) + LIMIT)
    assert landed.changed_paths == [STATE] and serve.committed() == {1: True, 2: False}
    assert serve.expiries()[2] == T0 + timedelta(minutes=11)


def test_a_restart_expires_nothing_before_its_first_resync(serve: Serve) -> None:
    """Killed with renewals held: the file says job 1 expired at 10m. The restarted serve's
    batches before its first listing keep it (``expire=False``, ``Batch.expire``); that
    listing renews it."""
    long_queued(serve, 14)
    serve.hold = Hold(LIMIT)  # a new process: nothing held
    start = serve.batch(T0 + timedelta(minutes=16), expire=False)
    assert start.files == {} and serve.replicas() == 1
    serve.batch(T0 + timedelta(minutes=17), listed={1: False}, expire=False)
    serve.batch(T0 + timedelta(minutes=18))
    assert len(serve.commits) == 1 and serve.replicas() == 1
    assert serve.hold.held is not None and serve.hold.waiting() is None
    # without the wait, the start's batch scaled linux down and the resync up again
    serve.hold = Hold(LIMIT)
    serve.batch(T0 + timedelta(minutes=19))
    assert serve.replicas() == 0 and len(serve.commits) == 2
