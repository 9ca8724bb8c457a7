"""The scaling commit: subject, a body line per set, and trailers that `history` parses.

    gitscale: linux-x64 3→5, gpu 2→0

    - linux-x64: demand 4 (queued 3, running 1) + buffer 1
    - gpu: demand 0 (queued 0, running 0)

    Gitscale-Set: linux-x64 replicas=5 previous=3 patch=12 queued=3 running=1 reason=scale-up
    Gitscale-Set: gpu replicas=0 previous=2 patch=0 queued=0 running=0 reason=scale-down
    Gitscale-Base: 1f0c3a9…
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from gitscale.runnerset_api import JOB_LIMIT

SUBJECT_SETS = 6
_FIELD = re.compile(r"(\w+)=(\S+)")


@dataclass(frozen=True)
class SetLine:
    """One set's entry in a scaling commit (what a Gitscale-Set trailer holds)."""

    name: str
    replicas: int
    previous: int | None
    patch: int | None
    queued: int | None
    running: int | None
    reason: str
    detail: str = ""

    def trailer(self) -> str:
        fields = [f"replicas={self.replicas}", f"previous={_n(self.previous)}",
                  f"patch={_n(self.patch)}", f"queued={_n(self.queued)}",
                  f"running={_n(self.running)}", f"reason={self.reason}"]
        return f"Gitscale-Set: {self.name} " + " ".join(fields)

    def summary(self) -> str:
        if self.previous is not None and self.previous != self.replicas:
            return f"{self.name} {self.previous}→{self.replicas}"
        return f"{self.name} {self.replicas} (patch {_n(self.patch)})"


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def format_message(lines: Sequence[SetLine], base: str,
                   events: Mapping[str, int] | None = None, notes: Sequence[str] = (),
                   files: Sequence[str] = ()) -> str:
    """The commit message. ``events`` (webhook mode) counts the deliveries recorded with it;
    ``notes`` are further body lines (webhook mode: what a resync corrected), the first of
    them the subject when nothing else is to say; with none of these the subject names the
    ``files`` the commit changes: never a bare ``gitscale:``."""
    shown = ", ".join(line.summary() for line in lines[:SUBJECT_SETS])
    if len(lines) > SUBJECT_SETS:
        shown += f" and {len(lines) - SUBJECT_SETS} more"
    body = [f"- {line.name}: {line.detail}" for line in lines]
    trailers = [line.trailer() for line in lines]
    if events:
        total = sum(events.values())
        counted = " ".join(f"{k}={v}" for k, v in sorted(events.items()))
        if not lines:
            shown = f"record {total} workflow_job event{'s' if total != 1 else ''}"
        body.append(f"- reservations updated from {total} workflow_job "
                    f"event{'s' if total != 1 else ''} ({counted})")
        trailers.append(f"Gitscale-Events: {counted}")
    if notes and not shown:
        shown = notes[0]
    if not shown:
        shown = "update " + (", ".join(files) if files else "files")
    body += [f"- {note}" for note in notes]
    return (f"gitscale: {shown}\n\n" + "\n".join(body) + "\n\n" + "\n".join(trailers)
            + f"\nGitscale-Base: {base}\n")


# A count of jobs above JOB_LIMIT is no demand gitscale wrote (a source's is refused above it):
# read as unknown, as a count that is no number is, so that a forecast or `simulate
# --from-history` does not take a hand-written queued=99999999 for a hundred million jobs.
_JOBS = r"(\d{1,%d}|%d|-)" % (len(str(JOB_LIMIT)) - 1, JOB_LIMIT)
WRITTEN = re.compile(r"(\S+) replicas=(\d{1,18}) previous=(\d{1,18}|-) patch=(\d{1,18}|-) "
                     f"queued={_JOBS} running={_JOBS} " r"reason=(\S+)")


def _int(raw: str) -> int | None:
    return None if raw == "-" else int(raw)


def parse_trailer(value: str, detail: str = "") -> SetLine | None:
    """Parse the value of one Gitscale-Set trailer; None if it is not ours."""
    written = WRITTEN.fullmatch(value.strip())
    if written:  # as gitscale writes it: read in one match
        name, replicas, previous, patch, queued, running, reason = written.groups()
        return SetLine(name, int(replicas), _int(previous), _int(patch), _int(queued),
                       _int(running), reason, detail)
    name, _, rest = value.strip().partition(" ")
    fields = dict(_FIELD.findall(rest))
    if not name or "replicas" not in fields:
        return None

    def num(key: str, most: int = 10**18 - 1) -> int | None:
        raw = fields.get(key, "-")
        return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 \
            and int(raw) <= most else None

    replicas = num("replicas")
    if replicas is None:
        return None
    return SetLine(name, replicas, num("previous"), num("patch"), num("queued", JOB_LIMIT),
                   num("running", JOB_LIMIT), fields.get("reason", "unknown"), detail)


def body_details(body: str) -> dict[str, str]:
    """``- name: detail`` lines of a commit body, by set name."""
    found: dict[str, str] = {}
    for name, detail in _DETAIL.findall(body):
        found.setdefault(name, detail.rstrip("\r"))
    return found


_DETAIL = re.compile(r"^- ([a-z0-9][-a-z0-9]*): (.*)$", re.MULTILINE)
