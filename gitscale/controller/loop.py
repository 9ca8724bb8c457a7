"""The controller process: informers feed a work queue, workers run passes, /healthz answers.

Watch-driven: every RunnerSet event and every runner-pod event queues its set; a periodic
resync queues every set (a missed event costs at most one resync period). A pass may ask to be
run again later (a failed runner's backoff, the 30 s unregister retry); a pass that failed is
tried again after a backoff of its set's that doubles while its passes fail in a row
(``WorkQueue.failed``: 10 s to 5 minutes), which the resync does not cut short.

With leader election (``election``), every replica keeps its caches warm but runs passes only
while it holds the Lease (``leader.py``); on taking it, it queues every set, so what the last
leader left undone is completed at once.

``/healthz`` (liveness) says whether the process moves: its threads are alive, the informers
and the elector iterate, and no pass has gone ``stall_after`` seconds without progress
(``liveness.py``). It stays green while the API server does not answer: restarting would not
bring it back. ``/readyz`` adds the API's state: the first lists are done and the last list or
watch request of each informer was answered.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from gitscale import crash
from gitscale.controller.cache import Informer, Store, runner_pod_fields, set_of_pod
from gitscale.controller.context import Context, Report
from gitscale.controller.events import involved, of_pass
from gitscale.controller.kube import Kube
from gitscale.controller.leader import LeaderElector, LeaseConfig
from gitscale.controller.liveness import Liveness, Pool
from gitscale.controller.observe import RawObject, key_of
from gitscale.controller.platforms import Platforms
from gitscale.controller.memory import Memory
from gitscale.controller.reconcile import reconcile
from gitscale.controller.recorder import Recorder
from gitscale.controller.workqueue import WorkQueue
from gitscale.controller.metrics import ControllerMetrics
from gitscale.metrics import exposition
from gitscale.controller.logmask import MASK_LOG
from gitscale.timeutil import utcnow

log = logging.getLogger("gitscale.controller")
# what a 404 on the RunnerSets' list means: the API server does not know the resource
CRD_MISSING = ("the RunnerSet CRD (runnersets.gitscale.dev) is not installed in this cluster: "
               "`gitscale crd | kubectl apply -f -`, or `gitscale crd --repo PATH` to commit it "
               "to the config repo for Argo CD or Flux to apply")
FOREGROUND = "foregroundDeletion"  # the finalizer the API server adds for a foreground deletion
CRASH_RETRY = 30.0  # seconds before a pass that crashed is tried again (doubling, per set)


class Controller:
    def __init__(self, kube: Kube, *, namespace: str | None = None, concurrency: int = 16,
                 workers: int = 2, resync: float = 60.0, watch_timeout: int = 300,
                 clock: Callable[[], datetime] = utcnow,
                 platforms: Platforms | None = None, shutdown_timeout: float = 20.0,
                 election: LeaseConfig | None = None,
                 metrics: ControllerMetrics | None = None, stall_after: float = 300.0,
                 relist_backoff: float = 0.5) -> None:
        self.kube = kube
        # Every line the controller logs is masked, whichever handler writes it (a message
        # quotes what an API said, which may echo a credential the process holds).
        log.addFilter(MASK_LOG)
        self.metrics = metrics or ControllerMetrics()
        self.namespace = namespace
        self.resync = resync
        self.shutdown_timeout = shutdown_timeout
        self.stall_after = stall_after
        self.liveness = Liveness()
        kube.on_return = self.liveness.beat  # every call that returns is progress of its thread
        self.stop_event = threading.Event()
        self.queue = WorkQueue()
        self.runnersets = Store()
        self.pods = Store(index=set_of_pod, keep=runner_pod_fields)
        self.pool: ThreadPoolExecutor = Pool(concurrency, self.liveness,
                                             thread_name_prefix="runner-io")
        self.reports: collections.deque[Report] = collections.deque(maxlen=1000)
        self.ctx = Context(kube, self.runnersets, self.pods,
                           platforms or Platforms(kube.read_secret), self.pool, Memory(), clock)
        # Events of each pass, posted by a thread of their own; none once deposed.
        self.events = Recorder(kube, allowed=lambda: not self.ctx.deposed.is_set(),
                               instance=election.identity if election else None)
        self._workers = workers
        self._threads: list[threading.Thread] = []
        self.acting = threading.Event()  # leading (always, without leader election)
        self.elector = None if election is None else LeaderElector(
            kube, election, on_start=self._lead, on_stop=self._follow)
        self._campaign_stop, self._release = threading.Event(), threading.Event()
        self._campaign: threading.Thread | None = None
        self._foreground: set[str] = set()  # sets said to be deleted in the foreground
        self._said_lock, self._said_synced = threading.Lock(), False
        # A watch, silent or trickling, ends by its timeout plus the read timeout (30 s:
        # kube.Kube._stream).
        self._informer_bound = max(stall_after, watch_timeout + 60.0)
        beat = self.liveness.beat
        self.informers = [
            Informer("runnersets", self.runnersets,
                     lambda: kube.list_runnersets(namespace, self.runnersets.keep),
                     lambda v, t: kube.watch_runnersets(namespace, v, t), self._set_changed,
                     self.stop_event, watch_timeout=watch_timeout, beat=beat,
                     backoff=relist_backoff, missing=CRD_MISSING),
            Informer("pods", self.pods, lambda: kube.list_pods(namespace, self.pods.keep),
                     lambda v, t: kube.watch_pods(namespace, v, t), self._pod_changed,
                     self.stop_event, watch_timeout=watch_timeout, beat=beat,
                     backoff=relist_backoff),
        ]

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, *, workers: bool = True) -> Controller:
        """Start the informers and, unless ``workers`` is False (a test drives passes), the
        workers and the resync timer."""
        self.events.start()
        for informer in self.informers:
            informer.start()
            self.liveness.watch(informer.thread, f"informer {informer.name}",
                                self._informer_bound)
        if self.elector is None:
            self.acting.set()
        self.metrics.leading(self.acting.is_set())
        if workers:
            for n in range(self._workers):
                self._spawn(self._work, f"reconcile-{n}")
            self._spawn(self._resync, "resync")
        if self.elector is not None:
            elector = self.elector
            self._campaign = threading.Thread(
                target=lambda: elector.run(self._campaign_stop, self._release),
                name="leader-election", daemon=True)
            self._campaign.start()
            self.liveness.watch(self._campaign, "leader election", self.stall_after)
        return self

    def synced(self, timeout: float | None = None) -> bool:
        return all(i.synced.wait(timeout) for i in self.informers)

    def healthy(self) -> bool:
        return not self.problems()

    def problems(self) -> list[str]:
        """Why the process is not live: a thread that died, or one that stopped moving."""
        campaign = [] if self._campaign is None else [self._campaign]
        dead = [t.name for t in [i.thread for i in self.informers] + self._threads + campaign
                if not t.is_alive()]
        return [f"thread {name} died" for name in dead] + self.liveness.stalled(self.stall_after)

    def connected(self) -> bool:
        """The last list or watch request of every informer was answered."""
        return all(i.connected for i in self.informers)

    def unready(self) -> list[str]:
        """Why the controller is not ready (beyond ``problems``): its first lists not done, an
        informer whose last list or watch failed (with the API server's words: a Role
        without list on pods is said as such), a replica that cannot take part in the
        election (its Lease refused: it could never lead)."""
        out = [] if self.synced(0) else ["the first lists are not done"]
        for informer in self.informers:
            if not informer.connected:
                error = informer.error
                line = ("the API server did not answer the last list or watch" if
                        error is None or error.status == 0 else
                        f"{informer.name}: the last list or watch failed: {error}")
                out += [] if line in out else [line]
        if self.elector is not None and self.elector.problem:
            out.append(f"leader election: {self.elector.problem}")
        return out

    def stop(self, *, release: bool = True) -> None:
        """Start no new pass; let the passes in flight finish their creations for up to
        ``shutdown_timeout`` seconds, then skip the creations not yet started (each pass then
        records its write as not applied, so the next start completes it). Then give up the
        Lease (unless ``release`` is False: tests playing a crashed leader)."""
        if not release:  # a crash: act no more, at once
            self.acting.clear()
            self.ctx.halt.set()
            self.ctx.deposed.set()
        self.stop_event.set()
        self.queue.close()
        self.kube.stop_watches()
        deadline = time.monotonic() + self.shutdown_timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0))
        if any(t.is_alive() for t in self._threads):
            log.warning("passes still creating runners after %gs: the rest is left to the next "
                        "start", self.shutdown_timeout)
            self.ctx.halt.set()
        for thread in self._threads + [i.thread for i in self.informers]:
            if thread.is_alive():
                thread.join(5)
        self.pool.shutdown(wait=True)  # what is still queued sees ``halt`` and returns at once
        self.events.stop()  # (a crash: deposed, it posts nothing more)
        if release:
            self._release.set()
        self._campaign_stop.set()
        if self._campaign is not None:
            self._campaign.join(5)
        self.ctx.platforms.close()

    # -- passes -------------------------------------------------------------------------------
    def reconcile(self, key: str) -> Report:
        """One pass over one set, now (also what the workers run)."""
        started = time.monotonic()
        report = reconcile(self.ctx, key)
        report.started, report.seconds = started, time.monotonic() - started
        self.reports.append(report)
        obj = self.runnersets.get(key)
        self.metrics.reconciled(report, gone=obj is None)
        if obj is not None:  # (the recorder posts nothing once deposed)
            self.events.post(involved(obj), of_pass(report, obj.get("status")), self.ctx.clock())
        timer = report.requeue_after  # (a backoff of the pass's own, a grace running out)
        if timer is not None:
            self.queue.add_after(key, timer)
        if report.error_retry is not None:  # failed: the set backs off, its failures in a row
            retry = self.queue.failed(key, report.error_retry, generation=_generation(obj))
            report.requeue_after = retry if timer is None else min(timer, retry)
        elif not report.stale:  # (a pass on a version written since neither failed nor did)
            self.queue.forget(key)
        return report

    def _lead(self) -> None:
        # A term's own events, not the last one's cleared: a pass still in flight from the
        # term that ended keeps those it started with (set: it creates, removes and writes no
        # more — the replica that led meanwhile may have made the same runners), this term's
        # passes get clear ones (``reconcile``).
        self.ctx.halt, self.ctx.deposed = threading.Event(), threading.Event()
        self.ctx.memory.leading()  # (sweep what the last leader may have left)
        self.acting.set()
        self.metrics.leading(True)
        for key in self.runnersets.keys():  # complete whatever the last leader left
            self.queue.add(key)

    def _follow(self) -> None:
        self.acting.clear()
        # Passes in flight start no more creations, create no more pods, write no status:
        # the next leader may already be acting on the same sets.
        self.ctx.halt.set()
        self.ctx.deposed.set()
        self.metrics.leading(False, self.runnersets.keys())

    def _work(self) -> None:
        while not self.stop_event.is_set():
            if not self.acting.wait(0.2):
                continue
            # No pass before both caches are listed (client-go's WaitForCacheSync): a pass
            # over a set whose pods could not be listed yet (a Role without list on pods, a
            # relist of 10,000 pods in progress) would see none, and create them all again.
            if not self.synced(0):
                self.stop_event.wait(0.2)
                continue
            self._say_synced()
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            try:
                if self.acting.is_set():
                    with self.liveness.working(key):
                        self.reconcile(key)
            except Exception as exc:  # noqa: BLE001 - one bad pass must not stop the controller
                log.error("%s: the pass crashed: %s\n%s", key, crash.summary(exc), crash.report())
                obj = self.runnersets.get(key)
                self.queue.failed(key, CRASH_RETRY, generation=_generation(obj))
            finally:
                self.queue.done(key)

    def _say_synced(self) -> None:
        """Once the caches are listed: say so when no RunnerSet is there to act on (a
        ``--namespace`` other than the RunnerSets', or none applied yet)."""
        with self._said_lock:
            if self._said_synced:
                return
            self._said_synced = True
        if not self.runnersets.keys():
            where = f"namespace {self.namespace}" if self.namespace else "any namespace"
            log.warning("no RunnerSet in %s: nothing to do until one is applied there%s",
                        where, " (the controller watches only the namespace its --namespace "
                        "names; RunnerSets elsewhere are not seen)" if self.namespace else "")

    def _resync(self) -> None:
        while not self.stop_event.wait(self.resync):
            for key in self.runnersets.keys():
                self.queue.resync(key)  # (not a set waiting out its backoff)

    def _set_changed(self, obj: RawObject) -> None:
        key = key_of(obj)
        meta = obj.get("metadata") or {}
        if (meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or [])
                and key not in self._foreground):
            self._foreground.add(key)
            log.warning(
                "%s: deleted with propagationPolicy=Foreground: Kubernetes' garbage collector "
                "deletes its runner pods at once, busy ones too, before the controller can "
                "drain them; delete RunnerSets with background propagation (Argo CD: "
                "syncOptions PrunePropagationPolicy=background; kubectl: the default "
                "--cascade=background)", key)
        self.queue.add(key)

    def _pod_changed(self, obj: RawObject) -> None:
        key = set_of_pod(obj)
        if key is not None:
            self.queue.add(key)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)


def _generation(obj: RawObject | None) -> object:
    """The set's ``metadata.generation`` (its spec's version): a failure of a new spec is a
    first one."""
    return ((obj or {}).get("metadata") or {}).get("generation")


def serve_health(controller: Controller, port: int,
                 host: str = "0.0.0.0") -> ThreadingHTTPServer:  # noqa: S104 - probed by kubelet
    """/healthz: the process moves (threads alive, loops iterating, no pass stalled).
    /readyz: also, the first lists are done and the API server answers.
    /metrics: the controller's Prometheus metrics."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path == "/healthz":
                problems = controller.problems()
            elif self.path == "/readyz":
                problems = controller.problems() + controller.unready()
            elif self.path == "/metrics":
                self._send(200, *exposition(controller.metrics.registry))
                return
            else:
                self.send_error(404)
                return
            body = "".join(f"{p}\n" for p in problems) or "ok\n"
            self._send(503 if problems else 200, body.encode(), "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
