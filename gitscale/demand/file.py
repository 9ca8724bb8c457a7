"""The ``file`` source and ``--demand FILE``: ``set name → {queued, running, jobs}``.

``--demand`` may also be ``-`` (standard input) or a pipe (``--demand <(…)``, a FIFO named on
the command line): that is read once, when the command starts (``given``), and what it held is
kept — a pass that loses a push race and decides again, and `run`'s later passes, decide from
it; reading the pipe again would find it empty. A ``source: {file: …}`` of the config repo is
only ever a regular file (``files.read_bytes``).
"""
from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence


from gitscale import files
from gitscale.config.load import RunnerSetConfig, safe_repo_path
from gitscale.core.model import Demand
from gitscale.demand import DemandReading
from gitscale.errors import DemandError
from gitscale.config.schemas import check_schema
from gitscale.runnerset_api import JOB_LIMIT
from gitscale.yamlio.read import load_documents

if TYPE_CHECKING:
    from gitscale.demand.registry import Where
    from gitscale.config.sources import FileSettings



class MissingDemandFile(DemandError):
    """The demand file is not there, is a folder, or is named by a path that leaves the config
    repo: the config line that names it is to blame."""


STDIN = "-"  # --demand -
STDIN_LABEL = "--demand (stdin)"  # what its errors name


