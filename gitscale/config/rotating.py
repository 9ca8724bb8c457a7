"""A credential a long-running process keeps, read again when it may have been rotated.

``run`` and ``serve`` live for months, and their clients with them; a token or a webhook secret
rotated meanwhile must reach them without a restart. A ``{file: PATH}`` credential is checked
each time it is asked for, cheaply: the file's resolved path, inode, size and modification time
(``os.stat``, no read). A Kubernetes Secret volume updates a key by swapping the ``..data``
symlink its file points through, so the resolved path changes; a file rewritten in place
changes its size or time. Any change reads the file again, and a new value replaces the old
(the same value read again changes nothing). ``refresh`` reads it again whatever the stat says:
a caller whose credential was just refused (401) asks for it before it retries.

An ``{env: NAME}`` credential read from the file ``NAME_FILE`` names (the ``_FILE``
convention, ``config/secrets.py``: what the in-cluster scaler's pods set, pointing into a
Secret volume) is that file's credential, and rotates the same way. One read from the variable
``NAME`` itself cannot change in a running process (its environment is fixed when it starts):
it is read once, and a rotation needs a restart.

Thread-safe; never logs or returns a value in a message. ``report`` is told once per change
(``what`` and where it came from, never the value).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from gitscale.config.secrets import SecretRef, read_secret, secret_file
from gitscale.redact import hold

Reader = Callable[[Any, str], str]  # ``read_secret`` or ``read_token``
Signature = tuple[str, int, int, int, int]  # resolved path, device, inode, size, mtime (ns)


class Rotating:
    """The value of ``ref`` (a ``SecretRef`` or its mapping), read by ``read`` as ``what``."""

    def __init__(self, ref: Any, what: str, *, read: Reader = read_secret,
                 report: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ref = ref if isinstance(ref, SecretRef) else SecretRef.parse(ref)
        self.what = what
        self._read = read
        self._report = report
        self._clock = clock
        self._lock = threading.Lock()
        self._value: str | None = None
        self._seen: Signature | None = None
        self.previous: str | None = None  # the value before the last change
        self.changed_at: float | None = None  # when it changed (``clock``), None: never

    @property
    def last(self) -> str | None:
        """The value read last (None before the first read), whether or not the file can
        still be read."""
        return self._value

    @property
    def rotates(self) -> bool:
        """Whether a new value can reach this process: a file's can (``{file: PATH}``, or
        ``NAME_FILE``'s for an ``{env: NAME}``), a variable's cannot."""
        return self._file is not None

    @property
    def _file(self) -> Path | None:
        return secret_file(self.ref)  # (the environment is the process's: a lookup, no I/O)

    def get(self) -> str:
        """The value: read on first use, and again when its file looks changed. A file that
        cannot be read raises ``SecretError`` (naming the file, never a value)."""
        with self._lock:
            if self._value is None:
                self._seen = self._signature()
                self._value = self._read(self.ref, self.what)
            elif self.rotates:
                seen = self._signature()
                if seen is None or seen != self._seen:
                    self._reread(seen)
            return hold(self._value)  # held again at each use: kept masked while in use

    def refresh(self) -> bool:
        """Read the file again (the credential was refused: it may have been rotated in a way
        its stat does not show). True when the value changed; always False for a variable."""
        if not self.rotates:
            return False
        with self._lock:
            before = self._value
            self._reread(self._signature())
            return before is not None and self._value != before

    def _reread(self, seen: Signature | None) -> None:
        value = self._read(self.ref, self.what)  # (raises: the next call tries again)
        self._seen = seen
        if value != self._value:
            if self._value is not None:
                self.previous, self.changed_at = self._value, self._clock()
                if self._report is not None:
                    self._report(f"{self.what}: {self._file or self.ref.where} changed: the "
                                 "new value is used from now on")
            self._value = value

    def _signature(self) -> Signature | None:
        """What changes when the file does; None for a variable or a file that is not there."""
        path = self._file
        if path is None:
            return None
        try:
            resolved = os.path.realpath(path)
            info = os.stat(resolved)
        except (OSError, ValueError):
            return None
        return resolved, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns
