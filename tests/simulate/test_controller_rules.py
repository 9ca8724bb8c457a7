"""One table of controller passes, run against the pure decide() and against the model.

The simulator's cluster follows gitscale's controller by calling the same
``gitscale.controller.decide.decide``; these cases pin the rules themselves (patch gate, every
missing runner created at once, scale-down on patch 0 only with idle before pending and never a
busy runner, a runner that finished after effectiveTime holding its slot until a new spec, or
refilled from the write's backlog) and check that the model applies exactly the effects
decide() asks for.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from gitscale.controller.decide import Phase, Refilled, Runner, Spec, Write, decide, \
    refilled_after
from gitscale.simulate.model import Clock, Pod, Pool, controller_pass
from gitscale.simulate.trace import DEFAULT_START, Job

P, I, B, F = Phase.PENDING, Phase.IDLE, Phase.BUSY, Phase.FINISHED


def at(seconds: float | None):  # type: ignore[no-untyped-def]
    return None if seconds is None else DEFAULT_START + timedelta(seconds=seconds)


@dataclass(frozen=True)
class R:
    """A runner: name, phase, created (s), patch ID, its spec's effectiveTime (s), finished."""

    name: str
    phase: Phase
    created: float = 0
    patch: int = 1
    spec_at: float | None = 100
    finished: float | None = None


@dataclass(frozen=True)
class Case:
    spec: tuple[int, int, float]  # replicas, patch ID, effectiveTime (s)
    runners: tuple[R, ...]
    deletes: tuple[str, ...]  # in execution order
    create: int
    held: tuple[str, ...] = ()
    now: float = 200
    backlog: int = 0  # spec.backlog
    refilled: int = 0  # status.refilled before the pass, for this write
    refills: tuple[str, ...] = ()  # finished runners whose slots the backlog refills


