"""`gitscale controller`: turn each RunnerSet into ephemeral runner pods, until SIGTERM."""
from __future__ import annotations

import logging
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gitscale import logline
from gitscale.commands import EXIT_OK, stop_on_signals
from gitscale.errors import InputError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
NAMESPACE = re.compile(r"(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a DNS-1123 label
# a Lease's name: a DNS-1123 subdomain
LEASE_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class Election:
    """The `--leader-elect` options (timings in seconds, as controller-runtime names them)."""

    enabled: bool = False
    namespace: str | None = None
    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    lease_name: str = "gitscale-controller"  # --leader-election-id


def _logging(log_format: str = "text") -> logging.Handler:
    """The controller logs through ``logging``, in the line format of `run` and `serve` (text,
    or JSON: ``GITSCALE_LOG_FORMAT``); every line masked (``redact``): gitscale's own from
    INFO, and the libraries' (the kubernetes client, urllib3) from WARNING, which would
    otherwise reach stderr through Python's last-resort handler, unmasked. Returns the handler
    (tests remove it)."""
    from gitscale.controller.logmask import MASK_LOG, JsonFormatter

    handler = logging.StreamHandler()
    handler.addFilter(MASK_LOG)
    if log_format == "json":
        handler.setFormatter(JsonFormatter("controller"))
    else:
        formatter = logging.Formatter("%(asctime)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("gitscale").setLevel(logging.INFO)
    return handler


def lease_namespace(option: str | None, watched: str | None) -> str:
    """Where the Lease lives: the option, else the controller's own namespace (the downward
    API's POD_NAMESPACE, or the service account's), else the watched one, else default."""
    if option:
        return option
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or watched or "default"
    except OSError:
        return watched or "default"


def controller_command(*, repo: str | None, leader_elect: bool,
                       leader_election_namespace: str | None, leader_election_id: str,
                       lease_duration: int, renew_deadline: float, retry_period: float,
                       **options: Any) -> int:
    """`gitscale controller` as its options come: no ``--repo`` (it reads RunnerSets from the
    cluster), the ``--leader-*`` ones made its ``Election``; the rest are ``run_controller``'s."""
    if repo is not None:
        raise InputError("--repo", "the controller reads RunnerSets from the cluster (Argo CD "
                         "or Flux applies them from the config repo); it never reads the repo")
    election = Election(leader_elect, leader_election_namespace, lease_duration,
                        renew_deadline, retry_period, leader_election_id)
    return run_controller(**options, election=election)


def run_controller(kubeconfig: str | None, namespace: str | None, concurrency: int,
                   health_port: int, shutdown_timeout: float = 20.0,
                   leftover_grace: float = 60.0, election: Election = Election()) -> int:
    from gitscale.controller import kube, kube_config
    from gitscale.controller.leader import LeaseConfig
    from gitscale.controller.loop import Controller, serve_health

    log_format = logline.start("controller")
    for option, value in (("--namespace", namespace),
                          ("--leader-election-namespace", election.namespace)):
        if value is not None and not NAMESPACE.fullmatch(value):
            raise InputError(option, f"{value!r} is not a Kubernetes namespace name (at most "
                             "63 lower-case letters, digits and '-', starting and ending with "
                             "a letter or digit)")
    lease = None
    if election.enabled:
        if not LEASE_NAME.fullmatch(election.lease_name):
            raise InputError("--leader-election-id", f"{election.lease_name!r} is not a valid "
                             "Lease name (lowercase letters, digits, '-' and '.', at most 253, "
                             "starting and ending with a letter or digit)")
        try:
            lease = LeaseConfig(lease_namespace(election.namespace, namespace),
                                f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
                                duration=election.lease_duration,
                                renew_deadline=election.renew_deadline,
                                retry=election.retry_period, name=election.lease_name)
        except ValueError as exc:
            raise InputError("--lease-duration/--renew-deadline/--retry-period", str(exc)) \
                from None
    _logging(log_format)
    api = kube.Kube(kube_config.load(kubeconfig, pool_size=concurrency + 8))
    controller = Controller(api, namespace=namespace, concurrency=concurrency,
                            shutdown_timeout=shutdown_timeout, election=lease)
    controller.ctx.leftover_grace = timedelta(seconds=leftover_grace)
    try:
        health = serve_health(controller, health_port) if health_port else None
    except (OSError, OverflowError) as exc:  # in use, or a port above 65535 (as `serve`)
        api.close()
        raise InputError("--health-port", f"cannot listen on 0.0.0.0:{health_port}: {exc}") \
            from None
    stop = stop_on_signals(f"finishing the passes in flight (up to {shutdown_timeout:g}s)")
    controller.start()
    logging.getLogger("gitscale.controller").info(
        "watching RunnerSets in %s (concurrency %d%s)", namespace or "all namespaces",
        concurrency, f", acting while it holds Lease {lease.namespace}/{lease.name} as "
                     f"{lease.identity}" if lease else "")
    stop.wait()
    controller.stop()
    if health is not None:
        health.shutdown()
    api.close()
    return EXIT_OK
