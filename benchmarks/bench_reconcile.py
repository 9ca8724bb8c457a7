#!/usr/bin/env python3
"""Benchmark one `gitscale reconcile` pass on a config repo with many runner sets.

    .venv/bin/python benchmarks/bench_reconcile.py [--sets 1000] [--changing 10] [--passes 7]

Builds (in a temporary directory) a config repo with N RunnerSet manifests, a gitscale.yaml
listing them with inline policies, a bare remote, and a sequence of demand files in which
exactly --changing sets change demand per pass. Every manifest is first written once by
gitscale (so it carries patchID, effectiveTime and annotations), then each mode runs
--warmup + --passes passes on its own copy of that repo:

  cli-checkout  `gitscale reconcile --repo CHECKOUT --demand FILE`   (subprocess, pushes)
  in-process    run_reconcile() called repeatedly in one Python process (what a loop would do)
  cli-clone     `gitscale reconcile --repo REMOTE.git --demand FILE` (throwaway clone)
  baseline      benchmarks/baseline_yq.sh: the same edits with yq + git add/commit/push

The modes are interleaved pass by pass (order rotated each pass), so a slow spell on a shared
machine lands on all of them. After every pass it checks that exactly one commit landed on the
remote and that it touches exactly the expected --changing manifests. Then it profiles the
in-process and CLI passes (cProfile, plus direct phase timers and a GC what-if in-process).
Results: a table on stdout and JSON (plus .prof files) in benchmarks/results/ (gitignored).
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import hashlib
import io
import json
import os
import platform
import pstats
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
RESULTS = HERE / "results"
BASELINE_SCRIPT = HERE / "baseline_yq.sh"
TARGET_SECONDS = 0.5
TARGET_RATIO = 10.0


def write_results(name: str, results: dict[str, Any]) -> Path:
    """``results`` as benchmarks/results/NAME-<UTC time>.json (what every benchmark keeps)."""
    RESULTS.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"{name}-{stamp}.json"
    out.write_text(json.dumps(results, indent=2))
    return out

# Every git (and gitscale) child runs without the user's global/system git config, so that hooks,
# signing or templates on this machine cannot change the figures. Harness commits use this identity.
CHILD_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "LC_ALL": "C",
}
for _name in ("GITSCALE_GIT_TOKEN", "GITSCALE_GIT_TOKEN_FILE", "GITSCALE_AUTHOR"):
    CHILD_ENV.pop(_name, None)

TEAMS = ("platform", "web", "data", "mobile", "infra", "ml")
CLUSTERS = ("prod-eu", "prod-us", "staging")
POLICIES = (
    "{minReplicas: 1, maxReplicas: 500, buffer: 1, scaleDownDelay: 10m}",
    "{minReplicas: 2, maxReplicas: 800, buffer: 2, scaleDownDelay: 15m, maxStepUp: 100}",
)

GITHUB_SET = """\
# {name}: ephemeral GitHub Actions runners for team {team} in {cluster}.
# Humans own this file except the fields gitscale writes: spec.replicas,
# spec.patchID, spec.effectiveTime and the gitscale.dev/ annotations.
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: {name}
  namespace: ci-{team}
  labels: {{team: {team}, arch: {arch}, cluster: {cluster}}}
spec:
  replicas: {replicas}   # managed by gitscale
  platform: github
  github:
    configURL: "https://github.com/example-org/{team}"
    labels: ["self-hosted", "linux", "{arch}"]
    runnerGroup: {team}
    credentialsSecret: github-app-{team}
  template:
    metadata:
      labels: {{app: ci-runner, team: {team}}}
    spec:
      serviceAccountName: ci-runner
      nodeSelector:
        kubernetes.io/arch: {k8s_arch}
      containers:
        - name: runner
          image: ghcr.io/actions/actions-runner:2.321.0
          env:
            - {{name: RUNNER_FEATURE_FLAG_EPHEMERAL, value: "true"}}
          resources:
            requests: {{cpu: "2", memory: 4Gi}}   # sized for the monorepo build
            limits: {{memory: 8Gi}}
"""

BUILDKITE_SET = """\
# {name}: Buildkite agents for team {team} in {cluster}.
# gitscale owns spec.replicas, spec.patchID, spec.effectiveTime and gitscale.dev/ annotations.
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: {name}
  namespace: ci-{team}
  labels: {{team: {team}, arch: {arch}, cluster: {cluster}}}
