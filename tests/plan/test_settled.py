"""Settled sets: a pass decides again only the sets whose config, manifest or demand changed,
or whose last answer's time ran out; and its answers are those of deciding every set anew."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gitscale.plan.cache import StateCache
from gitscale.config.load import load_config
from gitscale.core.model import Demand
from gitscale.demand import DemandReading
from gitscale.plan.engine import Plan, compute_plan
from gitscale.repo.git import Git
from gitscale.repo.index import Tree
from tests.helpers import RUNNERSET, git, make_repo, simple_config

NOW = datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc)
HELD = RUNNERSET.format(name="linux", replicas=5).replace(
    "metadata:\n  name: linux\n",
    "metadata:\n  name: linux\n  annotations:\n    gitscale.dev/last-scale-up: "
    "\"2026-11-21T09:00:00Z\"\n    gitscale.dev/jobs: abc\n").replace(
    "  replicas: 5\n", "  replicas: 5\n  patchID: 3\n")
QUIET = HELD.replace("patchID: 3", "patchID: 0")  # nothing to reset: left alone when idle

CONFIG = """\
runnerSets:
  - {name: a, manifest: sets/a.yaml, source: {file: demand.yaml},
     policy: {maxReplicas: 8, buffer: 1, scaleDownDelay: 5m}}
  - {name: b, manifest: sets/bc.yaml, object: {name: b}, source: {file: demand.yaml},
     policy: {maxReplicas: 6, scaleDownDelay: 10m}}
  - {name: c, manifest: sets/bc.yaml, object: {name: c}, source: {file: demand.yaml},
     policy: {minReplicas: 1, maxReplicas: 4}}
  - name: d
    manifest: sets/d.yaml
    source: {file: demand.yaml}
    policy:
      maxReplicas: 5
      scaleDownDelay: 2m
      schedules:
        - {name: day, start: '2026-11-21T09:10:00Z', duration: 20m, recurrence: FREQ=HOURLY,
           minReplicas: 2}
