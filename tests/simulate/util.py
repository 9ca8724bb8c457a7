"""Shared pieces of the simulate tests: policies, tiny traces, a config repo."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gitscale.core.policy import Policy
from gitscale.simulate.trace import DEFAULT_START, Job, Trace
from tests.helpers import RUNNERSET, make_repo, simple_config, write

# The outcome targets' policy: {minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m}.
TARGET = Policy(min_replicas=0, max_replicas=200, scale_down_delay=timedelta(minutes=5))


def trace_of(*jobs: tuple[float, float] | tuple[float, float, str], hours: float = 1.0) -> Trace:
    """A trace from (arrival, duration[, set]) tuples, in the order given."""
    built = tuple(Job(i, job[2] if len(job) == 3 else "default", job[0], job[1])  # type: ignore[misc]
                  for i, job in enumerate(jobs))
    return Trace("hand-made", DEFAULT_START, built, hours)


def config_files(sets: dict[str, str]) -> dict[str, str]:
    """gitscale.yaml, a demand file and one RunnerSet per name → inline policy."""
    files = {"gitscale.yaml": simple_config(sets),
             "demand.yaml": "".join(f"{name}: {{queued: 0, running: 0}}\n" for name in sets)}
    return files | {f"sets/{name}.yaml": RUNNERSET.format(name=name, replicas=0)
                    for name in sets}


def config_dir(root: Path, sets: dict[str, str]) -> Path:
    """The config files in a plain directory: enough for simulate on a CSV or a shape."""
    write(root, config_files(sets))
    return root


def config_repo(tmp_path: Path, sets: dict[str, str]) -> Path:
    """A config repo (checkout and bare remote), for --from-history."""
    return make_repo(tmp_path, config_files(sets))
