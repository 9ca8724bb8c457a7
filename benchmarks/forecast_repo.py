"""A config repo whose history holds weeks of scaling commits of a weekday 09:00 burst.

Used by ``bench_forecast.py`` and by the tests of the forecast (``tests/plan/test_forecast_plan.py``).
One set, ``linux``, on a demand file, with a forecast policy. The commits are built with one
``git fast-import``: each is a real gitscale commit (subject, body, ``Gitscale-Set`` trailer,
``Gitscale-Base``) that changes the manifest's replicas and patch ID, as ``reconcile`` writes
them. The demand they record comes from ``gitscale simulate``'s weekly trace: every 10 s the
jobs that arrived and have not finished (a job waits a minute for its runner, then runs), a
commit when that count rose, or fell and the last commit is a minute old.
"""
from __future__ import annotations

import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gitscale.record.commitmsg import SetLine, format_message
from gitscale.simulate.trace import WEEKLY_START, synthetic

SET = "linux"
POLICY = "{maxReplicas: 200, scaleDownDelay: 5m, forecast: {lookback: 14d, quantile: 0.9, lead: 1m}}"
MANIFEST = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux
spec:
  replicas: {replicas}
  patchID: {patch}
  effectiveTime: "{time}"
  platform: github
  github: {{configURL: "https://github.com/example", credentialsSecret: github-app}}
  template:
    spec:
      containers:
        - name: runner
          image: runner:1
"""
CONFIG = f"""\
runnerSets:
  - name: {SET}
    manifest: sets/{SET}.yaml
    source: {{file: demand.yaml}}
    policy: {POLICY}
"""
STEP = 10.0  # seconds between the passes whose demand is recorded
WAIT = 60.0  # a job's wait for its runner (reactive: a decision, the sync and a pod start)


def levels(days: float, seed: int) -> list[tuple[float, int]]:
    """(POSIX seconds, queued + running) at each commit of ``days`` of the weekly trace."""
    trace = synthetic("weekly", seed=seed, hours=days * 24, sets=[SET])
    start = trace.start.timestamp()
    events: list[tuple[float, int]] = []
    for job in trace.jobs:
        events += [(job.arrival, 1), (job.arrival + WAIT + job.duration, -1)]
    events.sort()
    found: list[tuple[float, int]] = [(start, 0)]
    level, index, at = 0, 0, 0.0
    while at < days * 86400:
        while index < len(events) and events[index][0] <= at:
            level += events[index][1]
            index += 1
        last_at, last = found[-1]
        if level > last or (level < last and start + at - last_at >= 60):
            found.append((start + at, level))
        at += STEP
    return found


def build(remote: Path, days: float = 14, seed: int = 1) -> list[tuple[float, int]]:
    """A bare repo at ``remote`` (branch main) with ``days`` of scaling commits from Monday
    2026-01-05 00:00 UTC. Returns the (time, demand) of each commit, oldest first; the first
    is the init commit's, which records no demand (the history a forecast reads is the rest)."""
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(remote)],
                   check=True)
    series = levels(days, seed)
    feed = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=remote, stdin=subprocess.PIPE)
    assert feed.stdin is not None
    out = feed.stdin

    def data(text: str) -> None:
        raw = text.encode()
        out.write(b"data %d\n" % len(raw) + raw + b"\n")

    def who(when: float) -> bytes:
        return b"gitscale <gitscale@users.noreply.gitscale.dev> %d +0000\n" % int(when)

    first = series[0][0]
    out.write(b"commit refs/heads/main\nmark :1\ncommitter " + who(first))
    data("init\n")
    for path, text in (("gitscale.yaml", CONFIG), ("demand.yaml", f"{SET}: {{queued: 0, running: 0}}\n"),
                       (f"sets/{SET}.yaml", MANIFEST.format(replicas=0, patch=0, time=_iso(first)))):
        out.write(f"M 100644 inline {path}\n".encode())
        data(text)
    previous, patch = 0, 0
    for number, (when, level) in enumerate(series[1:], start=2):
        patch += 1
        reason = "scale-up" if level > previous else "scale-down"
        line = SetLine(SET, level, previous, patch, 0, level, reason,
                       f"demand {level} (queued 0, running {level})")
        out.write(b"commit refs/heads/main\nmark :%d\ncommitter " % number + who(when))
        data(format_message([line], "0" * 40))
        out.write(b"from :%d\n" % (number - 1))
        out.write(f"M 100644 inline sets/{SET}.yaml\n".encode())
        data(MANIFEST.format(replicas=level, patch=patch, time=_iso(when)))
        previous = level
    out.close()
    if feed.wait() != 0:
        raise RuntimeError("git fast-import failed")
    return series


def day(number: int, hour: int, minute: int) -> datetime:
    """Day ``number`` (1 = the first Monday) of the weekly trace, at a UTC wall time."""
    return WEEKLY_START + timedelta(days=number - 1, hours=hour, minutes=minute)


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
