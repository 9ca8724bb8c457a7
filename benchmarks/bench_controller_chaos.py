"""Chaos benchmark: the real `gitscale controller`, SIGKILLed at random moments (not a test).

    .venv/bin/python benchmarks/bench_controller_chaos.py --kills 20          # ~3 minutes
    .venv/bin/python benchmarks/bench_controller_chaos.py --kills 200 --seed 7 --max-seconds 1800

Everything is on 127.0.0.1: the local Kubernetes-shaped API server (``tests/kubeapi``), the fake
GitHub and Buildkite (``tests/controller/*_fake.py``), and `gitscale controller --leader-elect`
as a subprocess (short Lease timings: 2 s / 1.4 s / 0.2 s). In this process:

- a driver writes each RunnerSet's spec as gitscale's scaler would (README, "Scaling
  semantics"): created at (r, 1), scaled up (patch + 1), re-affirmed with a backlog (patch + 1),
  scaled down with patch 0, drained (0, 0), deleted (background), made again; a GitHub set
  and a Buildkite set (with the agents API), side by side;
- a kubelet moves pods Pending → Running (a GitHub pod only once its JIT Secret exists, as a
  real kubelet would) and marks the runners online; running runners take jobs of 1–4 s (busy
  on the fake GitHub / Buildkite: a job starts only on a registration that still exists, under
  the fake's lock, so an unregistration before it and a 422 after it are both honoured) and
  then exit (Succeeded; the ephemeral registration goes);
- the controller is SIGKILLed 0.1–3 s after it settled (seeded), mid-pass as often as not,
  and started again; every ``--pair-every``-th round a second replica runs beside it (the
  Lease must keep one acting) and either may be the one killed.

After each restart the driver and the kubelet's jobs pause, and the benchmark waits until the
controller settles (status observed the spec, its counts equal the pods', no idle or pending
surplus over ``replicas``), up to ``--settle`` seconds, then checks the invariants:

- over_replicas: more pending + idle runner pods than ``replicas`` (busy ones kept by a
  scale-down aside), once settled;
- busy_deleted: a GitHub runner's pod deleted while its job ran (watched all the time);
- pod_without_secret: a GitHub runner pod whose JIT Secret does not exist;
- duplicate: two pods of one runner id, or two registrations of one name;
- status: ``status.replicas``/``pending``+``idle``+``busy``/``failed``/``observedPatchID``
  not what the pods say when the settle time ran out (idle vs busy is not compared: it
  follows the runner list, reused up to 60 s);
- not_settled: the controller did not settle within ``--settle`` seconds;
- finalizer: a deleted set not gone within ``--settle`` seconds of being asked, or gone with
  GitHub registrations of its own left;
- orphan_registration: after the last kill, a soak of ``--soak`` seconds with one controller
  (≥ 90 s: the 60 s grace of a registration with no pod, plus a pass); a registration of a set
  with no pod left at its end;
- rss_growth: during the soak, the controller's RSS over its last third more than 20 % (and
  5 MB) above its first third's;
- traceback: a traceback or "crashed" in a controller's log.

Prints the kills, the violations by kind (with the first example of each) and the time from
a restart to settled (p50/p95). Exits 1 if any violation was found.
"""
from __future__ import annotations

import argparse
import base64
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kubernetes.client  # noqa: E402

from gitscale.controller.observe import ANNOTATION_RUNNER_ID, LABEL_SET  # noqa: E402
from gitscale.controller.podspec import is_runner_name  # noqa: E402
from gitscale.timeutil import format_time, utcnow  # noqa: E402
from tests.controller.buildkite_fake import FakeBuildkite  # noqa: E402
from tests.controller.github_fake import FakeGitHub  # noqa: E402
from tests.controller.harness import buildkite_spec, github_spec  # noqa: E402
from tests.kubeapi.server import KubeAPIServer, api_client, start_api_server  # noqa: E402

