"""Posts the Events of each pass (``events.py``) from a thread of its own: no pass waits on them.

``post`` only queues (a bounded queue: should the API server be so slow that it fills, what
does not fit is dropped, said at debug level). The thread writes each Event through ``Kube``,
with its timeouts: a new object, or a repeat of one posted within ``events.WINDOW`` (its count
and lastTimestamp updated, ``events.Correlator``); a repeat whose object is gone (the API
server's event TTL) is posted anew. A failure never fails a pass: the first is said at warning
level (with what the Role needs, should that be the cause), the next ones at debug level until
a post succeeds again. Nothing is posted while ``allowed`` says no: a deposed leader posts none
(the new leader posts its own).
"""
from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Callable

from gitscale.controller.errors import ControllerError, KubeError, NotFound
from gitscale.controller.events import (
    Correlator,
    Event,
    Post,
    body,
    event_name,
    object_key,
    repeat,
)
from gitscale.controller.kube import Kube

log = logging.getLogger("gitscale.controller")
CAPACITY = 1000  # passes whose Events may wait to be posted
Item = tuple[dict[str, str], list[Event], datetime]  # (involvedObject, its Events, when)


class Recorder:
    def __init__(self, kube: Kube, *, allowed: Callable[[], bool],
                 instance: str | None = None, correlator: Correlator | None = None,
                 capacity: int = CAPACITY) -> None:
        self.kube = kube
        self.instance = instance or socket.gethostname()
        self._allowed = allowed
        self._correlator = correlator or Correlator()
        self._queue: queue.Queue[Item | None] = queue.Queue(capacity)
        self._thread: threading.Thread | None = None
        self._failing = False  # said once: the next failures go to debug
        self._stopping = threading.Event()  # post nothing more (stop's time is up)
        self._nanos = 0

    def start(self) -> Recorder:
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()
        return self

    def post(self, ref: Mapping[str, str], events: list[Event], now: datetime) -> None:
        """Queue ``events`` about the object ``ref`` (``events.involved``); never waits."""
        if not events or not self._allowed():
            return
        try:
            self._queue.put_nowait((dict(ref), events, now))
        except queue.Full:
            log.debug("%s/%s: %d Event(s) dropped: too many waiting to be posted",
                      ref.get("namespace"), ref.get("name"), len(events))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until what was queued is posted (or dropped); False after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return False
                self._queue.all_tasks_done.wait(left)
        return True

    def stop(self, timeout: float = 2.0) -> None:
        """Post what is queued for up to ``timeout`` s, then stop: what is left is dropped
        (a call in flight ends with its timeout, in a daemon thread)."""
        if self._thread is None:
            return
        self.flush(timeout)
        self._stopping.set()
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # the thread drops what is queued, and ends with the process
        self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                ref, events, now = item
                for event in events:
                    if self._allowed() and not self._stopping.is_set():
                        self._write(ref, event, now)
            except Exception:  # noqa: BLE001 - an Event is never worth the thread
                log.exception("posting an Event failed")
            finally:
                self._queue.task_done()

    def _write(self, ref: dict[str, str], event: Event, now: datetime) -> None:
        post = self._correlator.observe(object_key(ref), event, now)
        try:
            if post.name is not None:
                try:
                    self.kube.patch_event(ref["namespace"], post.name, repeat(post))
                    name = post.name
                except NotFound:  # expired (the event TTL) or deleted: a new one
                    post = Post(post.key, post.event, 1, now, now)
                    name = self._create(ref, post)
            else:
                name = self._create(ref, post)
        except ControllerError as exc:
            if self._failing:
                log.debug("%s/%s: Event %s not posted: %s", ref["namespace"], ref["name"],
                          event.reason, exc)
            else:
                self._failing = True
                # Only a 403 is the Role's doing; an outage (no answer, a 5xx) is not.
                why = "the controller's Role needs create and patch on events; " if (
                    isinstance(exc, KubeError) and exc.status == 403) else ""
                log.warning("%s/%s: Event %s not posted: %s (%sthe passes go on, further "
                            "failures are logged at debug level until one is posted)",
                            ref["namespace"], ref["name"], event.reason, exc, why)
            return
        self._failing = False
        self._correlator.posted(post, name)

    def _create(self, ref: dict[str, str], post: Post) -> str:
        self._nanos = max(time.time_ns(), self._nanos + 1)  # unique, even for one clock tick
        name = event_name(ref["name"], self._nanos)
        self.kube.create_event(body(ref, post, name, self.instance))
        return name
