"""One batch of `gitscale serve`: the window's events (and a resync's listing, when one is due)
applied to the reservations file, and the webhook-fed sets planned from their reservations.

Without side effects on git or the state cache, like ``compute_plan``: `land` calls it again
after a push race, and applies the plan's cache writes.
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Mapping

from gitscale.plan.cache import StateCache
from gitscale.config.load import Config, load_config
from gitscale.core.forecast import Forecast
from gitscale.core.reservations import Book, Correction, Event, apply, resync, without_unseen
from gitscale.demand import DemandReading
from gitscale.plan.engine import Plan, compute_plan
from gitscale.webhooks.hold import Hold
from gitscale.webhooks.reservations_file import (ReservationsError, State, parse_state,
                                                 read_text, render)
from gitscale.webhooks.resync import Listing
from gitscale.webhooks.delivery import JobEvent, route, to_event
from gitscale.webhooks.served import Picked, Serving, check_claims, pick

# A reservation made less than this before a resync's poll started is kept even when the poll
# does not list its job: the API may show a job later than its webhook arrives.
GRACE = timedelta(minutes=1)


def batch_plan(root: Path, base: str, config_path: str, events: list[JobEvent], now: datetime,
               duration: timedelta, state_path: str, cache: StateCache,
               listing: Listing | None = None,
               corrected: dict[str, Correction] | None = None,
               forecasts: Callable[[Config], Mapping[str, Forecast]] | None = None,
               serving: Serving | None = None,
               unrouted: list[JobEvent] | None = None, hold: Hold | None = None,
               expire: bool = True) -> Plan:
    """Apply ``events`` and ``listing`` to the reservations in the repo and plan the sets
    this serve scales (``serving``: ``--set``, by default every webhook-fed set; what this
    batch picked is left in it). What the listing corrected, by set, goes to ``corrected``.
    ``forecasts``: the forecast sets' forecasts for the config (``gitscale.plan.forecasts``).
    The events of jobs no served set takes go to ``unrouted`` (they are not stored).
    ``hold``: the batch starts from the reservations serve holds, and a change to the file
    alone is held rather than committed (``gitscale.webhooks.hold``). ``expire`` False: no
    queued reservation expires, but by a resync (a restarted serve before its first one)."""
    config: Config = load_config(root, config_path, cache.configs)
    hold = hold if hold is not None else Hold()
    committed = read_text(root, state_path)
    text = hold.start(committed)
    # what serve holds was written from the committed file with the same `served:` (a change
    # to them is committed at once): only the books of the file in the repo may differ
    state = parse_state(text, state_path)
    serving = serving if serving is not None else Serving()
    picked = pick(config, serving.names)
    _check_owner(state, state_path, serving, picked)
    check_claims(root, state_path, picked.sets)
    serving.picked, serving.found = picked, state.served
    routed: dict[str, list[Event]] = {}
    counts: Counter[str] = Counter()
    nowhere = unrouted if unrouted is not None else []
    nowhere.clear()  # (`land` calls this again after a lost push race)
    for event in events:
        name = route(event, picked.sets)  # a job no served set takes is dropped here
        if name is not None:
            routed.setdefault(name, []).append(to_event(event, name))
            counts[event.action.value] += 1
        else:
            nowhere.append(event)
    reading = DemandReading()
    webhook_sets = picked.sets
    # A set removed from gitscale.yaml (or fed otherwise now, or no longer named by --set)
    # takes its reservations with it: nothing would ever expire them. A renamed one keeps
    # those of its previousNames (the file names it as it was until this batch writes it).
    books = {s.name: _book(state, s.names) for s in webhook_sets}
    corrections = corrected if corrected is not None else {}
    corrections.clear()
    renewed: dict[str, tuple[int, ...]] = {}
    for runner_set in webhook_sets:
        name = runner_set.name
        _, hi, _ = runner_set.policy.bounds(now)
        listed = listing is not None and listing.error is None and name in listing.jobs
        # with a listing, what expires is the resync's to say, once it renewed what it lists
        books[name] = apply(books[name], routed.get(name, []), now, duration, hi,
                            expire=expire and not listed)
        if listing is not None and listed:
            books[name], correction = resync(books[name], listing.jobs[name],
                                             listing.started - GRACE, now, duration, hi,
                                             complete=name not in listing.partial)
            renewed[name] = correction.renewed
            if correction:
                corrections[name] = correction
        reading.demands[name] = books[name].demand()
    names = {s.name for s in webhook_sets}
    plan = compute_plan(root, config, reading, now, base, only=names, cache=cache,
                        forecasts=forecasts(config) if forecasts is not None else None,
                        others=[s for s in config.sets if s.name not in names])
    new_text = render(books, sorted(names))
    recorded = hold.events(counts)
    notes = hold.notes([f"resync with GitHub, {name}: {correction.describe()}"
                        for name, correction in corrections.items()])
    if new_text != committed and (committed or names):
        scaling = bool(plan.changed_paths) or set(state.served) != names
        if not scaling and not recorded and not notes and text == committed \
                and _reads_as(committed, state.books, books, now):
            # Only completed jobs past their time left the file: it reads the same with them
            # (``apply`` and ``resync`` ignore a tombstone past its time), so neither a commit
            # nor a hold: at every restart after a completion, serve committed them
            plan.events = dict(counts)
            return plan
        carried = hold.carried()
        if not scaling and not corrections and (carried is None or carried.since is None) \
                and _reads_as(text, state.books, books, now, renewed):
            # Only a resync's renewals changed it (since the file, or renewals held already):
            # held with no limit, for the next commit made for anything else. A restart
            # renews them again before any expires (``expire``): committed, they were a
            # commit per resync while any job was queued or running.
            hold.renew(committed, new_text)
            plan.events = dict(counts)
            return plan
        if hold.keeps(now, scaling):
            hold.hold(committed, new_text, now, recorded, notes)
            plan.events = dict(counts)
            return plan
        plan.files[state_path] = (committed, new_text)
    plan.events = recorded
    plan.notes = notes
    if set(state.served) != names:
        renamed = {old: s.name for s in webhook_sets for old in s.previous_names
                   if old in state.served and s.name not in state.served}
        dropped = sorted(set(state.served) - names - renamed.keys())
        plan.notes.append(f"served by webhooks: {', '.join(sorted(names)) or 'none'} "
                          f"(`gitscale run` and `reconcile` leave them alone)"
                          + "".join(f"; {old} is {new} now (previousNames): its reservations "
                                    "kept" for old, new in sorted(renamed.items()))
                          + (f"; no longer: {', '.join(dropped)}" if dropped else ""))
    if state_path in plan.files and not recorded and not plan.changes and not plan.notes:
        # no event, no scaling: the commit says what changed in the file (a bare `gitscale:`)
        before = state if text == committed else parse_state(committed, state_path)
        plan.notes.append(_book_changes(before.books, books, state_path))
    return plan


def _book(state: State, names: tuple[str, ...]) -> Book:
    """A set's reservations: under its name, else under the first of its previous names the
    file has (written before the rename landed)."""
    return next((state.books[name] for name in names if name in state.books), Book())


def _check_owner(state: State, path: str, serving: Serving, picked: Picked) -> None:
    """This serve alone writes its file: a ``served:`` without a set its last batch wrote there
    (and that it still serves) was written by another serve — a second `gitscale serve` with
    other sets and the same --state-file, whose batches drop this one's reservations, and this
    one's its. A deleted file is written again."""
    if serving.claimed is None or not state.text:
        return
    lost = [name for name in serving.claimed if name in picked.names and name not in state.served]
    if not lost:
        return
    raise ReservationsError(
        path, f"another writer changed its `served:` to {', '.join(state.served) or 'none'}, "
        f"without {', '.join(lost)} that this serve scales: two `gitscale serve` with "
        "different sets must each have their own --state-file; this serve writes nothing "
        "until it is restarted with its own")


