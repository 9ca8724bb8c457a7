"""The reservations file in the config repo (default ``.gitscale/reservations.yaml``).

`gitscale serve` owns this file whole: it is rewritten, not edited, and committed with the
scaling change it caused, so reservations survive restarts and review shows why a set grew.

It also says which sets serve scales (``served:``): `run`, `reconcile` and `plan` read every
``.gitscale/*.yaml`` and leave those sets alone, so the two modes never write against each other.
Deleting the file (with serve stopped) hands the sets back to polling.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitscale import files
from gitscale.config.load import Config, safe_repo_path
from gitscale.errors import InputError
from gitscale.timeutil import format_time, parse_time
from gitscale.yamlio.read import load_documents

if TYPE_CHECKING:
    from gitscale.core.reservations import Book

# Every pass calls leave_served; only `serve` reads and writes reservations, so their model
# (gitscale.core.reservations) and PyYAML's writer are imported by the functions that use them.

DIRECTORY = ".gitscale"
HEADER = ("# Written by `gitscale serve`: capacity reservations from workflow_job webhooks.\n"
          "# One reservation per job, removed when the job completes or the reservation\n"
          "# expires; the jobs completed lately, by batch, so that a late event is not counted.\n"
          "# `gitscale run` and `reconcile` leave the sets under `served` to serve: to hand them\n"
          "# back to polling, stop serve and delete this file.\n")


class ReservationsError(InputError):
    pass


@dataclass(frozen=True)
class State:
    text: str  # "" when there is no file
    books: dict[str, Book] = field(default_factory=dict)
    served: tuple[str, ...] = ()


def check_path(rel: str) -> None:
    """A state file directly under ``.gitscale/``, where `run` and `reconcile` look for it."""
    parts = rel.split("/")
    if len(parts) != 2 or parts[0] != DIRECTORY or not parts[1].endswith(".yaml") \
            or parts[1].startswith("."):
        raise ReservationsError("--state-file", f"{rel!r} must be a .yaml file directly under "
                                f"{DIRECTORY}/ (where `run` and `reconcile` look for the sets "
                                "serve scales)")


def read_state(root: Path, rel: str) -> State:
    """The file's text, books by set and served sets. A missing file is an empty state."""
    return parse_state(read_text(root, rel), rel)


def read_text(root: Path, rel: str) -> str:
    """The file's text, "" when there is none."""
    # No symlink on the way: the file is written back, and must be the one that is committed.
    path = safe_repo_path(root, rel, "--state-file", ReservationsError)
    return _read(path, rel) if path.exists() else ""


def parse_state(text: str, rel: str) -> State:
    """The state in ``text``, the file ``rel``'s (as read, or as serve holds it)."""
    from gitscale.core.reservations import Book, Reservation

    if not text:
        return State("")
    docs = [d for d in load_documents(text, rel, ReservationsError) if d.data is not None]
    if not docs:
        return State(text)
    data = docs[0].data
    books: dict[str, Book] = {}
    where: list[str | int] = []  # what is being read: its line is named in the error
    try:
        where = ["sets"]
        for name, entry in (data.get("sets") or {}).items():
            where = ["sets", name, "reservations"]
            reservations = []
            for index, r in enumerate(entry.get("reservations") or []):
                where = ["sets", name, "reservations", index]
                reservations.append(Reservation(_job(r["job"]), _running(r["running"]),
                                                _time(r["created"]), _time(r["expires"])))
            where = ["sets", name, "completed"]
            books[str(name)] = Book(tuple(reservations), _completed(entry.get("completed") or []))
        where = ["served"]
        served = _served(data)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        said = f"{exc} is missing" if isinstance(exc, KeyError) else str(exc)
        raise ReservationsError(rel, f"not a reservations file gitscale wrote ({said}); fix or "
                                "delete it (reservations are rebuilt from new events, and from "
                                "GitHub's list by the resync)", docs[0].line_of(where)) from None
    return State(text, books, served)


def _running(value: Any) -> bool:
    """``running: true|false`` (``bool("maybe")`` is True: a typo would hold a runner)."""
    if not isinstance(value, bool):
        raise TypeError(f"running: {str(value)[:24]!r} is not true or false")
    return value