NS = "default"
GH_TOKEN = "ghp-chaos-token"
BK_TOKEN = "bkua-chaos-token"
Obj = dict[str, Any]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def live(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp")


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


@dataclass
class World:
    api: KubeAPIServer
    github: FakeGitHub
    buildkite: FakeBuildkite
    rng: random.Random
    lock: threading.Lock = field(default_factory=threading.Lock)
    frozen: bool = False  # no job starts or ends (the settle check)
    jobs: dict[str, float] = field(default_factory=dict)  # pod → when its job ends
    gh_busy_pods: set[str] = field(default_factory=set)
    violations: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    info: Counter[str] = field(default_factory=Counter)
    started_at: dict[str, float] = field(default_factory=dict)

    def violation(self, kind: str, detail: str) -> None:
        with self.lock:
            self.violations[kind] += 1
            self.examples.setdefault(kind, detail)
        print(f"  VIOLATION {kind}: {detail}", flush=True)

    def pods(self, name: str | None = None) -> list[Obj]:
        selector = LABEL_SET if name is None else f"{LABEL_SET}={name}"
        return self.api.objects("pods", NS, label_selector=selector)


# -- the kubelet -------------------------------------------------------------------------------
def kubelet(world: World, stop: threading.Event) -> None:
    seen: dict[str, Obj] = {}
    while not stop.wait(0.1):
        try:
            kubelet_tick(world, seen)
        except Exception as exc:  # noqa: BLE001 - a pod deleted between the read and the write
            if "not found" not in str(exc).lower() and "NotFound" not in type(exc).__name__:
                world.info[f"kubelet: {type(exc).__name__}"] += 1


def kubelet_tick(world: World, seen: dict[str, Obj]) -> None:
    now = time.monotonic()
    pods = {p["metadata"]["name"]: p for p in world.pods()}
    for name in set(seen) - set(pods):  # deleted (and gone) since the last tick
        with world.lock:
            ends = world.jobs.pop(name, None)
            was_gh_busy = name in world.gh_busy_pods
            world.gh_busy_pods.discard(name)
        if ends is not None and was_gh_busy:
            world.violation("busy_deleted", f"{name}: its pod was deleted mid-job")
        elif ends is not None:
            world.info["buildkite_busy_agent_stopped"] += 1  # finishes its job on SIGTERM
        del seen[name]
    for name, pod in pods.items():
        seen[name] = pod
        if not live(pod):
            continue
        platform = "github" if pod["metadata"]["annotations"].get(ANNOTATION_RUNNER_ID) \
            else "buildkite"
        started = world.started_at.setdefault(name, now)
        state = phase(pod)
        if state == "Pending" and now - started > 0.3:
            start_pod(world, pod, platform)
        elif state == "Running" and not world.frozen:
            run_jobs(world, pod, platform, now)


def start_pod(world: World, pod: Obj, platform: str) -> None:
    name = pod["metadata"]["name"]
    if platform == "github" and world.api.get_object("secrets", name, NS) is None:
        world.api.set_pod_phase(NS, name, "Pending", [{"name": "runner", "ready": False, "state": {
            "waiting": {"reason": "CreateContainerConfigError",
                        "message": f'secret "{name}" not found'}}}])
        return
    world.api.set_pod_phase(NS, name, "Running", [
        {"name": pod["spec"]["containers"][0]["name"], "ready": True, "state": {"running": {}}}])
    if platform == "github":
        with world.github.lock:  # online, if still registered (not unregistered meanwhile)
            runner = next((r for r in world.github.runners.values() if r.name == name), None)
            if runner is not None:
                runner.online = True
    else:
        world.buildkite.connect(name)


def run_jobs(world: World, pod: Obj, platform: str, now: float) -> None:
    name = pod["metadata"]["name"]
    ends = world.jobs.get(name)
    if ends is None and world.rng.random() < 0.08:  # a job comes to this idle runner
        if platform == "github":
            with world.github.lock:
                runner = next((r for r in world.github.runners.values() if r.name == name), None)
                if runner is None or not runner.online:
                    return  # unregistered: it can take no job
                runner.busy = True
            with world.lock:
                world.gh_busy_pods.add(name)
        else:
            world.buildkite.connect(name, busy=True)
        with world.lock:
            world.jobs[name] = now + world.rng.uniform(1.0, 4.0)
    elif ends is not None and now >= ends:  # the job is done: the runner exits
        if platform == "github":
            with world.github.lock:
                for runner_id, runner in list(world.github.runners.items()):
                    if runner.name == name:
                        del world.github.runners[runner_id]
        else:
            world.buildkite.disconnect(name)
        world.api.set_pod_phase(NS, name, "Succeeded", [
            {"name": pod["spec"]["containers"][0]["name"], "ready": False, "state": {
                "terminated": {"exitCode": 0, "finishedAt": format_time(utcnow())}}}])
        with world.lock:
            world.jobs.pop(name, None)
            world.gh_busy_pods.discard(name)


# -- the driver (Argo CD applying the scaler's writes) ----------------------------------------
@dataclass
class SetDriver:
    name: str
    spec: Obj
    step: int = 0
    replicas: int = 0
    patch: int = 0
    deleting_since: float | None = None
    uid: str = ""

    def write(self, world: World, rng: random.Random) -> str:
        """The next write of the cycle: create, up, refill, down (patch 0), drain, delete."""
        kind = ["create", "up", "refill", "down", "drain", "delete"][self.step % 6]
        obj = world.api.get_object("runnersets", self.name, NS)
        if kind == "create":
            if obj is not None:
                return "waiting"  # still being deleted
            self.replicas, self.patch = rng.randint(2, 5), 1
        elif kind == "up":
            self.replicas, self.patch = self.replicas + rng.randint(1, 4), self.patch + 1
        elif kind == "refill":
            self.patch += 1
        elif kind == "down":
            self.replicas, self.patch = max(self.replicas - rng.randint(1, 4), 1), 0
        elif kind == "drain":
            self.replicas, self.patch = 0, 0
        owned = {"replicas": self.replicas, "patchID": self.patch,
                 "effectiveTime": format_time(utcnow()),
                 "backlog": rng.randint(1, 3) if kind == "refill" else 0}
        if kind == "create":
            made = world.api.create_object("runnersets", {
                "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
                "metadata": {"name": self.name, "namespace": NS},
                "spec": {**self.spec, **owned}}, NS)
            self.uid = made["metadata"]["uid"]
        elif kind == "delete":
            kubernetes.client.CustomObjectsApi(api_client(world.api.url)) \
                .delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets",
                                                 self.name)
            self.deleting_since = time.monotonic()
        elif obj is not None:
            world.api.mutate_object("runnersets", self.name, lambda o: o["spec"].update(owned), NS)
        self.step += 1
        return f"{kind} ({self.replicas}, {self.patch})"