"""


def reading(demands: dict[str, Demand]) -> DemandReading:
    found = DemandReading()
    found.demands.update(demands)
    return found


def one_set(tmp_path: Path, manifest: str = HELD) -> tuple[Path, StateCache]:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{maxReplicas: 20, scaleDownDelay: 10m}"}),
        "sets/linux.yaml": manifest})
    return checkout, StateCache()


def plan_at(checkout: Path, cache: StateCache, demand: Demand | None, at: datetime) -> Plan:
    """A pass, and what it learnt applied to ``cache``, as the commands do."""
    plan = compute_plan(checkout, load_config(checkout, cache=cache.configs),
                        reading({"linux": demand} if demand else {}), at, "base", cache=cache,
                        tree=Tree.read(Git(checkout)))
    cache.apply(plan.cache_writes)
    return plan


def test_a_held_answer_is_remembered_until_the_delay_runs_out(tmp_path: Path) -> None:
    checkout, cache = one_set(tmp_path)
    low = Demand(0, 1)
    held = plan_at(checkout, cache, low, NOW + timedelta(minutes=1))
    assert not held.changes and "held until 2026-11-21T09:10:00" in held.unchanged[0][1].detail
    assert "linux" in cache.settled
    still = plan_at(checkout, cache, low, NOW + timedelta(minutes=9))
    assert still.unchanged == held.unchanged
    assert (cache.hits, cache.misses) == (0, 1)  # parsed once, then not even looked up
    later = plan_at(checkout, cache, low, NOW + timedelta(minutes=11))
    assert [c.decision.replicas for c in later.changes] == [1]
    assert "linux" not in cache.settled  # it writes: nothing to remember


def test_a_clock_that_goes_back_decides_again(tmp_path: Path) -> None:
    checkout, cache = one_set(tmp_path)
    plan_at(checkout, cache, Demand(0, 1), NOW + timedelta(minutes=30))  # settled, no delay
    hits = cache.hits
    plan_at(checkout, cache, Demand(0, 1), NOW + timedelta(minutes=5))
    assert cache.hits == hits + 1  # decided again from the manifest's state


def test_a_changed_policy_manifest_or_demand_is_decided_again(tmp_path: Path) -> None:
    checkout, cache = one_set(tmp_path, QUIET)
    at = NOW + timedelta(hours=1)
    first = plan_at(checkout, cache, Demand(0, 5), at)
    assert not first.changes and "linux" in cache.settled
    # the policy: max 20 → 3 (the same manifest and demand)
    (checkout / "gitscale.yaml").write_text(
        simple_config({"linux": "{maxReplicas: 3, scaleDownDelay: 10m}"}))
    capped = plan_at(checkout, cache, Demand(0, 5), at)
    assert [c.decision.replicas for c in capped.changes] == [3]
    (checkout / "gitscale.yaml").write_text(
        simple_config({"linux": "{maxReplicas: 20, scaleDownDelay: 10m}"}))
    assert not plan_at(checkout, cache, Demand(0, 5), at).changes
    # someone edits the manifest by hand
    (checkout / "sets/linux.yaml").write_text(QUIET.replace("replicas: 5", "replicas: 2"))
    git(checkout, "commit", "--quiet", "-am", "by hand")
    edited = plan_at(checkout, cache, Demand(0, 5), at)
    assert [c.decision.replicas for c in edited.changes] == [5]
    # demand that changes
    git(checkout, "checkout", "--quiet", "HEAD~1", "--", "sets/linux.yaml")
    git(checkout, "commit", "--quiet", "-am", "back")
    assert not plan_at(checkout, cache, Demand(0, 5), at).changes
    assert [c.decision.replicas for c in plan_at(checkout, cache, Demand(0, 9), at).changes] \
        == [9]


def test_the_settled_answers_survive_a_new_process(tmp_path: Path) -> None:
    checkout, _ = one_set(tmp_path, QUIET)
    cache = StateCache.load(tmp_path / "cache")
    at = NOW + timedelta(hours=1)
    first = plan_at(checkout, cache, Demand(0, 5), at)
    cache.save()
    fresh = StateCache.load(tmp_path / "cache")  # what the next CLI run does
    assert "linux" in fresh.settled
    second = plan_at(checkout, fresh, Demand(0, 5), at)
    assert second.unchanged == first.unchanged and (fresh.hits, fresh.misses) == (0, 0)


def _apply(checkout: Path, plan: Plan) -> None:
    for path, (_, new) in plan.files.items():
        (checkout / path).write_text(new)
    if plan.files:
        git(checkout, "commit", "--quiet", "-am", "pass")


def _repo(tmp_path: Path) -> Path:
    bc = RUNNERSET.format(name="b", replicas=1) + "---\n" + RUNNERSET.format(name="c",
                                                                              replicas=1)
    return make_repo(tmp_path, {"gitscale.yaml": CONFIG,
                                "sets/a.yaml": RUNNERSET.format(name="a", replicas=0),
                                "sets/bc.yaml": bc,
                                "sets/d.yaml": RUNNERSET.format(name="d", replicas=0)},
                     bare_remote=False)


demands = st.one_of(
    st.none(),
    st.builds(Demand, st.integers(0, 4), st.integers(0, 4)),
    st.sets(st.sampled_from("uvwxyz"), max_size=4).flatmap(
        lambda ids: st.builds(Demand, st.integers(0, len(ids)), st.just(0),
                              st.just(frozenset(ids)))).map(
        lambda d: Demand(d.queued, len(d.jobs or ()) - d.queued, d.jobs)),
)
SAME = "same"  # most passes see most sets' demand unchanged: that is what gets remembered
passes = st.lists(st.tuples(st.sampled_from([0, 10, 60, 240, 600, 1800]),  # seconds since
                            st.fixed_dictionaries({n: st.one_of(st.just(SAME), demands)
                                                   for n in "abcd"})),
                  min_size=2, max_size=8)


@example(passes=[  # held by the delay, then the same demand once it ran out: a scale-down
    (0, {"a": Demand(0, 6), "b": Demand(0, 5), "c": SAME, "d": Demand(0, 0)}),
    (60, {"a": Demand(0, 1), "b": Demand(0, 1), "c": SAME, "d": SAME}),
    (600, {"a": SAME, "b": SAME, "c": SAME, "d": SAME}),
    (1800, {"a": SAME, "b": SAME, "c": SAME, "d": SAME})])
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(passes=passes)
def test_settled_answers_are_those_of_deciding_anew(tmp_path_factory, passes) -> None:  # type: ignore[no-untyped-def]
    """Passes with random demand and clock steps over sets with a delay, a shared file and a
    schedule: with the remembered answers (saved and loaded between passes, as CLI runs do)
    every pass plans exactly what a pass that decides every set anew plans."""
    tmp_path = tmp_path_factory.mktemp("settled")
    checkout = _repo(tmp_path)
    at = NOW
    found: dict[str, Demand] = {}
    for step, drawn in passes:
        at += timedelta(seconds=step)
        ours = StateCache.load(tmp_path / "cache")
        anew = StateCache()
        anew.jobs = dict(ours.jobs)  # the same knowledge of job ids, none of the answers
        for name, demand in drawn.items():
            if demand is None:
                found.pop(name, None)
            elif demand != SAME:
                found[name] = demand
        config = load_config(checkout)
        tree = Tree.read(Git(checkout))
        plan = compute_plan(checkout, config, reading(found), at, "base", cache=ours, tree=tree)
        ours.apply(plan.cache_writes)
        expected = compute_plan(checkout, config, reading(found), at, "base", cache=anew,
                                tree=tree)
        assert plan.unchanged == expected.unchanged
        assert [(c.name, c.decision) for c in plan.changes] == \
            [(c.name, c.decision) for c in expected.changes]
        assert plan.files == expected.files
        ours.save()
        _apply(checkout, plan)


def test_a_set_pointed_at_a_settled_sets_object_is_refused(tmp_path: Path) -> None:
    """A day-two edit that points a second set at an object another set manages (a copied
    entry whose `object` was not changed) is refused even when the first set's answer is
    remembered: the remembered set is not looked up, and was the one check that saw both."""
    from gitscale.errors import InputError

    import pytest

    checkout = _repo(tmp_path)
    cache = StateCache()
    at = NOW + timedelta(hours=1)
    quiet = reading({n: Demand(0, 1) for n in "abcd"})
    first = compute_plan(checkout, load_config(checkout, cache=cache.configs), quiet, at, "base",
                         cache=cache, tree=Tree.read(Git(checkout)))
    cache.apply(first.cache_writes)
    _apply(checkout, first)
    second = compute_plan(checkout, load_config(checkout, cache=cache.configs), quiet, at,
                          "base", cache=cache, tree=Tree.read(Git(checkout)))
    cache.apply(second.cache_writes)
    assert "b" in cache.settled  # b's answer is remembered
    (checkout / "gitscale.yaml").write_text(CONFIG.replace("object: {name: c}",
                                                           "object: {name: b}"))
    git(checkout, "commit", "--quiet", "-am", "c copied from b")
    with pytest.raises(InputError) as refused:
        compute_plan(checkout, load_config(checkout, cache=cache.configs), quiet, at, "base",
                     cache=cache, tree=Tree.read(Git(checkout)))
    message = str(refused.value)
    assert "gitscale.yaml:6" in message and "'b'" in message and "'c'" in message, message
