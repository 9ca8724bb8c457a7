"""`gitscale controller`: turn each RunnerSet into ephemeral runner pods, until SIGTERM."""
from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from gitscale.commands import EXIT_OK


def run_controller(kubeconfig: str | None, namespace: str | None, concurrency: int,
                   health_port: int) -> int:
    from gitscale.controller import kube
    from gitscale.controller.loop import Controller, serve_health

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    api = kube.Kube(kube.load(kubeconfig, pool_size=concurrency + 8))
    controller = Controller(api, namespace=namespace, concurrency=concurrency)
    stop = threading.Event()

    def on_signal(signum: int, _: FrameType | None) -> None:
        logging.getLogger("gitscale.controller").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
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
