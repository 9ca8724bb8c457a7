"""Benchmark the controller's pod cache: memory for N runner pods, before and after (not a test).

    .venv/bin/python benchmarks/bench_cache.py                 # 10,000 pods
    .venv/bin/python benchmarks/bench_cache.py --pods 2000     # quicker

The API server (tests/kubeapi) runs in a process of its own, holding N runner pods shaped as a
cluster serves them: the spec with the API server's defaults, a running status, and the
managedFields of the controller (create) and the kubelet (status). Each mode then runs in a
fresh Python process, which lists the pods into the controller's pod store twice: the first
list fills it, the second is a relist with the store full (after a 410 or an error), the peak
that matters.

- ``before``: one unpaginated list, parsed whole, the objects stored as they came (the
  controller until 0.1.0's review).
- ``after``: ``Kube.list_pods`` by pages of 500, each pod reduced by ``runner_pod_fields``
  before the next page, into ``Store(keep=runner_pod_fields)``.

Figures per mode: the store's size after the lists (tracemalloc: what it retains), the
tracemalloc peak during the relist (the store included), and, from a second run of the mode
without tracemalloc (which inflates memory), the process's RSS once the modules are imported
and its peak RSS.
"""
from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import resource
import subprocess
import sys
import tracemalloc
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NS = "ci-runners"
MB = 1024 * 1024


