"""`serve`'s resync loop: the poll of GitHub for the served sets' jobs (``resync.list_jobs``) on
a worker thread, due every ``--resync``, so a slow API never holds a batch up; its listing is
handed to the next batch, and a failed poll is said once per streak."""
from __future__ import annotations

import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from gitscale import crash
from gitscale.config.load import load_config
from gitscale.demand.resolve import Sources
from gitscale.errors import GitscaleError
from gitscale.logline import log
from gitscale.metrics import LoopMetrics
from gitscale.plan.cache import StateCache
from gitscale.redact import redact
from gitscale.repo.workspace import Workspace
from gitscale.timeutil import utcnow
from gitscale.webhooks.resync import Listing, list_jobs
from gitscale.webhooks.served import Serving, pick
from gitscale.streak import Streak, duration, told

CLOSE_GRACE = 5.0  # seconds a resync poll in flight at a stop has to finish


@dataclass
class Resyncer:
    """Polls GitHub for the webhook-fed sets' jobs on a worker thread, every ``every`` seconds
    (0: never), so a slow API never holds a batch up; no poll while serve scales no such set."""

    every: float
    sources: Sources
    config_path: str
    cache: StateCache
    metrics: LoopMetrics
    serving: Serving
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        1, thread_name_prefix="resync"))
    future: "Future[Listing] | None" = None
    ready: Listing | None = None
    due: float = 0.0  # time.monotonic() of the next poll: the first one at start
    streak: Streak = field(default_factory=Streak)  # failed polls in a row

    def start_if_due(self, ws: Workspace) -> None:
        if not self.every or self.future is not None or time.monotonic() < self.due:
            return
        self.due = time.monotonic() + self.every
        try:
            config = load_config(ws.root, self.config_path, self.cache.configs)
        except GitscaleError as exc:
            log(f"resync skipped: {redact(str(exc))}", level="warning")
            return
        sets = pick(config, self.serving.names).sets  # only the served sets' scopes
        if not sets:  # no served set takes webhooks (yet): no resync to run, no API call
            return
        self.future = self.pool.submit(list_jobs, sets, self.sources, utcnow(), config)

    def take(self) -> Listing | None:
        """The newest listing, once its poll is done (None before)."""
        if self.future is not None and self.future.done():
            future, self.future = self.future, None
            try:
                polled = future.result()
            except Exception as exc:  # noqa: BLE001 - the server outlives a failed poll
                self.metrics.error("resync")
                if self.streak.failed(crash.summary(exc)):
                    log(f"resync failed: {crash.summary(exc)}\n{crash.report()}", level="error")
                return None
            if polled.error is not None:
                self.metrics.error("resync")
                if self.streak.failed(polled.error):  # the same error: said once per streak
                    log("resync skipped, reservations left as they are"
                        + (f" ({self.streak.count} polls in a row for "
                           f"{self.streak.lasted()})" if self.streak.count > 1 else "")
                        + f": {redact(polled.error)}"
                        + (" (said again when the error changes, and every "
                           f"{duration(self.streak.remind)} while it lasts)"
                           if self.streak.count == 1 else ""), level="warning")
                return None
            ended = self.streak.ended()
            if ended is not None:
                log(f"resync works again, after {told(ended, 'poll', 'polls')}")
            self.ready = polled
        listing, self.ready = self.ready, None
        return listing

    def give_back(self, listing: Listing) -> None:
        """A batch failed: its listing is applied by the next one, unless a newer one came."""
        if self.ready is None:
            self.ready = listing

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Stop polling, then save and close the clients. A poll in flight has ``grace``
        seconds to finish first: its thread uses those clients (and their ETag caches), which
        must not be saved or closed under it. One still running then is not waited for here:
        the process waits for it at exit (the pool's thread is joined then), and it saves its
        clients itself when done (``list_jobs``); its requests are bounded by their timeouts."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        future = self.future
        if future is not None:
            try:
                future.exception(timeout=grace)
            except TimeoutError:
                log(f"resync: a poll still running {grace:g} s after the stop; the process "
                    "exits once it is done")
                return
            except CancelledError:
                pass
        self.sources.close()
