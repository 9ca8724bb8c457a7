"""A progress bar on stderr for the few commands whose work can take more than a few seconds:
a first pass over thousands of sets, `simulate`, `history` on a large repo.

It is drawn only when stderr is a terminal, never into JSON output, and only once the work has
taken ``DELAY`` seconds (a quick run shows nothing, so the common case stays quiet). It is
erased when the work ends: what the command prints afterwards is the same as without it.
"""
from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import Callable, Iterable, Iterator, Sequence, TextIO, TypeVar

DELAY = 1.0  # seconds of work before the bar appears (GITSCALE_PROGRESS_DELAY overrides it)
REDRAW = 0.1  # seconds between redraws at most
WIDTH = 30
T = TypeVar("T")


def on_terminal(stream: TextIO) -> bool:
    """Whether a bar may be drawn on ``stream``: a terminal that can redraw a line."""
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class Progress:
    """``with Progress("passing", total) as bar: ... bar.advance()``; ``total`` None: a count
    without a bar. ``show`` False (e.g. `--output json`) draws nothing whatever the stream."""

    def __init__(self, label: str, total: int | None, *, show: bool = True,
                 stream: TextIO | None = None, delay: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.enabled = show and on_terminal(self.stream)
        self.label, self.total, self.done = label, total, 0
        self.clock, self.delay = clock, _delay() if delay is None else delay
        self.started = clock()
        self.drawn_at: float | None = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def if_shown(self) -> Progress | None:
        """Itself when it may be drawn, else None (the loops it would follow run as they are)."""
        return self if self.enabled else None

    def advance(self, steps: int = 1, label: str | None = None) -> None:
        self.done += steps
        if label is not None:
            self.label = label
        if not self.enabled:
            return
        now = self.clock()
        if now - self.started < self.delay:
            return
        if self.drawn_at is not None and now - self.drawn_at < REDRAW:
            return
        self.drawn_at = now
        self.stream.write("\r" + self.line() + "\x1b[K")
        self.stream.flush()

    def line(self) -> str:
        if not self.total:
            return f"{self.label}: {self.done:,}"
        share = min(self.done / self.total, 1.0)
        filled = int(share * WIDTH)
        return (f"{self.label} [{'#' * filled}{'-' * (WIDTH - filled)}] {share:4.0%} "
                f"{min(self.done, self.total):,}/{self.total:,}")

    def close(self) -> None:
        if self.drawn_at is not None:
            self.stream.write("\r\x1b[K")  # erased: the output that follows is unchanged
            self.stream.flush()
            self.drawn_at = None

    def phase(self, label: str, total: int | None) -> None:
        """The next stretch of the same work: the bar starts over under a new label (a bar
        already shown stays up; one not shown yet still waits for the same ``delay``)."""
        self.label, self.total, self.done = label, total, 0

    def each(self, items: Sequence[T], label: str | None = None) -> Iterator[T]:
        """``items``, advancing the bar as each is taken (with ``label``: as a new phase)."""
        if label is not None:
            self.phase(label, len(items))
        for item in items:
            yield item
            self.advance()


def steps(items: Sequence[T], progress: Progress | None, label: str) -> Iterable[T]:
    """``items`` as they are without ``progress``, else a phase of it: for loops that may or
    may not report."""
    return items if progress is None else progress.each(items, label)


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get("GITSCALE_PROGRESS_DELAY", DELAY)))
    except ValueError:
        return DELAY