# -- the controllers ---------------------------------------------------------------------------
@dataclass
class Controllers:
    kubeconfig: Path
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    count: int = 0
    log_files: list[Path] = field(default_factory=list)
    all: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> subprocess.Popen[bytes]:
        self.count += 1
        log = self.logs / f"controller-{self.count:04}.log"
        self.log_files.append(log)
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBERNETES_SERVICE_HOST", "POD_NAMESPACE")}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gitscale", "controller", "--kubeconfig",
                 str(self.kubeconfig), "--namespace", NS, "--health-port", "0", "--leader-elect",
                 "--lease-duration", "2", "--renew-deadline", "1.4", "--retry-period", "0.2"],
                stdout=subprocess.DEVNULL, stderr=out, env=env)
        self.procs.append(proc)
        self.all.append(proc)
        return proc

    def leader(self, api: KubeAPIServer) -> subprocess.Popen[bytes] | None:
        """The live controller holding the Lease (by the identity its log says leads)."""
        lease = api.get_object("leases", "gitscale-controller", NS) or {}
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        if not holder:
            return None
        for proc, log in zip(self.procs, self.logs_of()):
            if proc.poll() is None and f"{holder} leads" in log.read_text(errors="replace"):
                return proc
        return None

    def logs_of(self) -> list[Path]:
        return [self.log_files[self.all.index(p)] for p in self.procs]

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            self.procs.remove(proc)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- the checks --------------------------------------------------------------------------------
def truth(world: World, name: str) -> dict[str, int]:
    pods = [p for p in world.pods(name) if live(p)]
    phases = Counter(phase(p) for p in pods)
    running = [p["metadata"]["name"] for p in pods if phase(p) == "Running"]
    with world.lock:
        busy = sum(n in world.jobs for n in running)
    return {"pending": phases["Pending"], "running": len(running), "busy": busy,
            "failed": phases["Failed"],
            "replicas": phases["Pending"] + len(running) + phases["Failed"]}


