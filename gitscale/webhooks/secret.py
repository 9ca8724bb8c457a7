"""`serve`'s webhook secret through a rotation: the file's new value, and the old one a while.

When a webhook's secret is rotated, GitHub signs with the new secret as soon as it is saved
there, while the file ``serve`` reads may lag (a Kubernetes Secret volume catches up within a
minute or two) or lead (the file written first, GitHub's setting a few minutes later). A
delivery is accepted when it is signed with the current value of ``--secret-file`` (read again
when the file changes, ``config/rotating.py``) or, for ``GRACE`` seconds after the file
changed, with the value it held before. A delivery signed with neither makes the file be read
again (at most once every ``RECHECK`` seconds: a flood of bad signatures does not read it each
time) before it is refused: a rotation the file's stat does not show is still found.
A file that cannot be read for a while (it is being replaced) leaves the value read last in
use, said once. ``--secret-env``'s variable cannot change in a running process: one value,
until a restart — unless it is read through its ``_FILE`` (``GITHUB_WEBHOOK_SECRET_FILE``),
which is a file's secret like ``--secret-file``'s.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from gitscale.config.rotating import Rotating
from gitscale.config.secrets import SecretError
from gitscale.webhooks.delivery import Rejected, verify

GRACE = 600.0  # seconds the previous secret is still accepted after the file changed
RECHECK = 1.0  # seconds: a bad signature reads the file again at most this often


class WebhookSecret:
    """The secrets a delivery may be signed with. ``report`` is told once per change (the
    file, never a value)."""

    def __init__(self, ref: Any, *, report: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.secret = Rotating(ref, "webhook secret", clock=clock, report=(
            None if report is None else lambda line: report(
                f"{line} (deliveries signed with the previous one are accepted for "
                f"{GRACE / 60:g} more minutes)")))
        self._report = report
        self._rechecked = float("-inf")
        self._failing = ""  # what reading the file said last, when it failed

    def check(self) -> None:
        """Read it now: one that cannot be read stops ``serve`` before it listens."""
        self.secret.get()

    def accepted(self) -> list[bytes]:
        """The current value, and the previous one while its grace lasts."""
        found = [self._current().encode()]
        changed, previous = self.secret.changed_at, self.secret.previous
        if previous is not None and changed is not None and self._clock() - changed < GRACE:
            found.append(previous.encode())
        return found

    def verify(self, body: bytes, header: str | None) -> None:
        """``X-Hub-Signature-256`` made with one of the accepted secrets, or ``Rejected``."""
        refused: Rejected | None = None
        for attempt in range(2):
            for secret in self.accepted():
                try:
                    verify(secret, body, header)
                    return
                except Rejected as exc:
                    refused = exc
            if attempt or not header or self._clock() - self._rechecked < RECHECK:
                break
            self._rechecked = self._clock()
            try:
                if not self.secret.refresh():
                    break
            except SecretError as exc:
                self._failed(exc)
                break
        assert refused is not None  # (``accepted`` gives one secret at least)
        try:
            raise refused
        finally:
            # The exception's traceback holds this frame: kept in a local too, it made a
            # cycle that only the garbage collector frees, and the body with it — a flood of
            # 24 MB deliveries with bad signatures took serve past 1 GB (512Mi is its limit).
            refused = None

    def _current(self) -> str:
        """The file's value; the one read last while the file cannot be read (a delivery is
        not refused for a file gone for a moment), said once."""
        try:
            value = self.secret.get()
        except SecretError as exc:
            last = self.secret.last
            if last is None:
                raise
            self._failed(exc)
            return last
        self._failing = ""
        return value

    def _failed(self, exc: SecretError) -> None:
        if str(exc) != self._failing and self._report is not None:
            self._report(f"{exc}: deliveries are checked with the secret read before")
        self._failing = str(exc)