spec:
  replicas: {replicas}
  platform: buildkite
  buildkite:
    queue: {name}
    agentTokenSecret: buildkite-agent-token
    tags: ["queue={name}", "arch={arch}"]
  template:
    spec:
      nodeSelector:
        kubernetes.io/arch: {k8s_arch}
        'nvidia.com/gpu.present': 'true'
      tolerations:
        - {{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}
      containers:
        - name: agent
          image: buildkite/agent:3.87.0
          resources:
            limits: {{nvidia.com/gpu: 1, memory: 16Gi}}
"""


# -- small helpers ----------------------------------------------------------------------------
def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=CHILD_ENV, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd} failed:\n{proc.stderr}")
    return proc.stdout.strip()


def fingerprint(queued: int, running: int) -> str:
    """gitscale.core.model.Demand.fingerprint for a demand without a job list."""
    return hashlib.sha256(f"counts:{queued}/{running}".encode()).hexdigest()[:12]


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "mean": statistics.fmean(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0}


def timed_child(argv: list[str], *, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``argv``; wall time, exit code, output and the peak RSS of it and its descendants.

    os.wait4 gives this child's own rusage (its ru_maxrss is the max over the child and every
    descendant it waited for), unlike RUSAGE_CHILDREN, which accumulates over the whole run.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env or CHILD_ENV, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {"wall": wall, "code": proc.returncode, "maxrss_kib": usage.ru_maxrss,
                "cpu": usage.ru_utime + usage.ru_stime,
                "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace")}


def vm_rss_kib() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


# -- fixture --------------------------------------------------------------------------------
class Fixture:
    """Names, manifest paths and the demand sequence shared by every mode."""

    def __init__(self, sets: int, changing: int, total_passes: int, seed: int) -> None:
        rng = random.Random(seed)
        self.names: list[str] = []
        self.paths: dict[str, str] = {}
        self.texts: dict[str, str] = {}
        self.policy: dict[str, int] = {}
        for i in range(sets):
            team, cluster = TEAMS[i % len(TEAMS)], CLUSTERS[i % len(CLUSTERS)]
            arch = "arm64" if i % 4 == 3 else "x64"
            gpu = i % 7 == 6
            name = f"{team}-{'gpu' if gpu else arch}-{i:04d}"
            template = BUILDKITE_SET if gpu else GITHUB_SET
            self.names.append(name)
            self.paths[name] = f"clusters/{cluster}/{team}/{name}.yaml"
            self.texts[name] = template.format(
                name=name, team=team, cluster=cluster, arch=arch,
                k8s_arch="arm64" if arch == "arm64" else "amd64", replicas=rng.randint(0, 4))
            self.policy[name] = i % len(POLICIES)
        # demand[0] is the initial demand (the setup pass writes every set once);
        # demand[p] for p >= 1 changes exactly `changing` sets, always upwards, so every change
        # is a scale-up (no scale-down delay or quiet reset can make a later pass touch more).
        state = {n: (rng.randint(0, 5), rng.randint(1, 4)) for n in self.names}
        self.demand: list[dict[str, tuple[int, int]]] = [dict(state)]
        self.changed: list[list[str]] = [list(self.names)]
        for _ in range(total_passes):
            picked = rng.sample(self.names, changing)
            for name in picked:
                queued, running = state[name]
                state[name] = (queued + rng.randint(1, 3), running)
            self.demand.append(dict(state))
            self.changed.append(sorted(picked))

    def config_text(self) -> str:
        lines = ["# gitscale.yaml: the runner sets gitscale scales (generated by",
                 "# benchmarks/bench_reconcile.py). Demand comes from demand.yaml unless",
                 "# --demand replaces it.", "runnerSets:"]
        for name in self.names:
            lines += [f"  - name: {name}",
                      f"    manifest: {self.paths[name]}",
                      f"    object: {{kind: RunnerSet, name: {name}}}",
                      "    source: {file: demand.yaml}",
                      f"    policy: {POLICIES[self.policy[name]]}",
                      ""]
        return "\n".join(lines)

    def demand_text(self, index: int) -> str:
        lines = [f"# demand for pass {index} (generated by bench_reconcile.py)"]
        lines += [f"{name}: {{queued: {q}, running: {r}}}"
                  for name, (q, r) in self.demand[index].items()]
        return "\n".join(lines) + "\n"

    def target(self, name: str, index: int) -> int:
        """Replicas gitscale decides for ``name`` at ``index`` (no caps hit by construction)."""
        queued, running = self.demand[index][name]
        buffer = 1 if self.policy[name] == 0 else 2
        return queued + running + buffer

    def expected_paths(self, index: int) -> list[str]:
        return sorted(self.paths[n] for n in self.changed[index])


def build_template(root: Path, fx: Fixture, gitscale: list[str]) -> dict[str, Any]:
    """``root/config`` (checkout, upstream origin/main) and ``root/remote.git``, written once."""
    checkout, remote = root / "config", root / "remote.git"
    checkout.mkdir(parents=True)
    for name in fx.names:
        path = checkout / fx.paths[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fx.texts[name])
    (checkout / "gitscale.yaml").write_text(fx.config_text())
    (checkout / "demand.yaml").write_text(fx.demand_text(0))
    git(root, "init", "--quiet", "--initial-branch=main", str(checkout))
    git(checkout, "add", "--all")
    git(checkout, "commit", "--quiet", "-m", "Add runner sets")
    git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git(checkout, "remote", "add", "origin", str(remote))
    git(checkout, "push", "--quiet", "--set-upstream", "origin", "main")
    # gitscale writes every manifest once (first write: patchID 0, effectiveTime, annotations).
    run = timed_child([*gitscale, "reconcile", "--repo", str(checkout), "--demand",
                       str(checkout / "demand.yaml")])
    if run["code"] != 0:
        raise RuntimeError(f"setup reconcile failed:\n{run['stdout']}\n{run['stderr']}")
    files = git(remote, "diff-tree", "--no-commit-id", "--name-only", "-r", "main").splitlines()
    if len(files) != len(fx.names):
        raise RuntimeError(f"setup reconcile wrote {len(files)} files, expected {len(fx.names)}")
    return {"first_write_all_sets_s": run["wall"], "first_write_maxrss_kib": run["maxrss_kib"]}


def copy_fixture(template: Path, dest: Path, *, checkout: bool = True) -> tuple[Path, Path]:
    dest.mkdir(parents=True)
    shutil.copytree(template / "remote.git", dest / "remote.git", symlinks=True)
    if checkout:
        shutil.copytree(template / "config", dest / "config", symlinks=True)
        git(dest / "config", "remote", "set-url", "origin", str(dest / "remote.git"))
        git(dest / "config", "status", "--porcelain")  # refresh the copied index's stat data
    return dest / "config", dest / "remote.git"


def write_demand_files(directory: Path, fx: Fixture) -> list[Path]:
    directory.mkdir(parents=True)
    files = []
    for index in range(len(fx.demand)):
        path = directory / f"demand-{index:03d}.yaml"
        path.write_text(fx.demand_text(index))
        files.append(path)
    return files


def remote_head(remote: Path) -> str:
    return git(remote, "rev-parse", "refs/heads/main")


def verify_pass(remote: Path, before: str, expected: list[str]) -> dict[str, Any]:
    """Exactly one new commit on the remote, touching exactly ``expected``."""
    after = remote_head(remote)
    count = int(git(remote, "rev-list", "--count", f"{before}..{after}"))
    files = sorted(git(remote, "diff-tree", "--no-commit-id", "--name-only", "-r",
                       after).splitlines())
    numstat = git(remote, "diff-tree", "--no-commit-id", "--numstat", "-r", after).splitlines()
    added = sum(int(line.split()[0]) for line in numstat)
    deleted = sum(int(line.split()[1]) for line in numstat)
    ok = count == 1 and files == expected
    problem = None if ok else (f"expected 1 commit touching {len(expected)} files, got {count} "
                               f"commit(s) touching {len(files)}: "
                               f"{sorted(set(files) ^ set(expected))[:5]}")
    return {"ok": ok, "commits": count, "files": len(files), "lines_added": added,
            "lines_deleted": deleted, "head": after, "problem": problem}


# -- modes ------------------------------------------------------------------------------------
# Each runner runs one pass at a time. main() interleaves the modes pass by pass, rotating the
# order each time, so that a slow spell on a shared machine hits every mode alike.
def _failed(label: str, index: int, code: Any, check: dict[str, Any], output: str) -> RuntimeError:
    return RuntimeError(f"{label} pass {index} failed (exit {code}): {check['problem']}\n"
                        f"{output[-3000:]}")


class CliRunner:
    """One `gitscale reconcile` subprocess per pass."""

    def __init__(self, label: str, argv_for: Any, remote: Path, fx: Fixture,
                 demand_files: list[Path]) -> None:
        self.label, self.argv_for, self.remote = label, argv_for, remote
        self.fx, self.demand_files = fx, demand_files

    def run(self, index: int) -> dict[str, Any]:
        before = remote_head(self.remote)
        run = timed_child(self.argv_for(self.demand_files[index]))
        check = verify_pass(self.remote, before, self.fx.expected_paths(index))
        if run["code"] != 0 or not check["ok"]:
            raise _failed(self.label, index, run["code"], check, run["stdout"] + run["stderr"])
        return {"wall": run["wall"], "cpu": run["cpu"], "rss_kib": run["maxrss_kib"],
                "check": check}

    def close(self) -> dict[str, Any]:
        return {}


class BaselineRunner:
    """benchmarks/baseline_yq.sh, handed the same edits gitscale makes in that pass."""

    def __init__(self, checkout: Path, remote: Path, fx: Fixture, flavor: str,
                 edits_dir: Path) -> None:
        self.checkout, self.remote, self.fx = checkout, remote, fx
        self.env = {**CHILD_ENV, "YQ_FLAVOR": flavor}
        self.edits_dir = edits_dir
        edits_dir.mkdir(parents=True, exist_ok=True)
        self.comments = {"before": 0, "after": 0}

    def run(self, index: int) -> dict[str, Any]:
        fx = self.fx
        edits = self.edits_dir / f"edits-{index:03d}.txt"
        edits.write_text("".join(
            f"{fx.paths[n]} {fx.target(n, index)} {fingerprint(*fx.demand[index][n])}\n"
            for n in fx.changed[index]))
        before = remote_head(self.remote)
        run = timed_child(["bash", str(BASELINE_SCRIPT), str(self.checkout), str(edits)],
                          env=self.env)
        check = verify_pass(self.remote, before, fx.expected_paths(index))
        if run["code"] != 0 or not check["ok"]:
            raise _failed("baseline", index, run["code"], check, run["stdout"] + run["stderr"])
        for path in fx.expected_paths(index):  # did yq keep the comments? (not timed)
            old = git(self.remote, "show", f"{before}:{path}")
            new = git(self.remote, "show", f"{check['head']}:{path}")
            self.comments["before"] += sum(1 for line in old.splitlines() if "#" in line)
            self.comments["after"] += sum(1 for line in new.splitlines() if "#" in line)
        return {"wall": run["wall"], "cpu": run["cpu"], "rss_kib": run["maxrss_kib"],
                "check": check}

    def close(self) -> dict[str, Any]:
        return {"comment_lines": self.comments}


class WorkerRunner:
    """run_reconcile() in one long-lived Python process, driven a pass at a time over a pipe."""

    def __init__(self, python: str, spec_path: Path) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([python, __file__, "--worker", str(spec_path)], cwd=PROJECT,
                                     env=CHILD_ENV, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.stderr.seek(0)
            raise RuntimeError("in-process worker died:\n"
                               + self.stderr.read().decode(errors="replace")[-4000:])
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"in-process worker: {reply['error']}")
        return reply

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def run(self, index: int) -> dict[str, Any]:
        return self.send({"cmd": "pass", "index": index})

    def close(self) -> dict[str, Any]:
        self.send({"cmd": "exit"})
        self.proc.wait(timeout=60)
        self.stderr.close()
        return {"import_s": self.hello["import_s"]}


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [s["wall"] for s in samples]
    cpus = [s["cpu"] for s in samples]
    checks = [s["check"] for s in samples]
    return {
        "walls_s": walls, "wall": summary(walls), "cpu_s": cpus, "cpu": summary(cpus),
        "peak_rss_kib": max(s["rss_kib"] for s in samples),
        "rss_kib_per_pass": [s["rss_kib"] for s in samples],
        "checks": {"passes_verified": len(checks), "all_ok": all(c["ok"] for c in checks),
                   "files_per_commit": sorted({c["files"] for c in checks}),
                   "lines_added_per_commit": [c["lines_added"] for c in checks],
                   "lines_deleted_per_commit": [c["lines_deleted"] for c in checks]},
    }


def worker_main(spec_path: Path) -> int:
    """The in-process worker: a fresh interpreter (its own RSS and imports), commands on stdin."""
    import traceback

    spec = json.loads(spec_path.read_text())
    protocol = sys.stdout

    def reply(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    start = time.perf_counter()
    from gitscale.commands import RepoOptions
    from gitscale.commands.reconcile import run_reconcile
    import_s = time.perf_counter() - start

    checkout, remote = Path(spec["checkout"]), Path(spec["remote"])
    demand_files = [Path(p) for p in spec["demand_files"]]
    expected: list[list[str]] = spec["expected"]
    opts = RepoOptions(str(checkout), None, "gitscale.yaml")

    def cpu_now() -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the git processes of the pass
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    def one_pass(index: int, profiler: cProfile.Profile | None = None) -> dict[str, Any]:
        before = remote_head(remote)
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            c0 = cpu_now()
            t0 = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            code = run_reconcile(opts, demand=str(demand_files[index]), now=None, push=True)
            if profiler is not None:
                profiler.disable()
            wall = time.perf_counter() - t0
            cpu = cpu_now() - c0
        check = verify_pass(remote, before, expected[index])
        if code != 0 or not check["ok"]:
            raise _failed("in-process", index, code, check, sink.getvalue())
        return {"wall": wall, "cpu": cpu, "check": check, "vmrss_kib": vm_rss_kib(),
                "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}

    def extras(index: int, count: int, profile_out: str) -> dict[str, Any]:
        import gc
        import tracemalloc

        out: dict[str, Any] = {}
        # Python-heap peak of one pass, measured apart: tracemalloc slows a pass down a lot.
        tracemalloc.start()
        tracemalloc.reset_peak()
        traced = one_pass(index)
        index += 1
        out["tracemalloc_peak_bytes"] = tracemalloc.get_traced_memory()[1]
        out["tracemalloc_pass_s"] = traced["wall"]
        tracemalloc.stop()
        if count:
            profiler = cProfile.Profile()
            for _ in range(count):
                one_pass(index, profiler)
                index += 1
            profiler.dump_stats(profile_out)
            with phase_timers() as totals:
                walls = []
                for _ in range(count):
                    walls.append(one_pass(index)["wall"])
                    index += 1
            out["phases"] = phase_report(totals, walls)
            # What-if, not a change to gitscale: GC off during the pass, a full collection
            # after it (untimed), alternating with normal passes as the control.
            on, off, collect_s = [], [], []
            for n in range(2 * count):
                disable = n % 2 == 0
                if disable:
                    gc.disable()
                try:
                    sample = one_pass(index)
                finally:
                    gc.enable()
                index += 1
                (off if disable else on).append(sample["wall"])
                if disable:
                    t0 = time.perf_counter()
                    gc.collect()
                    collect_s.append(time.perf_counter() - t0)
            out["what_if_gc_disabled_during_pass"] = {
                "gc_off_walls_s": off, "gc_on_walls_s": on,
                "gc_off_median_s": statistics.median(off), "gc_on_median_s": statistics.median(on),
                "collect_after_pass_s": statistics.median(collect_s)}
        out["passes_used_up_to_index"] = index - 1
        return out

    reply({"ready": True, "import_s": import_s})
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["cmd"] == "pass":
                reply(one_pass(command["index"]))
            elif command["cmd"] == "extras":
                reply(extras(command["index"], command["count"], command["profile_out"]))
            elif command["cmd"] == "exit":
                reply({"bye": True})
                break
        except Exception:  # noqa: BLE001 - reported to the driving process
            reply({"error": traceback.format_exc()})
    return 0


# Direct phase timing (no profiler): wrap gitscale functions where the pass looks them up, in
# this benchmark process only. (label, module, attribute, top-level?) Nested rows are indented;
# top-level rows do not overlap each other, so "other" = pass wall - sum of top-level rows.
PHASES = [
    ("git subprocesses (every Git.run)", "gitscale.repo.git", "Git.run", True),
    ("config.load_config", "gitscale.config.load", "load_config", True),
    ("  yamlread.load_single (parse gitscale.yaml)", "gitscale.config.load", "load_single", False),
    ("  check_schema (jsonschema, gitscale.yaml)", "gitscale.config.load", "check_schema", False),
    ("  safe_repo_path x N (in load_config)", "gitscale.config.load", "safe_repo_path", False),
    ("  build_policy x N", "gitscale.config.load", "build_policy", False),
    ("demand.read_demand", "gitscale.commands.reconcile", "read_demand", True),
    ("  check_schema (jsonschema, demand file)", "gitscale.demand.file", "check_schema", False),
    ("engine.compute_plan", "gitscale.commands.reconcile", "compute_plan", True),
    ("  files.read_manifest x misses (safe_repo_path + read)", "gitscale.plan.manifest_files",
     "read_manifest", False),
    ("    safe_repo_path (in read_manifest)", "gitscale.plan.manifest_files", "safe_repo_path",
     False),
    ("  target.read_target x misses", "gitscale.manifest.target", "read_target", False),
    ("    load_documents x misses (yamlfast / PyYAML)", "gitscale.manifest.target",
     "load_documents", False),
    ("  core.decide x N", "gitscale.plan.engine", "decide", False),
    # (engine imports edit_fields when a pass writes: timed where it is defined)
    ("  manifest.edit.edit_fields x changed", "gitscale.manifest.edit", "edit_fields", False),
    ("landing.check_plan (validation)", "gitscale.plan.landing", "check_plan", True),
    ("commands.plan.plan_text (output)", "gitscale.commands.reconcile", "plan_text", True),
]


@contextlib.contextmanager
def phase_timers():
    import functools
    import gc
    import importlib

    totals: dict[str, list[float]] = {label: [0.0, 0] for label, *_ in PHASES}
    totals["gc"] = [0.0, 0]
    undo = []
    for label, module_name, attr, _ in PHASES:
        owner: Any = importlib.import_module(module_name)
        name = attr
        if "." in attr:
            cls, name = attr.split(".")
            owner = getattr(owner, cls)
        if not hasattr(owner, name):
            print(f"phase timer: {module_name}.{attr} is gone (renamed?): not timed",
                  file=sys.stderr)
            continue
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)

        def wrapper(*a, __f=original, __t=totals[label], **k):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            try:
                return __f(*a, **k)
            finally:
                __t[0] += time.perf_counter() - t0
                __t[1] += 1

        functools.update_wrapper(wrapper, original)
        setattr(owner, name, wrapper)
        undo.append((owner, name, original))
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            totals["gc"][0] += time.perf_counter() - gc_start[0]
            totals["gc"][1] += 1

    gc.callbacks.append(on_gc)
    try:
        yield totals
    finally:
        gc.callbacks.remove(on_gc)
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def phase_report(totals: dict[str, list[float]], walls: list[float]) -> dict[str, Any]:
    passes, wall = len(walls), statistics.fmean(walls)
    rows = []
    top = 0.0
    for label, _, _, is_top in PHASES:
        seconds, calls = totals[label]
        rows.append({"what": label, "s_per_pass": seconds / passes,
                     "share": seconds / passes / wall,
                     "calls_per_pass": calls / passes})
        if is_top:
            top += seconds / passes
    rows.append({"what": "other (workspace setup, clock, commit files, click, ...)",
                 "s_per_pass": wall - top, "share": (wall - top) / wall, "calls_per_pass": None})
    gc_s, gc_n = totals["gc"]
    rows.append({"what": "(of all the above: garbage collector)", "s_per_pass": gc_s / passes,
                 "share": gc_s / passes / wall, "calls_per_pass": gc_n / passes})
    return {"passes": passes, "wall_s_per_pass": wall, "rows": rows}


# -- yq -----------------------------------------------------------------------------------------
def detect_yq() -> dict[str, Any]:
    path = shutil.which("yq")
    if path is None:
        return {"flavor": None, "path": None,
                "hint": "no yq on PATH: install one with `apt-get install yq` (Debian/Ubuntu: "
                        "kislyuk's jq wrapper) or from https://github.com/mikefarah/yq"}
    version = subprocess.run([path, "--version"], capture_output=True, text=True)
    text = (version.stdout + version.stderr).strip()
    if "mikefarah" in text:
        major = re.search(r"version v?(\d+)", text)
        if major and int(major.group(1)) < 4:
            return {"flavor": None, "path": path, "version": text,
                    "hint": "mikefarah yq v3 has a different syntax; install v4"}
        return {"flavor": "mikefarah", "path": path, "version": text}
    help_text = subprocess.run([path, "--help"], capture_output=True, text=True).stdout
    if "jq" in help_text and "--yaml-roundtrip" in help_text:
        if shutil.which("jq") is None:
            return {"flavor": None, "path": path, "version": text,
                    "hint": "kislyuk yq needs jq: apt-get install jq"}
        pkg = None
        head = Path(path).read_text(errors="replace")[:400] if Path(path).is_file() else ""
        match = re.search(r"'yq==([\w.]+)'", head)
        if match:
            pkg = match.group(1)
        return {"flavor": "kislyuk", "path": path,
                "version": f"{text} (python package yq=={pkg})" if pkg else text,
                "mode": f"-{os.environ.get('YQ_KISLYUK_MODE', 'Y')} -i"}
    return {"flavor": None, "path": path, "version": text,
            "hint": f"unrecognised yq at {path}; install `apt-get install yq` or mikefarah yq v4"}


# -- profiles -----------------------------------------------------------------------------------
# (label, file suffix, function): inclusive (cumulative) time; entries nest, shares overlap.
HOTSPOTS = [
    ("imports (importlib _find_and_load)", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("git subprocesses (gitscale.repo.git.Git.run)", "gitscale/repo/git.py", "run"),
    ("  workspace.prepare_write (status, fetch, reset)", "gitscale/repo/workspace.py", "prepare_write"),
    ("  Git.commit (add, commit, rev-parse)", "gitscale/repo/git.py", "commit"),
    ("  Git.push", "gitscale/repo/git.py", "push"),
    ("config.load_config (gitscale.yaml)", "gitscale/config/load.py", "load_config"),
    ("  schemas.check_schema (jsonschema best_match)", "gitscale/config/schemas.py", "check_schema"),
    ("  config.safe_repo_path (all callers)", "gitscale/config/load.py", "safe_repo_path"),
    ("  config.build_policy", "gitscale/config/policies.py", "build_policy"),
    ("  Document.line_of (all callers)", "gitscale/yamlio/read.py", "line_of"),
    ("demand.read_demand (demand file)", "gitscale/demand/resolve.py", "read_demand"),
    ("engine.compute_plan", "gitscale/plan/engine.py", "compute_plan"),
    ("  target.read_target (1000 manifests)", "gitscale/manifest/target.py", "read_target"),
    ("  files.read_manifest (read_bytes + safe path)", "gitscale/plan/manifest_files.py",
     "read_manifest"),
    ("  edit.edit_fields (compose + splice)", "gitscale/manifest/edit.py", "edit_fields"),
    ("    verify.verify (re-parse before/after)", "gitscale/manifest/verify.py", "verify"),
    ("  core.decide", "gitscale/core/decide.py", "decide"),
    ("yamlread.load_documents (all callers)", "gitscale/yamlio/read.py", "load_documents"),
    ("  yamlread duplicate-key check", "gitscale/yamlio/read.py", "construct_mapping"),
    ("jsonschema iter_errors (all callers)", "jsonschema/validators.py", "iter_errors"),
    ("landing.check_plan (schema validation)", "gitscale/plan/landing.py", "check_plan"),
    ("  crd_schemas.SchemaValidator.__init__", "gitscale/manifest/crd_schemas.py", "__init__"),
    ("commands.plan.plan_text (diff text, mostly discarded)", "gitscale/commands/plan.py",
     "plan_text"),
]


def stale_names() -> list[str]:
    """PHASES and HOTSPOTS entries that name nothing in gitscale any more. Checked before
    anything is built: a renamed function must not cost a whole run and its results."""
    import ast
    import importlib

    stale = []
    for label, module_name, attr, _ in PHASES:
        owner: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            owner = getattr(owner, part, None)
        if owner is None:
            stale.append(f"PHASES {label.strip()!r}: {module_name}.{attr}")
    for label, suffix, func in HOTSPOTS:
        if not suffix.startswith("gitscale/"):
            continue
        tree = ast.parse((PROJECT / suffix).read_text())
        defined = {node.name for node in ast.walk(tree)
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if func not in defined:
            stale.append(f"HOTSPOTS {label.strip()!r}: no function {func} in {suffix}")
    return stale


def profile_report(path: Path, passes: int, top: int = 15) -> dict[str, Any]:
    stats = pstats.Stats(str(path))
    raw = stats.stats  # type: ignore[attr-defined]
    total = stats.total_tt  # type: ignore[attr-defined]

    def label(key: tuple[str, int, str]) -> str:
        filename, line, func = key
        short = filename
        for marker in ("site-packages/", "/work/main/", "lib/python3"):
            if marker in filename:
                short = filename.split(marker, 1)[1]
                break
        return f"{short}:{line}({func})" if line else func

    hotspots = []
    for name, suffix, func in HOTSPOTS:
        cum = sum(v[3] for k, v in raw.items() if k[0].endswith(suffix) and k[2] == func)
        calls = sum(v[1] for k, v in raw.items() if k[0].endswith(suffix) and k[2] == func)
        if calls:
            hotspots.append({"what": name, "cum_s_per_pass": cum / passes,
                             "share": cum / total if total else 0.0,
                             "calls_per_pass": calls / passes})
    own = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    cumulative = sorted(raw.items(), key=lambda kv: kv[1][3], reverse=True)
    return {
        "file": str(path), "passes": passes, "total_s_per_pass": total / passes,
        "hotspots": hotspots,
        "top_own_time": [{"function": label(k), "tottime_s_per_pass": v[2] / passes,
                          "share": v[2] / total, "calls_per_pass": v[1] / passes}
                         for k, v in own],
        "top_cumulative": [{"function": label(k), "cumtime_s_per_pass": v[3] / passes,
                            "share": v[3] / total}
                           for k, v in cumulative[:top * 2]
                           if "gitscale" in k[0] or "importlib" in k[0]
                           or "subprocess" in k[0]][:top],
    }


def import_costs(python: str, repeats: int = 5) -> dict[str, float]:
    """Median wall time of a bare interpreter and of importing what a reconcile pass imports."""
    probes = {
        "python -c pass": "pass",
        "import gitscale.cli": "import gitscale.cli",
        "import gitscale.cli + commands.reconcile":
            "import gitscale.cli, gitscale.commands.reconcile",
    }
    out = {}
    timed_child([python, "-c", probes[list(probes)[-1]]], cwd=PROJECT)  # fill the bytecode cache
    for label, code in probes.items():
        walls = [timed_child([python, "-c", code], cwd=PROJECT)["wall"] for _ in range(repeats)]
        out[label] = statistics.median(walls)
    return out


def import_time_top(python: str, top: int = 10) -> dict[str, Any]:
    """`python -X importtime`: import cost of the reconcile command, per top-level package."""
    run = subprocess.run([python, "-X", "importtime", "-c",
                          "import gitscale.cli, gitscale.commands.reconcile"],
                         capture_output=True, text=True, cwd=PROJECT, env=CHILD_ENV)
    per_package: dict[str, float] = {}
    total = 0.0
    for line in run.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if not match:
            continue
        cumulative = int(match.group(2)) / 1e6
        if len(match.group(3)) <= 1:  # top level: one space after the bar
            total += cumulative
        package = match.group(4).split(".")[0]
        if package != "gitscale":  # gitscale's own rows include everything they import
            per_package[package] = max(per_package.get(package, 0.0), cumulative)
    rows = sorted(per_package.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return {"total_s": total, "packages": [{"package": k, "cumulative_s": v} for k, v in rows]}


# -- report -------------------------------------------------------------------------------------
def fmt_kib(kib: float | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.0f} MiB"


def print_table(results: dict[str, Any]) -> None:
    modes = results["modes"]
    base = modes.get("baseline")
    print()
    print(f"gitscale reconcile, {results['params']['sets']} sets, "
          f"{results['params']['changing']} changing per pass, median of "
          f"{results['params']['passes']} passes (+{results['params']['warmup']} warm-up)")
    header = (f"{'mode':<36} {'median':>8} {'min':>8} {'max':>8} {'cpu':>7} {'peak RSS':>9} "
              f"{'py heap':>9} {'≤0.5s':>6} {'base/x':>7} {'≥10×':>5}")
    print(header)
    print("-" * len(header))
    for key, title in (("cli-checkout", "CLI subprocess, checkout"),
                       ("in-process", "in-process run_reconcile (loop)"),
                       ("cli-clone", "CLI subprocess, clone of remote.git"),
                       ("baseline", f"baseline: yq ({results['yq'].get('flavor')}) + git")):
        m = modes.get(key)
        if m is None:
            continue
        wall = m["wall"]
        rss = m.get("peak_rss_kib", m.get("ru_maxrss_kib"))
        heap = m.get("tracemalloc_peak_bytes")
        heap_s = f"{heap / 2**20:.0f} MiB" if heap else "-"
        if key == "baseline":
            target, ratio, ok = "", "1.00", ""
        else:
            target = "yes" if wall["median"] <= TARGET_SECONDS else "NO"
            ratio_v = base["wall"]["median"] / wall["median"] if base else None
            ratio = f"{ratio_v:.2f}" if ratio_v else "-"
            ok = ("yes" if ratio_v >= TARGET_RATIO else "NO") if ratio_v else "-"
        print(f"{title:<36} {wall['median']:>7.3f}s {wall['min']:>7.3f}s {wall['max']:>7.3f}s "
              f"{m['cpu']['median']:>6.2f}s {fmt_kib(rss):>9} {heap_s:>9} {target:>6} "
              f"{ratio:>7} {ok:>5}")
    print("  modes interleaved pass by pass; cpu = user+sys of the pass incl. git children")
    ip = modes.get("in-process")
    if ip:
        print(f"  in-process: import {ip['import_s']:.3f}s once, first (cold) pass "
              f"{ip['first_pass_s']:.3f}s, VmRSS after each pass (MiB): "
              f"{[round(r / 1024) for r in ip['vmrss_kib_after_each_pass'] if r]}")
    setup = results["setup"]
    print(f"  setup: first write of all {results['params']['sets']} sets by one CLI reconcile: "
          f"{setup['first_write_all_sets_s']:.2f}s, peak RSS "
          f"{fmt_kib(setup['first_write_maxrss_kib'])}")
    for key in ("cli-checkout", "baseline"):
        m = modes.get(key)
        if m:
            c = m["checks"]
            print(f"  {key}: {c['passes_verified']} passes verified, 1 commit each touching "
                  f"{c['files_per_commit']} files; lines +{c['lines_added_per_commit']} "
                  f"-{c['lines_deleted_per_commit']}")
    if base:
        cm = base["comment_lines"]
        print(f"  observation: yq baseline kept {cm['after']} of {cm['before']} comment lines in "
              f"the files it edited; gitscale edits keep every byte outside the owned fields")
    elif results["yq"].get("hint"):
        print(f"  baseline skipped: {results['yq']['hint']}")
    if results.get("imports"):
        print("  interpreter/import cost (median of 5): " + ", ".join(
            f"{k} {v:.3f}s" for k, v in results["imports"].items()))


def print_profile(title: str, report: dict[str, Any]) -> None:
    print(f"\nprofile: {title} — {report['passes']} pass(es), "
          f"{report['total_s_per_pass']:.3f}s per pass under cProfile ({report['file']})")
    print(f"  {'inclusive time (nested rows overlap)':<58} {'s/pass':>7} {'share':>6} {'calls':>8}")
    for h in report["hotspots"]:
        print(f"  {h['what']:<58} {h['cum_s_per_pass']:>7.3f} {h['share']:>6.1%} "
              f"{h['calls_per_pass']:>8.0f}")
    print(f"  {'top own time (tottime)':<58} {'s/pass':>7} {'share':>6} {'calls':>8}")
    for row in report["top_own_time"][:10]:
        print(f"  {row['function'][:58]:<58} {row['tottime_s_per_pass']:>7.3f} "
              f"{row['share']:>6.1%} {row['calls_per_pass']:>8.0f}")


# -- main ---------------------------------------------------------------------------------------
def save_results(results: dict[str, Any], directory: Path, stamp: str) -> Path:
    """Ratios and verdicts from what was measured so far, written as JSON (and -latest)."""
    base = results["modes"].get("baseline")
    results["ratios_baseline_over_mode"] = {
        k: base["wall"]["median"] / m["wall"]["median"]
        for k, m in results["modes"].items() if base and k != "baseline"}
    results["verdicts"] = {
        k: {"median_le_0.5s": m["wall"]["median"] <= TARGET_SECONDS,
            "ratio_ge_10x": (results["ratios_baseline_over_mode"].get(k, 0) >= TARGET_RATIO)
            if base else None}
        for k, m in results["modes"].items() if k != "baseline"}
    out = directory / f"reconcile-{stamp}.json"
    out.write_text(json.dumps(results, indent=2))
    shutil.copyfile(out, directory / "reconcile-latest.json")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=1000)
    parser.add_argument("--changing", type=int, default=10)
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes per mode first")
    parser.add_argument("--profile-passes", type=int, default=3,
                        help="passes profiled with cProfile (0: no profiling)")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--modes", default="cli-checkout,in-process,cli-clone,baseline")
    parser.add_argument("--workdir", help="where to build the repos (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--inherit-pyc-env", action="store_true",
                        help="keep this shell's PYTHONDONTWRITEBYTECODE/PYTHONPYCACHEPREFIX for "
                             "the gitscale processes (default: bytecode is cached under the work "
                             "directory, as for an installed package)")
    parser.add_argument("--import-repeats", type=int, default=5,
                        help="interpreter starts per import-cost probe (0: no import costs)")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="where JSON and .prof files go (default: benchmarks/results/)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(Path(args.worker))
    stale = stale_names()
    if stale:
        print("benchmark out of date with gitscale (fix the names in bench_reconcile.py):\n  "
              + "\n  ".join(stale), file=sys.stderr)
        return 2
    results_dir: Path = args.results
    if args.changing < 1 or args.changing > args.sets:
        parser.error("--changing must be between 1 and --sets")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    python = sys.executable
    script = Path(python).parent / "gitscale"
    gitscale = [str(script)] if script.exists() else [python, "-m", "gitscale"]
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gitscale-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results_dir.mkdir(parents=True, exist_ok=True)
    inherited_pyc = {k: os.environ.get(k)
                     for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if not args.inherit_pyc_env:
        # With PYTHONDONTWRITEBYTECODE set (as in some sandboxes) every CLI start would recompile
        # gitscale from source. Cache bytecode in the work dir instead (never inside gitscale/).
        CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")

    # Demand files: 0 = setup; then warmup+passes for every mode; then, in-process only, one
    # tracemalloc pass, the cProfile passes, as many timed phase by phase and twice as many for
    # the GC what-if (the CLI profile reuses the first of those indexes on its own repo).
    total = args.warmup + args.passes + 1 + 4 * args.profile_passes
    fx = Fixture(args.sets, args.changing, total, args.seed)
    yq = detect_yq()
    results: dict[str, Any] = {
        "params": {"sets": args.sets, "changing": args.changing, "passes": args.passes,
                   "warmup": args.warmup, "profile_passes": args.profile_passes,
                   "seed": args.seed, "modes": modes},
        "command": " ".join([os.path.relpath(python, PROJECT), os.path.relpath(__file__, PROJECT),
                             *(argv if argv is not None else sys.argv[1:])]),
        "targets": {"median_pass_s": TARGET_SECONDS, "ratio_vs_baseline": TARGET_RATIO},
        "environment": {
            "python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "git": subprocess.run(["git", "--version"], capture_output=True,
                                                          text=True).stdout.strip(),
            "gitscale_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT,
                                              capture_output=True, text=True).stdout.strip(),
            "gitscale_tree_dirty": bool(subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no", "--", "gitscale"],
                cwd=PROJECT, capture_output=True, text=True).stdout.strip()),
            "kubeconform": shutil.which("kubeconform"),
            "inherited_pyc_env": inherited_pyc,
            "child_pyc_env": {k: CHILD_ENV.get(k) for k in inherited_pyc},
        },
        "yq": yq, "workdir": str(work), "modes": {},
    }
    try:
        print(f"building {args.sets} runner sets in {work} ...", flush=True)
        template = work / "template"
        results["setup"] = build_template(template, fx, gitscale)
        print(f"  first write of all sets: {results['setup']['first_write_all_sets_s']:.1f}s",
              flush=True)
        demand_files = write_demand_files(work / "demand", fx)
        expected = [fx.expected_paths(i) for i in range(len(fx.demand))]

        runners: dict[str, Any] = {}
        if "cli-checkout" in modes:
            cli_checkout, cli_remote = copy_fixture(template, work / "cli-checkout")
            runners["cli-checkout"] = CliRunner(
                "cli-checkout", lambda d: [*gitscale, "reconcile", "--repo", str(cli_checkout),
                                           "--demand", str(d)],
                cli_remote, fx, demand_files)
        if "in-process" in modes:
            checkout, remote = copy_fixture(template, work / "in-process")
            spec_path = work / "worker-spec.json"
            spec_path.write_text(json.dumps({
                "checkout": str(checkout), "remote": str(remote),
                "demand_files": [str(p) for p in demand_files], "expected": expected}))
            runners["in-process"] = WorkerRunner(python, spec_path)
        if "cli-clone" in modes:
            _, clone_remote = copy_fixture(template, work / "cli-clone", checkout=False)
            runners["cli-clone"] = CliRunner(
                "cli-clone", lambda d: [*gitscale, "reconcile", "--repo", str(clone_remote),
                                        "--demand", str(d)],
                clone_remote, fx, demand_files)
        if "baseline" in modes:
            if yq["flavor"] is None:
                print(f"baseline skipped: {yq['hint']}", flush=True)
            else:
                checkout, remote = copy_fixture(template, work / "baseline")
                runners["baseline"] = BaselineRunner(checkout, remote, fx, yq["flavor"],
                                                     work / "baseline-edits")

        order = list(runners)
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
        first: dict[str, float] = {}
        for n in range(args.warmup + args.passes):
            index = n + 1
            turn = order[n % len(order):] + order[:n % len(order)]
            shown = []
            for key in turn:
                sample = runners[key].run(index)
                first.setdefault(key, sample["wall"])
                if n >= args.warmup:
                    samples[key].append(sample)
                shown.append(f"{key} {sample['wall']:.2f}s")
            tag = "warm-up" if n < args.warmup else f"pass {n - args.warmup + 1}/{args.passes}"
            print(f"  {tag}: " + ", ".join(shown), flush=True)

        for key in order:
            results["modes"][key] = {**summarise(samples[key]), "first_pass_s": first[key]}
        out = save_results(results, results_dir, stamp)  # the timed passes are kept from here on
        try:
            next_index = args.warmup + args.passes + 1
            if "in-process" in runners:
                worker = runners["in-process"]
                ip = results["modes"]["in-process"]
                ip["vmrss_kib_after_each_pass"] = [s["vmrss_kib"] for s in samples["in-process"]]
                print("in-process: tracemalloc, cProfile, phase timing, GC what-if ...", flush=True)
                prof_path = results_dir / f"reconcile-{stamp}-inprocess.prof"
                ip.update(worker.send({"cmd": "extras", "index": next_index,
                                       "count": args.profile_passes, "profile_out": str(prof_path)}))
                if args.profile_passes:
                    results["profile_in_process"] = profile_report(prof_path, args.profile_passes)
            for key in order:
                results["modes"][key].update(runners[key].close())

            if "cli-checkout" in runners and args.profile_passes:
                # Whole CLI processes under cProfile (imports included), on the same checkout.
                print("cli-checkout: cProfile ...", flush=True)
                prof_files = []
                for n in range(args.profile_passes):
                    index = next_index + n
                    out = results_dir / f"reconcile-{stamp}-cli-{n}.prof"
                    before = remote_head(cli_remote)
                    run = timed_child([python, "-m", "cProfile", "-o", str(out), "-m", "gitscale",
                                       "reconcile", "--repo", str(cli_checkout), "--demand",
                                       str(demand_files[index])], cwd=PROJECT)
                    check = verify_pass(cli_remote, before, expected[index])
                    if not check["ok"]:
                        raise _failed("profiled cli-checkout", index, run["code"], check,
                                      run["stdout"] + run["stderr"])
                    prof_files.append(out)
                merged_path = results_dir / f"reconcile-{stamp}-cli.prof"
                pstats.Stats(*[str(p) for p in prof_files]).dump_stats(str(merged_path))
                for p in prof_files:
                    p.unlink()
                results["profile_cli"] = profile_report(merged_path, args.profile_passes)

            if args.import_repeats and ("cli-checkout" in modes or "in-process" in modes):
                print("import costs ...", flush=True)
                results["imports"] = import_costs(python, args.import_repeats)
                results["import_time_top"] = import_time_top(python)
        except Exception:  # noqa: BLE001 - the timed results are saved; say what failed
            results["error_after_timed_passes"] = traceback.format_exc()
            print("the extras after the timed passes failed (timed results kept):\n"
                  + results["error_after_timed_passes"], file=sys.stderr, flush=True)
            for runner in runners.values():
                with contextlib.suppress(Exception):
                    runner.close()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    out = save_results(results, results_dir, stamp)

    print_table(results)
    phases = results["modes"].get("in-process", {}).get("phases")
    if phases:
        print(f"\nphases of an in-process pass, timed directly (no profiler; "
              f"{phases['passes']} passes, {phases['wall_s_per_pass']:.3f}s per pass)")
        for row in phases["rows"]:
            calls = "" if row["calls_per_pass"] is None else f"{row['calls_per_pass']:>8.0f}"
            print(f"  {row['what']:<58} {row['s_per_pass']:>7.3f}s {row['share']:>6.1%} {calls}")
    gc_off = results["modes"].get("in-process", {}).get("what_if_gc_disabled_during_pass")
    if gc_off:
        print(f"  what-if (benchmark only, alternating passes): GC disabled during the pass "
              f"{gc_off['gc_off_median_s']:.3f}s vs {gc_off['gc_on_median_s']:.3f}s with GC on "
              f"(medians), + gc.collect() after the pass "
              f"{gc_off['collect_after_pass_s'] * 1000:.0f}ms")
    if "profile_in_process" in results:
        print_profile("in-process run_reconcile", results["profile_in_process"])
    if "profile_cli" in results:
        print_profile("CLI subprocess (python -m cProfile -m gitscale reconcile)",
                      results["profile_cli"])
    if results.get("import_time_top"):
        imports = results["import_time_top"]
        print("\nimports of `gitscale reconcile` (python -X importtime): "
              f"{imports['total_s']:.3f}s "
              "in all; heaviest packages (cumulative, overlapping):")
        print("  " + ", ".join(f"{row['package']} {row['cumulative_s'] * 1000:.0f}ms"
                               for row in imports["packages"][:8]))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
