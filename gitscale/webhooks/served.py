"""Which runner sets one `gitscale serve` scales: those named by ``--set NAME`` (repeatable), or
by default every set whose source takes webhooks (``SOURCES[kind].webhooks``).

Deliveries are routed, the resync lists, the batch plans and the reservations file's
``served:`` names only these; `run`, `reconcile` and `plan` leave exactly the ``served:`` names
alone, so the other sets stay with the loop. A name that gitscale.yaml does not have, or whose
source takes no webhooks, is refused at start (``check``); one that disappears from a later
gitscale.yaml is skipped by each batch (``pick`` says why) until it comes back.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from gitscale.config.load import Config, RunnerSetConfig
from gitscale.config.sources import SOURCES
from gitscale.errors import InputError
from gitscale.webhooks.reservations_file import ReservationsError, served_sets


def takes_webhooks(runner_set: RunnerSetConfig) -> bool:
    return SOURCES[runner_set.source.kind].webhooks


@dataclass(frozen=True)
class Picked:
    """The sets a batch serves (gitscale.yaml order), and each ``--set`` name it cannot serve
    with why (not in gitscale.yaml, or fed by a source that takes no webhooks)."""

    sets: tuple[RunnerSetConfig, ...]
    unservable: dict[str, str]
    others: tuple[str, ...] = ()  # the webhook-fed sets not served: the loop's
    # the sets whose source takes no webhooks (a Buildkite queue, a demand file), as
    # ``name (kind)``: never served, always the loop's (`run`, `reconcile`)
    polled: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(s.name for s in self.sets))


@dataclass
class Serving:
    """One serve's sets across its batches: the ``--set`` names (None: every webhook-fed set),
    the ``served:`` its last landed batch wrote (None before), and what the last
    ``batch_plan`` picked and found in the file (``land`` may call it again after a race)."""

    names: tuple[str, ...] | None = None
    claimed: tuple[str, ...] | None = None
    picked: Picked | None = None
    found: tuple[str, ...] = ()


def pick(config: Config, names: Sequence[str] | None) -> Picked:
    """``names`` (``--set``; None: every set whose source takes webhooks) in ``config``."""
    webhook = tuple(s for s in config.sets if takes_webhooks(s))
    polled = tuple(f"{s.name} ({s.source.kind})" for s in config.sets if not takes_webhooks(s))
    if names is None:
        return Picked(webhook, {}, polled=polled)
    by_name = {s.name: s for s in config.sets}
    # a name a set had before (previousNames): a serve started with --set OLD goes on
    # serving the set after the rename lands
    renamed = {old: s for s in config.sets for old in s.previous_names}
    wanted: set[str] = set()
    unservable: dict[str, str] = {}
    for name in dict.fromkeys(names):
        found = by_name.get(name) or renamed.get(name)
        wanted.add(found.name if found is not None else name)
        if found is None:
            unservable[name] = f"not a runner set of {config.path}"
        elif not takes_webhooks(found):
            unservable[name] = (f"its source ({found.source.kind}) takes no webhooks: it is "
                                f"polled, by `gitscale run` or `reconcile` (beside serve); "
                                f"{_kinds()} sets do")
    return Picked(tuple(s for s in webhook if s.name in wanted), unservable,
                  tuple(s.name for s in webhook if s.name not in wanted), polled)


def check(config: Config, names: Sequence[str] | None) -> None:
    """``--set`` at start: every name a set whose source takes webhooks, or an error naming
    them and the sets that can be served."""
    unservable = pick(config, names).unservable
    if not unservable:
        return
    webhook = [s.name for s in config.sets if takes_webhooks(s)]
    known = (f"the sets of {config.path} with a {_kinds()} source: {', '.join(webhook)}"
             if webhook else f"{config.path} has no set with a {_kinds()} source")
    said = "; ".join(f"{name!r}: {why}" for name, why in unservable.items())
    raise InputError("--set", f"{said} ({known})")


def check_claims(root: Path, state_path: str, serving: Sequence[RunnerSetConfig]) -> None:
    """No other reservations file lists a set this serve scales under ``served:``, by its
    name or a ``previousNames`` (a file written before the rename, as ``leave_served`` reads
    it): two servers writing one set's replicas from two files would undo each other's
    reservations."""
    others = served_sets(root, skip=state_path)
    if not others:
        return
    claims = sorted((s.name, name) for s in serving
                    for name in [next((n for n in s.names if n in others), None)]
                    if name is not None)
    if claims:
        taken = [name if claim == name else f"{name} (as {claim})" for name, claim in claims]
        where = sorted({others[claim] for _, claim in claims})
        raise ReservationsError(
            "--state-file", f"{', '.join(taken)} already served by {', '.join(where)} (another "
            f"`gitscale serve`'s --state-file, listing it under `served:`): give each serve "
            f"its own --set, or delete that file in a commit if no serve uses it")


def _kinds() -> str:
    return "/".join(sorted(name for name, kind in SOURCES.items() if kind.webhooks))
