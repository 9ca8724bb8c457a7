"""The reservations file in the config repo (default ``.gitscale/reservations.yaml``).

`gitscale serve` owns this file whole: it is rewritten, not edited, and committed with the
scaling change it caused, so reservations survive restarts and review shows why a set grew.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from gitscale.config import safe_repo_path
from gitscale.core.reservations import Book, Reservation
from gitscale.errors import InputError
from gitscale.timeutil import format_time, parse_time
from gitscale.yamlread import load_documents

DEFAULT_PATH = ".gitscale/reservations.yaml"
HEADER = ("# Written by `gitscale serve`: capacity reservations from workflow_job webhooks.\n"
          "# One entry per job; removed when the job completes or the reservation expires.\n")


class ReservationsError(InputError):
    pass


def read_books(root: Path, rel: str) -> tuple[str, dict[str, Book]]:
    """(file text, books by set). A missing file is an empty book."""
    # No symlink on the way: the file is written back, and must be the one that is committed.
    path = safe_repo_path(root, rel, "--state-file", ReservationsError)
    if not path.exists():
        return "", {}
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReservationsError(rel, f"cannot be read: {exc}") from None
    docs = [d for d in load_documents(text, rel, ReservationsError) if d.data is not None]
    if not docs:
        return text, {}
    data = docs[0].data
    books: dict[str, Book] = {}
    try:
        for name, entry in (data.get("sets") or {}).items():
            books[str(name)] = Book(
                tuple(Reservation(int(r["job"]), bool(r["running"]), _time(r["created"]),
                                  _time(r["expires"])) for r in entry.get("reservations") or []),
                tuple((int(c["job"]), _time(c["until"])) for c in entry.get("completed") or []),
            )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ReservationsError(rel, f"not a reservations file gitscale wrote ({exc}); fix or "
                                "delete it (reservations are rebuilt from new events)") from None
    return text, books


def _time(value: Any) -> datetime:
    if isinstance(value, datetime) and value.tzinfo is None:
        raise ValueError(f"{value} has no UTC offset")  # compared with an aware clock later
    return value if isinstance(value, datetime) else parse_time(str(value))


def render_books(books: dict[str, Book]) -> str:
    data: dict[str, Any] = {"sets": {}}
    for name in sorted(books):
        book = books[name]
        if not book.reservations and not book.completed:
            continue
        data["sets"][name] = {
            "reservations": [{"job": r.job, "running": r.running, "created": format_time(r.created),
                              "expires": format_time(r.expires)} for r in book.reservations],
            "completed": [{"job": job, "until": format_time(until)}
                          for job, until in book.completed],
        }
    return HEADER + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