def settled(world: World, driver: SetDriver) -> str | None:
    """None when the set is settled, else what is not yet."""
    obj = world.api.get_object("runnersets", driver.name, NS)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None  # the deletion is checked apart
    spec, status = obj["spec"], obj.get("status") or {}
    t = truth(world, driver.name)
    if status.get("observedPatchID") != spec["patchID"]:
        return f"observedPatchID {status.get('observedPatchID')} != {spec['patchID']}"
    surplus = t["replicas"] - t["busy"] - t["failed"] - spec["replicas"]
    if surplus > 0:
        return f"{surplus} pending/idle runner(s) over replicas {spec['replicas']}: {t}"
    got = {k: int(status.get(k, -1)) for k in ("replicas", "pending", "idle", "busy", "failed")}
    if (got["replicas"], got["failed"]) != (t["replicas"], t["failed"]) or \
            got["pending"] + got["idle"] + got["busy"] != t["pending"] + t["running"]:
        return f"status {got} != pods {t}"
    if t["replicas"] + held(world, driver.name, spec) < spec["replicas"] and spec["patchID"] == 0:
        return f"short: {t} for replicas {spec['replicas']}"
    return None


def held(world: World, name: str, spec: Obj) -> int:
    return sum(phase(p) == "Succeeded" for p in world.pods(name) if live(p))


def check_static(world: World, drivers: list[SetDriver]) -> None:
    pods = [p for p in world.pods() if live(p)]
    ids = Counter(p["metadata"]["annotations"].get(ANNOTATION_RUNNER_ID) for p in pods)
    for runner_id, n in ids.items():
        if runner_id is not None and n > 1:
            world.violation("duplicate", f"{n} pods carry runner id {runner_id}")
    with world.github.lock:
        names = Counter(r.name for r in world.github.runners.values())
    for runner, n in names.items():
        if n > 1:
            world.violation("duplicate", f"{n} registrations named {runner}")
    for pod in pods:
        name = pod["metadata"]["name"]
        if pod["metadata"]["annotations"].get(ANNOTATION_RUNNER_ID) and \
                phase(pod) in ("Pending", "Running") and \
                world.api.get_object("secrets", name, NS) is None:
            world.violation("pod_without_secret", f"{name} ({phase(pod)}) has no JIT Secret")
    for driver in drivers:
        obj = world.api.get_object("runnersets", driver.name, NS)
        if obj is None:
            continue
        t = truth(world, driver.name)
        surplus = t["replicas"] - t["busy"] - t["failed"] - obj["spec"]["replicas"]
        if surplus > 0 and not obj["metadata"].get("deletionTimestamp"):
            world.violation("over_replicas", f"{driver.name}: {t} for spec "
                            f"({obj['spec']['replicas']}, {obj['spec']['patchID']})")


