"""A set of `gitscale serve` renamed with ``previousNames``: its reservations, its claim in
``served:`` (which `run` and `reconcile` honour) and a ``--set OLD`` go on under the new name;
without ``previousNames`` the reservations go, as for a removed set."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gitscale.config.load import load_config
from gitscale.core.reservations import Action
from gitscale.plan.cache import StateCache
from gitscale.webhooks.batch import batch_plan
from gitscale.webhooks.delivery import JobEvent
from gitscale.webhooks.reservations_file import ReservationsError, leave_served, parse_state
from gitscale.webhooks.served import Serving, pick
from tests.helpers import RUNNERSET

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
STATE = ".gitscale/reservations.yaml"


def config(name: str, previous: str = "") -> str:
    return (f"runnerSets:\n  - name: {name}\n{previous}    manifest: sets/linux.yaml\n"
            "    object: {kind: RunnerSet, name: linux}\n"
            "    source: {github: {org: octo-org, labels: [self-hosted, linux]}}\n"
            "    policy: {minReplicas: 0, maxReplicas: 5, scaleDownDelay: 0s}\n")


def batch(root: Path, cache: StateCache, now: datetime, *jobs: int) -> list[str]:
    """One batch of ``jobs`` queued, its files written as its commit would: its notes."""
    plan = batch_plan(root, "base", "gitscale.yaml",
                      [JobEvent(job, Action.QUEUED, ("self-hosted", "linux"), "octo-org/app",
                                "octo-org", now) for job in jobs],
                      now, timedelta(minutes=10), STATE, cache)
    for rel, (_, new) in plan.files.items():
        (root / rel).parent.mkdir(exist_ok=True)
        (root / rel).write_text(new)
    cache.apply(plan.cache_writes)
    return plan.notes


@pytest.mark.parametrize(("previous", "replicas", "books", "said"), [
    pytest.param("    previousNames: [linux]\n", 2, {"linux-x64": {1, 2}},
                 "linux is linux-x64 now (previousNames): its reservations kept",
                 id="declared: kept"),
    pytest.param("", 0, {}, "no longer: linux", id="not-declared: dropped"),
])
def test_a_renamed_set_keeps_its_reservations(tmp_path: Path, previous: str, replicas: int,
                                              books: dict[str, set[int]], said: str) -> None:
    root, cache = tmp_path / "config", StateCache.load(tmp_path / "cache")
    (root / "sets").mkdir(parents=True)
    (root / "sets/linux.yaml").write_text(RUNNERSET.format(name="linux", replicas=0))
    (root / "gitscale.yaml").write_text(config("linux"))
    batch(root, cache, T0, 1, 2)
    assert parse_state((root / STATE).read_text(), STATE).served == ("linux",)

    (root / "gitscale.yaml").write_text(config("linux-x64", previous))
    notes = batch(root, cache, T0 + timedelta(minutes=1))
    state = parse_state((root / STATE).read_text(), STATE)
    assert state.served == ("linux-x64",)
    assert {name: {r.job for r in book.reservations}
            for name, book in state.books.items() if book.reservations} == books
    assert yaml.safe_load((root / "sets/linux.yaml").read_text())["spec"]["replicas"] == replicas
    assert any(said in note for note in notes), notes


def test_run_leaves_a_set_served_under_its_previous_name_alone(tmp_path: Path) -> None:
    """Until serve's next batch writes the new name in ``served:``, the file names the old
    one: `run` and `reconcile` must not take the set over meanwhile."""
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets/linux.yaml").write_text(RUNNERSET.format(name="linux", replicas=0))
    (tmp_path / "gitscale.yaml").write_text(config("linux-x64", "    previousNames: [linux]\n"))
    (tmp_path / ".gitscale").mkdir()
    (tmp_path / STATE).write_text("served: [linux]\nsets: {}\n")
    left, why = leave_served(tmp_path, load_config(tmp_path))
    assert left.sets == ()
    assert why == {"linux-x64": "served by webhooks (`gitscale serve`, .gitscale/reservations"
                                ".yaml, as linux): left alone"}


@pytest.mark.parametrize(("names", "served", "unservable"), [
    pytest.param(["linux"], ("linux-x64",), {}, id="the-old-name"),
    pytest.param(["linux-x64"], ("linux-x64",), {}, id="the-new-name"),
    pytest.param(["linx"], (), {"linx": "not a runner set of gitscale.yaml"}, id="a-typo"),
])
def test_serve_set_may_name_a_previous_name(tmp_path: Path, names: list[str],
                                            served: tuple[str, ...],
                                            unservable: dict[str, str]) -> None:
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets/linux.yaml").write_text(RUNNERSET.format(name="linux", replicas=0))
    (tmp_path / "gitscale.yaml").write_text(config("linux-x64", "    previousNames: [linux]\n"))
    picked = pick(load_config(tmp_path), names)
    assert (picked.names, picked.unservable) == (served, unservable)


@pytest.mark.parametrize("names", [
    pytest.param(["linux-x64"], id="started-with-the-new-name"),
    pytest.param(["linux"], id="started-with-the-old-name"),
])
def test_a_claim_under_a_previous_name_is_another_serves(tmp_path: Path,
                                                         names: list[str]) -> None:
    """Another serve's file still claims the set as ``linux`` (its next batch writes the new
    name): a second serve of the renamed set would plan it from empty reservations, a
    scale-down while the first one's jobs wait. `run` and `reconcile` honour that claim
    (``leave_served``); a serve must too, as it does under the set's own name."""
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets/linux.yaml").write_text(RUNNERSET.format(name="linux", replicas=2))
    (tmp_path / "gitscale.yaml").write_text(config("linux-x64", "    previousNames: [linux]\n"))
    (tmp_path / ".gitscale").mkdir()
    (tmp_path / ".gitscale/first.yaml").write_text(
        "served: [linux]\nsets:\n  linux:\n    reservations:\n"
        "      - {job: 1, running: false, created: '2026-11-27T09:00:00Z', "
        "expires: '2026-11-27T09:10:00Z'}\n")
    with pytest.raises(ReservationsError) as raised:
        batch_plan(tmp_path, "base", "gitscale.yaml", [], T0, timedelta(minutes=10),
                   ".gitscale/second.yaml", StateCache(), serving=Serving(tuple(names)))
    assert "linux-x64 (as linux) already served by .gitscale/first.yaml" in str(raised.value)
    assert not (tmp_path / ".gitscale/second.yaml").exists()