CASES = {
    "a new spec creates every missing runner at once": Case((3, 1, 100), (), (), 3),
    "the spec already applied: the gate is shut, even with a finished runner": Case(
        (3, 1, 100), (R("r1", I, 110), R("r2", B, 110), R("r3", F, 110, finished=150)), (), 0),
    "a new patch clears runners finished before it and refills their slots": Case(
        (3, 2, 180), (R("r1", I, 110), R("r2", B, 110), R("r3", F, 110, finished=150)),
        ("r3",), 1),
    "finished after effectiveTime: the slot stays held (patch 0 always acts)": Case(
        (3, 0, 100), (R("r1", I, 100, 0), R("r2", B, 100, 0),
                      R("r3", F, 100, 0, finished=150)), (), 0, ("r3",)),
    "held only up to the missing count, oldest finished first": Case(
        (2, 0, 100), (R("r1", B, 100, 0), R("r2", F, 100, 0, finished=150),
                      R("r3", F, 100, 0, finished=160)), ("r3",), 0, ("r2",)),
    "patch > 0 never scales down": Case(
        (1, 5, 180), (R("i1", I, 50, 4), R("i2", I, 60, 4), R("p1", P, 150, 4)), (), 0),
    "patch 0 scales down: idle oldest first, then pending newest first, never busy": Case(
        (1, 0, 180), (R("i1", I, 50), R("i2", I, 40), R("p1", P, 150), R("p2", P, 160),
                      R("b1", B, 10)), ("i2", "i1", "p2", "p1"), 0),
    "patch 0 below the busy count removes only idle and pending": Case(
        (0, 0, 180), (R("b1", B, 10), R("b2", B, 20), R("i1", I, 30), R("p1", P, 150)),
        ("i1", "p1"), 0),
    "patch 0: finished runners go first, then the idle surplus": Case(
        (1, 0, 180), (R("i1", I, 50), R("i2", I, 60), R("f1", F, 40, finished=170)),
        ("f1", "i1"), 0),
    "the same patch number from an older write (after a restart) is a new write": Case(
        (2, 1, 190), (R("r1", I, 110, 1, 100),), (), 1),
    "creation times tie at 1 s: any tied runner of this write shuts the gate": Case(
        (2, 2, 150), (R("old", I, 150.2, 1, 100), R("new", P, 150.7, 2, 150)), (), 0),
    # (shut: the finished runner, done before the write, marks its slot; acting, it would go
    # and be replaced)
    "the newest runner, not the highest patch, decides the gate": Case(
        (3, 2, 150), (R("busy", B, 10, 7, 5), R("done", F, 20, 7, 5, finished=100),
                      R("new", P, 151, 2, 150)), (), 0),
    # (the gate shut, a slot with no runner and no marker is refilled: lost from outside)
    "gate shut: finished runners fewer than the missing slots all keep marking them": Case(
        (3, 1, 100), (R("r2", F, 110, finished=150), R("r3", F, 110, finished=160)), (), 1),
    "gate shut: every slot marked or filled, nothing created": Case(
        (3, 1, 100), (R("r1", B, 110), R("r2", F, 110, finished=150),
                      R("r3", F, 110, finished=160)), (), 0),
    "the backlog refills a slot freed after effectiveTime, without a new write": Case(
        (3, 1, 100), (R("r1", B, 110), R("r2", B, 110), R("r3", F, 110, finished=150)),
        ("r3",), 0, backlog=2, refills=("r3",)),
    "the backlog used up: the slot waits for the next write": Case(
        (3, 1, 100), (R("r1", B, 110), R("r2", B, 110), R("r3", F, 110, finished=150)),
        (), 0, backlog=2, refilled=2),
    "refills up to the backlog left, oldest finished first": Case(
        (3, 1, 100), (R("r1", B, 110), R("r2", F, 110, finished=150),
                      R("r3", F, 110, finished=160)),
        ("r2",), 0, backlog=3, refilled=2, refills=("r2",)),
    "a refill only takes a marker's slot: never beyond replicas": Case(
        (2, 1, 100), (R("r1", B, 110), R("r2", B, 110), R("r3", F, 110, finished=150)),
        ("r3",), 0, backlog=5),
    "a new write's backlog refills the slot it would hold, in its first pass": Case(
        (2, 1, 100), (R("r1", I, 50, 0, 50), R("r2", F, 50, 0, 50, finished=150)),
        ("r2",), 0, backlog=2, refills=("r2",)),
    "without a backlog that slot is held": Case(
        (2, 1, 100), (R("r1", I, 50, 0, 50), R("r2", F, 50, 0, 50, finished=150)),
        (), 0, ("r2",)),
    "the count of an earlier write does not use up a new one's backlog": Case(
        (2, 2, 180), (R("r1", B, 110), R("r2", F, 110, finished=190)),
        ("r2",), 0, backlog=1, refilled=-1, refills=("r2",)),
    "patch 0 with a backlog: its held slot is refilled": Case(
        (2, 0, 100), (R("r1", B, 110, 0), R("r2", F, 110, 0, finished=150)),
        ("r2",), 0, backlog=1, refills=("r2",)),
}


def spec_of(case: Case) -> Spec:
    replicas, patch, effective = case.spec
    return Spec(replicas, patch, at(effective), case.backlog)


def refilled_of(case: Case) -> Refilled:
    """What status says was refilled before the pass: ``case.refilled`` of the spec's write,
    or (-1) 5 of an earlier write."""
    if case.refilled < 0:
        return Refilled(Write(case.spec[1] - 1, at(100)), 5)
    return Refilled(spec_of(case).write, case.refilled)


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_decide(case: Case) -> None:
    runners = [Runner(r.name, r.patch, r.phase, finished_at=at(r.finished),
                      created_at=at(int(r.created)),  # creationTimestamp: 1 s resolution
                      spec_time=at(r.spec_at)) for r in case.runners]
    spec = spec_of(case)
    actions = decide(spec, runners, at(case.now), None, refilled_of(case))
    assert tuple(d.name for d in actions.deletes) == case.deletes
    assert (actions.create, actions.retries, actions.held) == (case.create, (), case.held)
    assert actions.refills == case.refills
    assert actions.create_patch_id == case.spec[1]
    after = refilled_after(spec, refilled_of(case), len(actions.refills))
    assert after.write == spec.write
    assert after.count == max(case.refilled, 0) + len(case.refills)
    assert after.count <= max(case.backlog, case.refilled)  # never beyond the backlog


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_model(case: Case) -> None:
    clock = Clock(DEFAULT_START)
    clock.run(case.now)
    pool = Pool(clock, "set", pod_start=45.0)
    for r in case.runners:
        pool.pods[r.name] = Pod(r.name, r.patch, at(r.spec_at), r.created, r.phase,
                                idle_since=r.created + 1 if r.phase is I else None,
                                finished_at=r.finished)
    pool.refilled = refilled_of(case)
    before = dict(pool.pods)
    controller_pass(pool, spec_of(case))
    assert sorted(set(before) - set(pool.pods)) == sorted(case.deletes)
    new = [pod for name, pod in pool.pods.items() if name not in before]
    assert len(new) == case.create + len(case.refills)
    assert pool.refilled == (refilled_after(spec_of(case), refilled_of(case), len(case.refills))
                             if case.refills else refilled_of(case))
    spec = spec_of(case)
    assert all((p.phase, p.created, p.patch_id, p.spec_time) ==
               (P, case.now, spec.patch_id, spec.effective_time) for p in new)
    assert all(pool.pods[name] is before[name] for name in case.held)
    # what is left is what decide() said the set holds after the pass
    live = [p for p in pool.pods.values() if p.phase in (P, I, B)]
    assert len(live) == sum(r.phase in (P, I, B) for r in case.runners) - \
        sum(r.phase is not F for r in case.runners if r.name in case.deletes) + case.create \
        + len(case.refills)
    assert len(live) <= case.spec[0] or not case.create + len(case.refills)