def check_deletions(world: World, drivers: list[SetDriver], settle: float) -> None:
    for driver in drivers:
        if driver.deleting_since is None:
            continue
        obj = world.api.get_object("runnersets", driver.name, NS)
        if obj is not None:
            if time.monotonic() - driver.deleting_since > settle:
                world.violation("finalizer", f"{driver.name}: not gone {settle:.0f}s after its "
                                f"deletion ({truth(world, driver.name)})")
                driver.deleting_since = time.monotonic()  # said once per settle time
            continue
        driver.deleting_since = None
        with world.github.lock:
            left = [r.name for r in world.github.runners.values()
                    if is_runner_name(driver.name, driver.uid, r.name)]
        if left:
            world.violation("finalizer", f"{driver.name}: gone with {len(left)} registration(s) "
                            f"left: {', '.join(left[:3])}")
            with world.github.lock:  # said once
                for runner_id in [i for i, r in world.github.runners.items() if r.name in left]:
                    del world.github.runners[runner_id]


def check_logs(world: World, controllers: Controllers, checked: set[Path]) -> None:
    for log in controllers.log_files:
        if log in checked:
            continue
        text = log.read_text(errors="replace")
        if "Traceback" in text or "crashed" in text:
            world.violation("traceback", f"{log.name}: " + next(
                line for line in text.splitlines() if "Traceback" in line or "crashed" in line))
        checked.add(log)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


