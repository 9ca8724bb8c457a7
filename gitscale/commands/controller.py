"""`gitscale controller`: turn each RunnerSet into ephemeral runner pods, until SIGTERM."""
from __future__ import annotations

import logging
import time
from datetime import timedelta

from gitscale.commands import EXIT_OK, stop_on_signals


def _logging() -> None:
    """The controller logs through ``logging``, in the line format of `run` and `serve`."""
    handler = logging.StreamHandler()
    formatter = logging.Formatter("%(asctime)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger("gitscale")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def run_controller(kubeconfig: str | None, namespace: str | None, concurrency: int,
                   health_port: int, shutdown_timeout: float = 20.0,
                   leftover_grace: float = 60.0) -> int:
    from gitscale.controller import kube
    from gitscale.controller.loop import Controller, serve_health

    _logging()
    api = kube.Kube(kube.load(kubeconfig, pool_size=concurrency + 8))
    controller = Controller(api, namespace=namespace, concurrency=concurrency,
                            shutdown_timeout=shutdown_timeout)
    controller.ctx.leftover_grace = timedelta(seconds=leftover_grace)
    stop = stop_on_signals(f"finishing the passes in flight (up to {shutdown_timeout:g}s)")
    health = serve_health(controller, health_port) if health_port else None
    controller.start()
    logging.getLogger("gitscale.controller").info(
        "watching RunnerSets in %s (concurrency %d)", namespace or "all namespaces", concurrency)
    stop.wait()
    controller.stop()
    if health is not None:
        health.shutdown()
    api.close()
    return EXIT_OK