def test_a_slot_freed_after_effective_time_is_refilled_only_by_a_new_spec() -> None:
    """The same rule over time, with jobs running on the model's runners."""
    clock = Clock(DEFAULT_START)
    pool = Pool(clock, "set", pod_start=45.0)
    pool.on_change = lambda p: controller_pass(p, spec) if spec else None
    spec: Spec | None = None

    def write(replicas: int, patch: int) -> None:
        nonlocal spec
        spec = Spec(replicas, patch, clock.time(clock.now))
        controller_pass(pool, spec)

    clock.at(0, write, 2, 0)
    for job in (Job(0, "set", 50, 100), Job(1, "set", 60, 500), Job(2, "set", 200, 60)):
        clock.at(job.arrival, pool.arrive, job)
    clock.at(300, write, 2, 1)
    clock.run(299)
    # job 0's runner finished at 150, after the spec's effectiveTime (0): nothing refilled it,
    # so job 2 (at 200) still waits, although the spec says 2 and only 1 runner is busy
    assert pool.created == 2 and [j.id for j in pool.queue] == [2]
    assert sorted(p.phase.value for p in pool.pods.values()) == ["busy", "finished"]
    clock.run(400)
    # the write at 300 is newer than the finish: the finished runner is cleared, its slot
    # refilled, and job 2 starts when the new runner is ready (345)
    assert pool.created == 3 and pool.waits[2] == 145.0


# The controller reads times at 1 s resolution: a pod's ``finishedAt`` (Kubernetes' RFC 3339
# seconds) and the spec's ``effectiveTime`` (as gitscale writes it, and ARC's listener too): a
# runner that finished in the write's second counts as finished before it, and its slot is
# refilled by the pass that acts on the write. The model feeds decide() the same.
@pytest.mark.parametrize(("written", "finished", "held"), [
    pytest.param(100, 100.6, False, id="in-the-write's-second-refilled"),
    pytest.param(100.4, 100.9, False, id="a-fractional-write-same-second-refilled"),
    pytest.param(100, 99.5, False, id="before-the-write-refilled"),
    pytest.param(100, 101.0, True, id="the-next-second-held"),
    pytest.param(100.7, 101.2, True, id="a-fractional-write-next-second-held"),
])
def test_model_reads_times_at_1s_as_the_controller(written: float, finished: float,
                                                   held: bool) -> None:
    spec = Spec(2, 2, at(written))
    # what the controller reads from the API server: whole seconds
    seen = [Runner("b", 1, B, created_at=at(50), spec_time=at(50)),
            Runner("f", 1, F, finished_at=at(int(finished)), created_at=at(50),
                   spec_time=at(50))]
    actions = decide(Spec(2, 2, at(int(written))), seen, at(110))
    assert (actions.held, actions.create) == ((("f",), 0) if held else ((), 1))
    clock = Clock(DEFAULT_START)
    clock.run(110)
    pool = Pool(clock, "set", pod_start=45.0)
    pool.pods["b"] = Pod("b", 1, at(50), 50, B)
    pool.pods["f"] = Pod("f", 1, at(50), 50, F, finished_at=finished)
    controller_pass(pool, spec)
    assert ("f" in pool.pods) is held
    assert len(pool.pods) == 2  # held, or replaced by one new runner