def fields_of(obj: Any) -> Any:
    """A managedFields ``fieldsV1`` tree for ``obj``, as the API server writes one."""
    if isinstance(obj, dict):
        return {f"f:{k}": fields_of(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return {f'k:{{"name":"{i.get("name", n)}"}}' if isinstance(i, dict) else f"v:{i}":
                fields_of(i) for n, i in enumerate(obj)}
    return {}


def runner_pod(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod the controller creates, its spec defaults and status as the cluster adds them)."""
    name = f"linux-x64-{i:06x}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS,
        "labels": {"gitscale.dev/runnerset": "linux-x64", "gitscale.dev/patch-id": "41"},
        "annotations": {"gitscale.dev/failures": "0", "gitscale.dev/runner-id": str(100000 + i),
                        "gitscale.dev/effective-time": "2026-11-23T09:00:00Z"},
        "ownerReferences": [{"apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
                             "name": "linux-x64", "uid": "6b1c2f0e-2f0a-4d8e-9a51-0c6f5e1d7a3b",
                             "controller": True}]},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "runner", "image": "ghcr.io/actions/actions-runner:2.336.0",
            "command": ["/home/runner/run.sh"],
            "env": [{"name": "ACTIONS_RUNNER_INPUT_JITCONFIG", "valueFrom": {"secretKeyRef": {
                "name": name, "key": "jitconfig"}}},
                    {"name": "RUNNER_NAME", "value": name}],
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                          "limits": {"memory": "8Gi"}}}]}}
    cluster = {"spec": {
        "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "nodeName": f"node-{i % 50}",
        "preemptionPolicy": "PreemptLowerPriority", "priority": 0, "schedulerName":
        "default-scheduler", "securityContext": {}, "serviceAccount": "default",
        "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
        "tolerations": [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready",
                         "operator": "Exists", "tolerationSeconds": 300},
                        {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable",
                         "operator": "Exists", "tolerationSeconds": 300}],
        "volumes": [{"name": "kube-api-access-x7k2p", "projected": {
            "defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]},
        "container": {"imagePullPolicy": "IfNotPresent",
                      "terminationMessagePath": "/dev/termination-log",
                      "terminationMessagePolicy": "File",
                      "volumeMounts": [{"mountPath":
                                        "/var/run/secrets/kubernetes.io/serviceaccount",
                                        "name": "kube-api-access-x7k2p", "readOnly": True}]},
        "status": {
            "phase": "Running", "hostIP": f"10.0.{i % 50}.1", "podIP": f"10.1.{i // 250}.{i % 250}",
            "hostIPs": [{"ip": f"10.0.{i % 50}.1"}],
            "podIPs": [{"ip": f"10.1.{i // 250}.{i % 250}"}], "qosClass": "Burstable",
            "startTime": "2026-11-23T09:00:02Z",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": "2026-11-23T09:00:09Z"}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                                     "ContainersReady", "PodScheduled")],
            "containerStatuses": [{
                "name": "runner", "ready": True, "restartCount": 0, "started": True,
                "image": "ghcr.io/actions/actions-runner:2.336.0",
                "imageID": "ghcr.io/actions/actions-runner@sha256:" + "ab12" * 16,
                "containerID": "containerd://" + f"{i:064x}",
                "lastState": {}, "state": {"running": {"startedAt": "2026-11-23T09:00:08Z"}},
                "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                  "name": "kube-api-access-x7k2p", "readOnly": True,
                                  "recursiveReadOnly": "Disabled"}]}]}}
    return pod, cluster


def serve(pods: int, conn: Connection) -> None:
    """The API server's process: N pods, then serve until told to stop."""
    from tests.kubeapi.server import start_api_server

    server = start_api_server(history_size=100)
    rt = server.registry.resolve("pods")
    for i in range(pods):
        pod, cluster = runner_pod(i)
        server.store.create(rt, NS, pod)

        def complete(obj: dict[str, Any], pod: dict[str, Any] = pod,
                     cluster: dict[str, Any] = cluster) -> None:
            obj["spec"].update(cluster["spec"])
            obj["spec"]["containers"][0].update(cluster["container"])
            obj["status"] = cluster["status"]
            obj["metadata"]["managedFields"] = [
                {"manager": "gitscale", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-23T09:00:01Z", "fieldsType": "FieldsV1",
                 "fieldsV1": fields_of({"metadata": {k: v for k, v in pod["metadata"].items()
                                                     if k not in ("name", "namespace")},
                                        "spec": pod["spec"]})},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-23T09:00:09Z", "fieldsType": "FieldsV1",
                 "subresource": "status", "fieldsV1": fields_of({"status": cluster["status"]})}]
        server.store.mutate(rt, NS, pod["metadata"]["name"], complete)
    conn.send(server.url)
    conn.recv()
    server.stop()


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(mode: str, url: str, trace: bool) -> dict[str, Any]:
    from gitscale.controller.cache import Store, runner_pod_fields, set_of_pod
    from gitscale.controller.kube import Kube
    from gitscale.controller.kube_config import client_for
    from gitscale.controller.observe import LABEL_SET

    kube = Kube(client_for(url))

    def whole(obj: Any) -> Any:
        return obj

    if mode == "before":
        store = Store(index=set_of_pod, keep=whole)

        def relist() -> None:
            raw = kube.core.list_namespaced_pod(NS, label_selector=LABEL_SET,
                                                _preload_content=False)
            body = json.loads(raw.data)
            for item in body["items"]:
                item.setdefault("kind", "Pod")
                item.setdefault("apiVersion", "v1")
            store.replace(body["items"], body["metadata"]["resourceVersion"])
    else:
        store = Store(index=set_of_pod, keep=runner_pod_fields)

        def relist() -> None:
            store.replace(*kube.list_pods(NS, runner_pod_fields))

    gc.collect()
    out: dict[str, Any] = {"mode": mode, "start_rss_mb": rss_mb()}
    if trace:
        tracemalloc.start()
    relist()  # fills the store
    gc.collect()
    if trace:
        out["store_mb"] = tracemalloc.get_traced_memory()[0] / MB
        tracemalloc.reset_peak()
    relist()  # the relist, with the store full
    gc.collect()
    if trace:
        out["relist_peak_mb"] = tracemalloc.get_traced_memory()[1] / MB
        tracemalloc.stop()
    kube.close()
    out["pods"] = len(store.keys())
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--measure", choices=["before", "after"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.url, args.trace)))
        return 0

    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(args.pods, theirs), daemon=True)
    server.start()
    print(f"the API server holds {args.pods} runner pods ...", flush=True)
    url = ours.recv()
    results = []
    try:
        for mode in ("before", "after"):
            runs = [json.loads(subprocess.run(
                [sys.executable, __file__, "--measure", mode, "--url", url, *trace],
                check=True, capture_output=True, text=True).stdout)
                for trace in (["--trace"], [])]
            results.append({**runs[1], **runs[0], "start_rss_mb": runs[1]["start_rss_mb"],
                            "max_rss_mb": runs[1]["max_rss_mb"]})
    finally:
        ours.send("stop")
        server.join(10)
    print(f"\n{'mode':<8} {'pods':>6} {'store':>9} {'relist peak':>12} {'RSS at start':>13} "
          f"{'peak RSS':>9}")
    for r in results:
        print(f"{r['mode']:<8} {r['pods']:>6} {r['store_mb']:>7.0f}MB "
              f"{r['relist_peak_mb']:>10.0f}MB {r['start_rss_mb']:>11.0f}MB "
              f"{r['max_rss_mb']:>7.0f}MB")
    ok = all(r["pods"] == args.pods for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