# -- the run -----------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Loopback only; bounded by --kills and --max-seconds.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs of a controller")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=45.0,
                        help="seconds a restarted controller has to settle")
    parser.add_argument("--soak", type=float, default=120.0,
                        help="seconds of the final run without kills (RSS, leftovers; 0: none)")
    parser.add_argument("--pair-every", type=int, default=5,
                        help="every N-th round two controllers run at once (0: never)")
    parser.add_argument("--max-seconds", type=float, default=1800.0,
                        help="stop killing after this long (the soak comes after)")
    parser.add_argument("--latency", type=float, default=0.01,
                        help="seconds the API server sleeps per call (passes last longer, so "
                        "more kills land mid-pass)")
    parser.add_argument("--keep-logs", action="store_true", help="print the logs' directory")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    api = start_api_server(latency=args.latency)
    github = FakeGitHub(GH_TOKEN).start()
    buildkite = FakeBuildkite(BK_TOKEN).start()
    world = World(api, github, buildkite, random.Random(args.seed + 1))
    for name, data in (("gh-creds", {"github_token": b64(GH_TOKEN)}),
                       ("bk-token", {"token": b64("agent-token")}),
                       ("bk-api", {"token": b64(BK_TOKEN)})):
        api.create_object("secrets", {"metadata": {"name": name}, "type": "Opaque",
                                      "data": data}, NS)
    bk = buildkite_spec()
    bk["buildkite"].update(organization="acme", apiTokenSecret="bk-api", apiURL=buildkite.url)
    drivers = [SetDriver("gh", github_spec(github.url)), SetDriver("bk", bk)]

    workdir = Path(tempfile.mkdtemp(prefix="gitscale-chaos-"))
    controllers = Controllers(api.write_kubeconfig(workdir / "kubeconfig"), workdir)
    stop = threading.Event()
    threading.Thread(target=kubelet, args=(world, stop), daemon=True).start()
    convergence: list[float] = []
    kills = pairs = round_ = 0
    checked: set[Path] = set()
    began = time.monotonic()
    last_write = 0.0
    try:
        controllers.start()
        while True:
            round_ += 1
            restarted = time.monotonic()
            world.frozen = True
            pending = {d.name for d in drivers}
            leader = None
            while (pending or leader is None) and time.monotonic() - restarted < args.settle:
                check_deletions(world, drivers, args.settle)
                leader = leader or controllers.leader(api)
                if leader is not None:
                    pending = {d.name for d in drivers if settled(world, d) is not None}
                time.sleep(0.1)
            if leader is None:
                world.violation("not_settled", f"round {round_}: no live controller leads")
            elif pending:
                for d in drivers:
                    why = settled(world, d)
                    if why is not None:
                        world.violation("not_settled", f"round {round_}, {d.name}: {why}")
            else:
                convergence.append(time.monotonic() - restarted)
            check_static(world, drivers)
            check_logs(world, controllers, checked)
            world.frozen = False
            if kills >= args.kills or time.monotonic() - began > args.max_seconds:
                break
            if args.pair_every and round_ % args.pair_every == 0 and len(controllers.procs) < 2:
                controllers.start()
                pairs += 1
            # chaos: the driver writes, the kubelet runs jobs, until the kill
            until = time.monotonic() + rng.uniform(0.1, 3.0)
            while time.monotonic() < until:
                if time.monotonic() - last_write > 1.1:  # one write a second at most (its stamp)
                    for d in drivers:
                        if rng.random() < 0.5:
                            what = d.write(world, rng)
                            world.info[f"write {what.split()[0]}"] += 1
                    last_write = time.monotonic()
                check_deletions(world, drivers, args.settle)
                time.sleep(0.05)
            victim = rng.choice(controllers.procs)
            controllers.kill(victim)
            kills += 1
            if not controllers.procs:
                controllers.start()
            print(f"kill {kills}: {len(controllers.procs)} controller(s) left/restarted, "
                  f"{len([p for p in world.pods() if live(p)])} pods", flush=True)

        # the soak: one controller, no kills, the chaos going on; then a quiet end
        while len(controllers.procs) > 1:
            controllers.kill(controllers.procs[-1])
        samples: list[int] = []
        if args.soak > 0:
            soak = controllers.procs[0]
            end = time.monotonic() + args.soak
            while time.monotonic() < end:
                for d in drivers:
                    if d.step % 6 == 5:  # no deletion in the soak: scaled up again instead
                        d.step += 2
                    if rng.random() < 0.3:
                        d.write(world, rng)
                check_deletions(world, drivers, args.settle)
                samples.append(rss_kb(soak.pid))
                time.sleep(1.2)
            world.frozen = True
            time.sleep(5)  # a pass after the last writes
            for d in drivers:
                why = settled(world, d)
                if why is not None:
                    world.violation("not_settled", f"after the soak, {d.name}: {why}")
            check_static(world, drivers)
            pods = {p["metadata"]["name"] for p in world.pods()}
            with github.lock:
                orphans = [r.name for r in github.runners.values() if r.name not in pods]
            if args.soak >= 90 and orphans:
                world.violation("orphan_registration", f"{len(orphans)} registration(s) with no "
                                f"pod after a {args.soak:.0f}s soak: {', '.join(orphans[:3])}")
            if len(samples) >= 9:
                third = len(samples) // 3
                first, last = statistics.mean(samples[:third]), statistics.mean(samples[-third:])
                print(f"soak RSS: first third {first / 1024:.1f} MB, last third "
                      f"{last / 1024:.1f} MB, max {max(samples) / 1024:.1f} MB")
                if last > first * 1.2 and last - first > 5 * 1024:
                    world.violation("rss_growth", f"{first / 1024:.1f} MB → {last / 1024:.1f} MB")
        controllers.stop_all()
        check_logs(world, controllers, checked)
    finally:
        stop.set()
        for proc in controllers.procs:
            proc.kill()
        github.stop()
        buildkite.stop()
        api.stop()

    elapsed = time.monotonic() - began
    print(f"\nkills: {kills} ({pairs} round(s) with two controllers), "
          f"{controllers.count} controller starts, {elapsed:.0f}s, seed {args.seed}")
    print(f"settled after a kill: {len(convergence)} of {round_}; p50 "
          f"{percentile(convergence, 0.5):.2f}s, p95 {percentile(convergence, 0.95):.2f}s, "
          f"max {max(convergence, default=float('nan')):.2f}s")
    print("writes: " + ", ".join(f"{k.split()[1]} {v}" for k, v in sorted(world.info.items())
                                 if k.startswith("write ")))
    other = {k: v for k, v in world.info.items() if not k.startswith("write ")}
    if other:
        print("notes: " + ", ".join(f"{k} {v}" for k, v in sorted(other.items())))
    if world.violations:
        print("violations:")
        for kind, n in world.violations.most_common():
            print(f"  {kind}: {n} (first: {world.examples[kind]})")
    else:
        print("violations: none")
    if args.keep_logs:
        print(f"logs: {workdir}")
    return 1 if world.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
