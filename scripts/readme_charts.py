"""The README's charts, drawn from real commands: `bash scripts/readme-charts [OUT_DIR]`.

history.png: the demo config repo (`gitscale demo`'s) after an evening and a busy Monday morning,
one `gitscale reconcile --now T --demand F` per minute, then
`gitscale history --chart docs/img/history.png`.

simulate.png: `gitscale simulate --synthetic spiky --hours 3` with buffer 0 and buffer 2 and the
baselines, `--chart docs/img/simulate.png`.
"""
from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gitscale.cli import main
from gitscale.commands.demo import build_demo_repo

ROOT = Path(__file__).resolve().parents[1]
# Demand from this minute on (UTC): linux-x64 (queued, running), gpu (queued, running).
MORNING = [
    ("08:00", (0, 0), (0, 0)), ("08:41", (2, 0), (0, 0)), ("08:43", (0, 2), (0, 0)),
    ("08:48", (3, 2), (0, 0)), ("08:50", (1, 4), (1, 0)), ("08:52", (0, 5), (0, 1)),
    ("08:56", (7, 5), (0, 1)), ("08:58", (2, 10), (0, 1)), ("09:00", (9, 11), (2, 1)),
    ("09:02", (3, 17), (0, 3)), ("09:05", (4, 18), (0, 3)), ("09:07", (0, 19), (0, 2)),
    ("09:11", (0, 14), (0, 2)), ("09:14", (0, 9), (0, 0)), ("09:18", (0, 6), (0, 0)),
    ("09:21", (5, 6), (0, 0)), ("09:23", (0, 10), (0, 0)), ("09:30", (0, 7), (0, 0)),
    ("09:36", (0, 3), (0, 0)), ("09:42", (0, 1), (0, 0)), ("09:47", (0, 0), (0, 0)),
]


def demand_at(minute: datetime) -> str:
    clock = minute.strftime("%H:%M")
    _, linux, gpu = [row for row in MORNING if row[0] <= clock][-1]
    return (f"linux-x64: {{queued: {linux[0]}, running: {linux[1]}}}\n"
            f"gpu: {{queued: {gpu[0]}, running: {gpu[1]}}}\n")


def gitscale(*argv: str) -> None:
    """Run one gitscale command in-process; its output is shown only when it fails."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    if code != 0:
        sys.exit(f"gitscale {' '.join(argv)} failed with exit {code}:\n{out.getvalue()}")


def reconcile(checkout: Path, demand: Path, now: datetime, text: str) -> None:
    demand.write_text(text)
    gitscale("reconcile", "--repo", str(checkout), "--demand", str(demand),
             "--now", now.strftime("%Y-%m-%dT%H:%M:%SZ"))


def history_chart(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="gitscale-readme-") as tmp:
        _, checkout = build_demo_repo(Path(tmp))
        demand = Path(tmp) / "demand.yaml"
        evening = datetime(2026, 11, 22, 18, 40, tzinfo=timezone.utc)
        reconcile(checkout, demand, evening, "linux-x64: {queued: 0, running: 0}\n"
                  "gpu: {queued: 0, running: 0}\n")
        minute = datetime(2026, 11, 23, 8, 30, tzinfo=timezone.utc)
        while minute <= datetime(2026, 11, 23, 10, 15, tzinfo=timezone.utc):
            reconcile(checkout, demand, minute, demand_at(minute))
            minute += timedelta(minutes=1)
        gitscale("history", "--repo", str(checkout), "--chart", str(out))


def simulate_chart(out: Path) -> None:
    gitscale("simulate", "--synthetic", "spiky", "--hours", "3", "--seed", "1",
             "--policy", "{maxReplicas: 200, scaleDownDelay: 5m}",
             "--policy", "{maxReplicas: 200, buffer: 2, scaleDownDelay: 5m}",
             "--chart", str(out))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img"
    target.mkdir(parents=True, exist_ok=True)
    history_chart(target / "history.png")
    print(f"wrote {target / 'history.png'}", file=sys.stderr)
    simulate_chart(target / "simulate.png")
    print(f"wrote {target / 'simulate.png'}", file=sys.stderr)