def served_sets(root: Path, skip: str | None = None) -> dict[str, str]:
    """Set name → the file under ``.gitscale/`` that says `gitscale serve` scales it (``skip``:
    a file left out, a serve's own)."""
    directory = root / DIRECTORY
    if directory.is_symlink() or not directory.is_dir():
        return {}
    found: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        rel = f"{DIRECTORY}/{path.name}"
        if rel == skip or path.is_symlink() or not path.is_file():
            continue
        text = _read(path, rel)
        if "served" not in text:
            continue  # not a claim: no need to parse it
        for doc in load_documents(text, rel, ReservationsError):
            if isinstance(doc.data, dict) and "served" in doc.data:
                try:
                    names = _served(doc.data)
                except TypeError as exc:
                    raise ReservationsError(rel, str(exc), doc.line_of(["served"])) from None
                for name in names:
                    found.setdefault(name, rel)
    return found


def leave_served(root: Path, config: Config) -> tuple[Config, dict[str, str]]:
    """``config`` without the sets `gitscale serve` scales, and those sets with the reason."""
    served = served_sets(root)
    if not served:
        return config, {}
    # a renamed set is served under its old name until serve's next batch writes the new one
    left = {s.name: f"served by webhooks (`gitscale serve`, {served[name]}"
            f"{'' if name == s.name else f', as {name}'}): left alone"
            for s in config.sets
            for name in [next((n for n in s.names if n in served), None)] if name is not None}
    if not left:
        return config, {}
    return replace(config, sets=tuple(s for s in config.sets if s.name not in left)), left


def _read(path: Path, rel: str) -> str:
    """A state file's text: a regular file (a FIFO would be waited on for ever), UTF-8 (an
    error at the line of the first byte that is not)."""
    try:
        return files.read_text(path, rel, ReservationsError)
    except OSError as exc:
        raise ReservationsError(rel, f"cannot be read: {exc.strerror or type(exc).__name__}") \
            from None


def _served(data: Any) -> tuple[str, ...]:
    served = data.get("served") or []
    if not isinstance(served, list) or not all(isinstance(n, str) for n in served):
        raise TypeError("`served` must be a list of the set names `gitscale serve` scales")
    return tuple(served)


def _completed(entries: Any) -> tuple[tuple[int, datetime], ...]:
    """The tombstones: ``{until: T, jobs: [...]}`` per batch (what ``render`` writes), or
    ``{job: J, until: T}`` per job (the form of gitscale 0.1.0's first builds, still read)."""
    out: list[tuple[int, datetime]] = []
    for entry in entries:
        until = _time(entry["until"])
        jobs = entry["jobs"] if "jobs" in entry else [entry["job"]]
        if not isinstance(jobs, list):
            raise TypeError("`jobs` of a completed entry must be a list of job ids")
        out += [(_job(job), until) for job in jobs]
    return tuple(out)


def _job(value: Any) -> int:
    from gitscale.core.reservations import MAX_JOB_ID, is_job_id

    job = int(value)
    if not is_job_id(job):
        raise ValueError(f"job {str(job)[:24]}{'…' if len(str(job)) > 24 else ''} is not a "
                         f"GitHub job id (1 to {MAX_JOB_ID})")
    return job


def _time(value: Any) -> datetime:
    if isinstance(value, datetime) and value.tzinfo is None:
        raise ValueError(f"{value} has no UTC offset")  # compared with an aware clock later
    return value if isinstance(value, datetime) else parse_time(str(value))


def render(books: dict[str, Book], served: list[str]) -> str:
    from gitscale.yamlio.write import dump

    data: dict[str, Any] = {"served": sorted(served), "sets": {}}
    for name in sorted(books):
        book = books[name]
        if not book.reservations and not book.completed:
            continue
        data["sets"][name] = {
            "reservations": [{"job": r.job, "running": r.running, "created": format_time(r.created),
                              "expires": format_time(r.expires)} for r in book.reservations],
            # One entry per batch (its completions share their `until`), the job ids in a
            # flow list: 10 completions a second, kept 10 minutes, beside 50 reservations,
            # were 6,059 lines (342 KB) rewritten at every window; grouped, 839 (92 KB).
            "completed": [{"until": format_time(until), "jobs": sorted(jobs)}
                          for until, jobs in _by_until(book.completed)],
        }
    return HEADER + dump(data, default_flow_style=None, width=120)


def _by_until(completed: tuple[tuple[int, datetime], ...]) -> list[tuple[datetime, list[int]]]:
    groups: dict[datetime, list[int]] = {}
    for job, until in completed:
        groups.setdefault(until, []).append(job)
    return sorted(groups.items())