def parse_demand_file(path: Path, label: str) -> dict[str, Demand]:
    """Read and validate one demand file. Raises DemandError naming ``label`` and the line."""
    try:
        text = files.read_text(path, label, DemandError)
    except FileNotFoundError:
        raise MissingDemandFile(label, "demand file not found") from None
    except IsADirectoryError:
        raise MissingDemandFile(label, "is a directory, not a demand file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DemandError(label, f"cannot be read: {exc}") from None
    return parse_demand_text(text, label)


def parse_demand_text(text: str, label: str) -> dict[str, Demand]:
    """Validate the text of one demand file (or of standard input). Raises DemandError naming
    ``label`` and the line."""
    documents = [d for d in load_documents(text, label, DemandError) if d.data is not None]
    if len(documents) != 1:
        raise DemandError(label, "expected one YAML or JSON mapping of set name → "
                          "{queued, running, jobs}")
    document = documents[0]
    found = plain_demands(document.data)
    if found is not None:
        return found
    check_schema(document, "DEMAND", label, DemandError)  # the error, with its line
    data: dict[str, Any] = document.data
    return {
        name: Demand(
            queued=entry["queued"],
            running=entry["running"],
            jobs=frozenset(str(j) for j in entry["jobs"]) if "jobs" in entry else None,
        )
        for name, entry in data.items()
    }


_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # schemas.NAME, matched whole


def plain_demands(data: Any) -> dict[str, Demand] | None:
    """The demands of a mapping that schemas.DEMAND accepts, checked by hand while they are
    built: ten thousand entries in 20 ms rather than 300. Never more lenient than the schema:
    anything it is unsure of (floats, booleans, odd keys) returns None and the schema
    decides."""
    if type(data) is not dict:
        return None
    found: dict[str, Demand] = {}
    for name, entry in data.items():
        if type(name) is not str or len(name) > 63 or not _NAME.fullmatch(name) \
                or type(entry) is not dict:
            return None
        queued, running = entry.get("queued"), entry.get("running")
        if type(queued) is not int or type(running) is not int \
                or not 0 <= queued <= JOB_LIMIT or not 0 <= running <= JOB_LIMIT:
            return None
        if len(entry) == 2:
            found[name] = Demand(queued, running)
            continue
        jobs = entry.get("jobs")
        if len(entry) != 3 or type(jobs) is not list or len(jobs) > JOB_LIMIT \
                or not all(type(j) is str or type(j) is int for j in jobs):
            return None
        found[name] = Demand(queued, running, frozenset(str(j) for j in jobs))
    return found


@dataclass(frozen=True)
class Held:
    """What standard input or a pipe held, read once: its text (for an error's line) and the
    demands parsed from it."""

    text: str
    demands: dict[str, Demand]


class FileSource:
    """Demand from a file (read at every ``read``: an edit between `run`'s passes counts), or
    from what standard input or a pipe held (``Held``). ``strict`` (``--demand``) also rejects
    names that match no set."""

    def __init__(self, origin: Path | Held, label: str, *, strict: bool = False) -> None:
        self.origin = origin
        self.label = label
        self.strict = strict

    def read(self, sets: Sequence[RunnerSetConfig]) -> DemandReading:
        demands = self.origin.demands if isinstance(self.origin, Held) \
            else parse_demand_file(self.origin, self.label)
        if self.strict:
            known = {s.name for s in sets}
            unknown = [name for name in demands if name not in known]  # in the file's order
            if unknown:
                raise self._unknown(unknown, [s.name for s in sets])
        reading = DemandReading()
        missing = f"{self.label}: no entry for this set"
        for runner_set in sets:
            if runner_set.name in demands:
                reading.demands[runner_set.name] = demands[runner_set.name]
            else:
                reading.errors[runner_set.name] = missing
        if reading.errors and not self.strict:
            # (a set renamed in gitscale.yaml, the file still written with its old name)
            known = {s.name for s in sets}
            left = [name for name in demands if name not in known]
            if left:
                said = f"{missing} (the file's entries no set reading it takes: " \
                    f"{_some(left, len(left))}; a renamed set's old name?)"
                reading.errors = {name: said for name in reading.errors}
        return reading


    def _unknown(self, unknown: list[str], declared: list[str]) -> DemandError:
        """The error for names no set has (in the file's order), at the line of the first,
        each with the declared set it was probably meant to be (a typo, a renamed set's old
        name)."""
        import difflib  # (an error's only: a pass does not load it)

        shown = []
        for name in unknown[:10]:
            close = difflib.get_close_matches(name, declared, n=1)
            shown.append(f"{name} (did you mean {close[0]}?)" if close else name)
        said = ("a runner set" if len(unknown) == 1 else "runner sets")
        return DemandError(self.label, f"names {said} that gitscale.yaml does not declare: "
                           f"{_some(shown, len(unknown))}; gitscale.yaml declares "
                           f"{_some(declared)}", self._line(unknown[0]))

    def _line(self, name: str) -> int | None:
        """The line of ``name``'s entry (the file read again: only an error needs it)."""
        if isinstance(self.origin, Held):
            text = self.origin.text
        else:
            try:
                text = self.origin.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return None
        documents = [d for d in load_documents(text, self.label, DemandError)
                     if d.data is not None]
        return documents[0].key_line([], name) if documents else None


def _some(names: Sequence[str], count: int | None = None) -> str:
    """The first ten of ``names``, and how many more of ``count`` (default: all of them)."""
    more = (len(names) if count is None else count) - 10
    return ", ".join(names[:10]) + (f" and {more} more" if more > 0 else "")


def source(where: Where, settings: FileSettings) -> FileSource:
    """The registry's client factory: the file, inside the checkout the pass reads."""
    path = safe_repo_path(where.root, settings.path, "source.file", MissingDemandFile)
    return FileSource(path, settings.path)


def given(typed: str) -> FileSource:
    """``--demand`` as typed: ``-`` is standard input, a path to a pipe (``<(…)``'s
    ``/dev/fd/63``, a FIFO made with ``mkfifo``) is that pipe — either read now, once, to at
    most ``files.MAX_BYTES``, and parsed (a DemandError naming ``--demand (stdin)`` or the path
    as typed, with the line, as for a file) — and anything else is a file read at each pass
    (the path as typed names it in errors: ``demand file not found``)."""
    if typed == STDIN:
        if sys.stdin is None:  # closed at start (`<&-`): descriptor 0 may be another file now
            raise DemandError(STDIN_LABEL, "standard input is closed: pipe the demand into "
                              "gitscale, or give a file")
        return FileSource(_held(0, STDIN_LABEL), STDIN_LABEL, strict=True)
    path = Path(typed).expanduser()
    try:
        is_pipe = stat.S_ISFIFO(os.stat(path).st_mode)  # (through /dev/fd/N's link)
    except (OSError, ValueError):
        is_pipe = False  # not there (said when read, as for any file), or not a path at all
    if not is_pipe:
        return FileSource(path, typed, strict=True)
    try:  # a FIFO no one has opened yet waits for its writer here, as `cat` would
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise DemandError(typed, f"cannot be read: {exc.strerror}") from None
    try:
        return FileSource(_held(fd, typed), typed, strict=True)
    finally:
        os.close(fd)


def _held(fd: int, label: str) -> Held:
    """What ``fd`` holds, read to its end and parsed."""
    try:
        data = files.read_stream(fd, label, DemandError)
    except OSError as exc:  # (standard input closed, `<&-`; a read that failed)
        raise DemandError(label, f"cannot be read: {exc.strerror}") from None
    text = files.decode(data, label, DemandError)
    return Held(text, parse_demand_text(text, label))