def _reads_as(text: str, before: Mapping[str, Book], after: Mapping[str, Book], now: datetime,
              renewed: Mapping[str, tuple[int, ...]] | None = None) -> bool:
    """``after`` is ``before`` (read from ``text``) but for what no reader tells apart (its
    tombstones past their time forgotten, the ``renewed`` reservations' expiry pushed on:
    ``without_unseen``, the rule ``simulate --serve`` counts commits by): written again with
    those tombstones and expiries, the file is ``text``."""
    kept = {}
    for name, book in after.items():
        found = without_unseen(book, before.get(name, Book()), now, (renewed or {}).get(name, ()))
        if found is None:
            return False
        kept[name] = found
    return render(kept, sorted(after)) == text


def _book_changes(before: Mapping[str, Book], after: Mapping[str, Book], path: str) -> str:
    """What a batch without events changed in the reservations: expiry, forgotten
    tombstones, or only the file's form (written by hand, or by another version)."""
    def reserved(books: Mapping[str, Book]) -> set[tuple[str, int]]:
        return {(name, r.job) for name, book in books.items() for r in book.reservations}

    def completed(books: Mapping[str, Book]) -> set[tuple[str, int]]:
        return {(name, job) for name, book in books.items() for job, _ in book.completed}

    expired = sorted(job for _, job in reserved(before) - reserved(after))
    forgotten = len(completed(before) - completed(after))
    said = []
    if expired:
        shown = ", ".join(map(str, expired[:10])) + (", …" if len(expired) > 10 else "")
        said.append(f"{len(expired)} reservation{'s' if len(expired) != 1 else ''} expired "
                    f"(job{'s' if len(expired) != 1 else ''} {shown})")
    if forgotten:
        said.append(f"{forgotten} completed job{'s' if forgotten != 1 else ''} forgotten")
    return "reservations: " + "; ".join(said) if said else f"rewrite {path} in gitscale's form"
