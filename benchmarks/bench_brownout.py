"""A creation wave during an API-server brownout, and with one hiccup (not a test).

    .venv/bin/python benchmarks/bench_brownout.py                  # 200 runners, ~20 s
    .venv/bin/python benchmarks/bench_brownout.py --replicas 500 --concurrency 16

The controller (``tests/controller/harness.py``: informers for real, passes run by the
benchmark on the harness's clock, each pass after the wait the one before asked for) creates a
GitHub set of ``--replicas`` runners against ``tests/kubeapi``'s server and the GitHub fake.
Each runner is a registration (``generate-jitconfig``), a Secret and a pod; a creation that
fails unregisters its runner (``DELETE …/actions/runners/{id}``). Scenarios:

- ``brownout``: after the pass's dry run, every Secret creation answers 503 for a minute of the
  controller's clock; the figures are GitHub's requests over that minute (registrations and
  removals: content-creating requests, about 80 a minute allowed) and the pass count;
- ``partial``: one Secret creation in three answers 503 (one of three API servers failing
  behind a load balancer), until the set is complete: GitHub's requests and the time;
- ``hiccup``: one pod creation (the wave's 100th; ``--hiccup N``: N in a row from it) answers
  500: the passes and the controller's time until every runner exists (one pass, then the
  missing runner after the backoff).
"""
from __future__ import annotations

import argparse
import itertools
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.controller.harness import Harness, start  # noqa: E402
from tests.kubeapi.errors import APIError  # noqa: E402

JIT = "generate-jitconfig"


def github_requests(harness: Harness) -> tuple[int, int]:
    return (harness.github.count("POST", JIT),
            harness.github.count("DELETE", r"actions/runners/\d+"))


def run(harness: Harness, replicas: int, until: float | None) -> tuple[int, float, float]:
    """Passes over the set, each after the wait the last one asked for, until every runner
    exists or ``until`` seconds of the controller's clock ran out. Returns the passes, the
    controller's seconds and the wall seconds."""
    harness.write("rs", replicas, 1)
    passes, clock, started = 0, 0.0, time.perf_counter()
    while True:
        report = harness.sync("rs")
        passes += 1
        if len(harness.pods("rs")) == replicas or report.requeue_after is None:
            break
        if until is not None and clock + report.requeue_after > until:
            break
        clock += report.requeue_after
        harness.clock.advance(report.requeue_after)
    return passes, clock, time.perf_counter() - started


def scenario(name: str, replicas: int, concurrency: int, hiccup: int) -> str:
    gen = start(concurrency=concurrency)
    harness = next(gen)
    try:
        api = harness.api
        if name == "brownout":
            api.inject_error("create", "secrets", code=503, reason="ServiceUnavailable",
                             skip=1, times=10**9)
            passes, clock, wall = run(harness, replicas, until=60.0)
        elif name == "partial":
            counter = itertools.count()

            def every_third(verb: str, resource: str, query: dict[str, str]) -> None:
                if (verb, resource) == ("create", "secrets") and "dryRun" not in query and \
                        next(counter) % 3 == 2:
                    raise APIError(503, "ServiceUnavailable", "one API server of three failing")
            api.on_call(every_third)
            passes, clock, wall = run(harness, replicas, until=3600.0)
        else:
            api.inject_error("create", "pods", code=500, reason="InternalError", skip=100,
                             times=hiccup)
            passes, clock, wall = run(harness, replicas, until=None)
        posts, deletes = github_requests(harness)
        made = len(harness.pods("rs"))
        return (f"{name:9} {replicas} runners: {made} made in {passes} pass(es), "
                f"{clock:.0f} s of the controller's clock ({wall:.1f} s wall); GitHub: "
                f"{posts} registrations, {deletes} removals")
    finally:
        gen.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16,
                        help="the controller's --concurrency (its default: 16)")
    parser.add_argument("--hiccup", type=int, default=1,
                        help="pod creations in a row that the hiccup fails")
    parser.add_argument("--scenario", choices=["brownout", "partial", "hiccup"],
                        action="append")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # (the passes' warnings: the figures are the output)
    for name in args.scenario or ["brownout", "partial", "hiccup"]:
        print(scenario(name, args.replicas, args.concurrency, args.hiccup), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
