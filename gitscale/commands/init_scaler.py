"""`gitscale init --run-in cluster`: gitscale itself in the cluster, ``deploy/scaler/``.

Outside the GitOps path (applied by hand): a CronJob for ``reconcile`` (``concurrencyPolicy:
Forbid``, its state cache on a PersistentVolumeClaim) or a Deployment for ``run`` / ``serve``,
and a README of the Secrets to create. The scaler needs no Kubernetes permission at all (no
RBAC, no service account token): it only pushes to git, with a token from the Secret
``gitscale-git`` (``GITSCALE_GIT_TOKEN_FILE``), and reads the demand source's token from the
Secret ``gitscale-scaler`` and the notify entry's secret from the optional ``gitscale-notify``,
all mounted as files (``GITHUB_TOKEN_FILE``…, ``FLUX_RECEIVER_TOKEN_FILE``…, never a value in
the manifest, never a variable): a rotated Secret reaches a running ``run`` or ``serve``.

Every object is written by ``gitscale.yamlio.write.dump``: no YAML anchors or aliases.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gitscale import __version__
from gitscale.commands.init_choices import REPO_URL_HINT, SYSTEM_NAMESPACE as NAMESPACE, \
    Choices, hinted
from gitscale.commands.init_notify import NOTIFY_DIR, NOTIFY_SECRET, NOTIFY_VOLUME, \
    notify_env_name, notify_files_env, notify_volume
from gitscale.commands.init_runners import SCALER_DIR, SCALER_VOLUME, job_ids_steps, \
    SourceSecret, scaler_env, scaler_keys, scaler_secret_command, scaler_volume, \
    source_secrets
from gitscale.files import FILE_SUFFIX, SECRET_MOUNTS
from gitscale.yamlio.write import dump

IMAGE = f"ghcr.io/gitscale/gitscale:{__version__}"
GIT_SECRET = "gitscale-git"  # key `token`: a token that may push to the config repo
GIT_TOKEN_FILE = "./git-push-token"  # what the printed commands read that token from
WEBHOOK_SECRET = "gitscale-webhook"  # key `secret`: GitHub's workflow_job webhook secret
TOKEN_DIR = f"{SECRET_MOUNTS}/git"  # Secret gitscale-git
# serve's webhook secret, a Secret volume: a rotated secret reaches the running pod (a
# variable would not), and serve reads the file again when it changes
WEBHOOK_DIR = f"{SECRET_MOUNTS}/webhook"  # Secret gitscale-webhook
CACHE_DIR = "/var/cache/gitscale"  # the image's GITSCALE_CACHE_DIR
CACHE_CLAIM = "gitscale-cache"  # the CronJob's state cache, kept between passes
UID = 65532  # the image's USER

SCALER_README = """\
# gitscale in the cluster

`gitscale init --run-in cluster` wrote this: gitscale runs here, and nowhere else. Run it in
one place only: if the repo also has `.github/workflows/gitscale.yml` (a schedule every 5
minutes once pushed) or a GitLab pipeline schedule, delete or disable it first: two schedulers
would race each other's pushes.

Apply one of these by hand (they are outside the folder Argo CD / Flux applies):

- `kubectl apply -k deploy/scaler/` — a CronJob running `gitscale reconcile` every minute
  (`concurrencyPolicy: Forbid`: never two passes at once);
- or swap `cronjob.yaml` and `cache-pvc.yaml` in `kustomization.yaml` for
  `deployment-run.yaml` (`gitscale run`, a pass every 30 s){serve}
  The Deployments serve Prometheus metrics on their `metrics` port (9090, `/metrics`): scrape
  it with a PodMonitor. They log a line of text per event; for one JSON object a line (Loki,
  Elasticsearch, Datadog), add `{{name: GITSCALE_LOG_FORMAT, value: json}}` to their
  container's `env:` (gitscale's README, Metrics, "Logs").

The CronJob keeps its state cache (what the last pass parsed, so the next one reads only the
manifests that changed) on the PersistentVolumeClaim `{claim}` (`cache-pvc.yaml`, 1Gi,
ReadWriteOnce, the cluster's default StorageClass): `concurrencyPolicy: Forbid` means one pod
uses it at a time. A Deployment keeps its cache in memory from one pass to the next (and in
an emptyDir, lost only when the pod moves): it needs no claim.

gitscale needs no Kubernetes permission: the pods run under a ServiceAccount whose token is
not mounted, and no Role is bound. It only pushes to git. Create the namespaces, then its
Secrets, each value read from a file (never typed on the command line; docs/credentials.md of
gitscale says what each token must be allowed to do):

```sh
# the namespaces first (Argo CD / Flux would create them only at their first sync)
{namespaces}
# the demand source's credential ({keys}), mounted as files
{scaler_secret}
{job_ids}# a token that may push to the config repo (GITSCALE_GIT_TOKEN_FILE)
kubectl -n {namespace} create secret generic {git_secret} --from-file=token={git_token_file}
# the notify secret (step 4 of init's output writes its file), mounted as files
# ({notify_env}_FILE points at its key); optional: the pods start without it
kubectl -n {namespace} create secret generic {notify_secret} --from-file={notify_env}=./{notify_file}
{webhook}```

Rotating a credential: the git token, the source's credential (`gitscale-scaler`,
{file_variables}, in
{scaler_dir}/){comma} the notify secret (`{notify_secret}`, the file
`{notify_env}_FILE` points at, in
{notify_dir}/){webhook_rotates} are mounted as files, which a
running pod reads again when the Secret changes (within a minute or two: the kubelet's sync):
no restart. No Secret is loaded as variables. A further key of `{notify_secret}` (another
notify entry's secret, another organization's token) is a file in that directory as well:
name it `{{file: {notify_dir}/KEY}}` in gitscale.yaml, or, for an
`{{env: KEY}}`, add `KEY_FILE` with that path to the `env:` of the manifests (never `KEY`
itself beside it: both set is refused). gitscale's docs/credentials.md, "Rotating
credentials", says what each mode picks up.
"""


METRICS_PORT = 9090
# SIGTERM: `run` finishes its pass, `serve` its last batch, within --shutdown-timeout (git's
# fetches and pushes still running then are stopped, and serve names what it could not land);
# the grace period leaves 10 s more to say so and exit, before Kubernetes' SIGKILL. (150 s, for
# a push bounded only by the git timeout, was still killed: serve tried 3 of them.)
SHUTDOWN_TIMEOUT = 20
STOP_GRACE = SHUTDOWN_TIMEOUT + 10
STOPPING = ["--shutdown-timeout", f"{SHUTDOWN_TIMEOUT}s"]
STOP_SAID = (f"# On SIGTERM it has --shutdown-timeout ({SHUTDOWN_TIMEOUT}s) to land what is in "
             f"flight;\n# terminationGracePeriodSeconds ({STOP_GRACE}) leaves 10 s more: raise "
             "both together.\n")
METRICS = ["--metrics-listen", f"0.0.0.0:{METRICS_PORT}"]  # noqa: S104 - scraped in the pod network
WEBHOOK_HOWTO = f"""\
# serve only: GitHub's webhook secret, a random value (no newline). Give GitHub the same
# value: the organization's Settings > Webhooks > Add webhook, Payload URL the Service's
# /webhook through your Ingress, Content type application/json, Secret the content of
# ./webhook-secret, the event "Workflow jobs" (docs/credentials.md, "gitscale serve")
printf '%s' "$(openssl rand -hex 32)" > ./webhook-secret
kubectl -n {NAMESPACE} create secret generic {WEBHOOK_SECRET} --from-file=secret=./webhook-secret
"""
SERVE = {
    "github": " or\n  `deployment-serve.yaml` + `service-serve.yaml` (`gitscale serve`: GitHub "
              "`workflow_job`\n  webhooks, one commit per 10 s window; the Service leaves the "
              "metrics port out).\n  Run one of the three, not two.",
    "buildkite": ". Run one of the\n  two, not both. (`gitscale serve` takes GitHub's "
                 "webhooks: a Buildkite set is polled.)",
}


def scaler_files(choices: Choices) -> dict[str, str]:
    """path → text of ``deploy/scaler/``: its README, the manifests and their kustomization."""
    notify_env = notify_env_name(choices.gitops)
    secrets = source_secrets(choices)
    files = {
        "deploy/scaler/README.md": SCALER_README.format(
            namespace=NAMESPACE, git_secret=GIT_SECRET, git_token_file=GIT_TOKEN_FILE,
            notify_secret=NOTIFY_SECRET,
            notify_env=notify_env, notify_file=notify_env.lower().replace("_", "-"),
            claim=CACHE_CLAIM, serve=SERVE[choices.platform], scaler_dir=SCALER_DIR,
            notify_dir=NOTIFY_DIR, comma="," if choices.platform == "github" else " and",
            webhook=WEBHOOK_HOWTO if choices.platform == "github" else "",
            webhook_rotates=(" and `serve`'s webhook secret" if choices.platform == "github"
                             else ""),
            keys=", ".join(f"{s.key} → {s.env}" for s in secrets),
            scaler_secret=scaler_secret_command(choices),
            job_ids="".join(f"{line}\n" for line in job_ids_steps(choices)),
            file_variables=_files_named(scaler_keys(choices)),
            namespaces=f"kubectl apply -f {choices.path}/gitscale-system/namespace.yaml"),
    }
    repo = ["--repo", choices.repo_url, "--branch", choices.branch, *choices.config_option]
    mounted = Mounted(env=[*scaler_env(choices), *notify_files_env(choices.gitops)],
                      volumes=[scaler_volume(choices), notify_volume()],
                      mounts=[{"name": SCALER_VOLUME, "mountPath": SCALER_DIR, "readOnly": True},
                              {"name": NOTIFY_VOLUME, "mountPath": NOTIFY_DIR, "readOnly": True}])
    manifests = {
        "serviceaccount.yaml": (
            "# gitscale's identity in the cluster: it has no permission and mounts no token.\n",
            [service_account()]),
        "cache-pvc.yaml": (
            "# The CronJob's state cache, kept from one pass to the next (ReadWriteOnce is enough:\n"
            "# concurrencyPolicy Forbid runs one pass at a time). The cluster's default\n"
            "# StorageClass provides it; set storageClassName for another.\n",
            [cache_claim()]),
        "cronjob.yaml": (
            "# `gitscale reconcile` every minute; a pass still running holds the next one back.\n"
            "# --every is the schedule's period: change both together.\n",
            [cronjob(["reconcile", *repo, "--every", "1m"], mounted)]),
        "deployment-run.yaml": (
            "# `gitscale run`: a pass every 30 s in one long-lived pod (Recreate: never two).\n"
            "# Liveness: /healthz on the metrics port fails once a pass has run for 15 minutes\n"
            "# (every pass ends well within that: a stuck loop is restarted); the waits between\n"
            "# passes, a rate limit's too, do not count. A pass that fails is logged and\n"
            "# counted, not a restart: alert when gitscale_passes_total{result=~\"ok|partial\"}\n"
            "# stops increasing (the loop lands no pass), and per set on\n"
            "# gitscale_set_last_read_timestamp_seconds (README, Metrics).\n" + STOP_SAID,
            [deployment("gitscale-run", ["run", *repo, "--interval", "30s", *STOPPING, *METRICS],
                        mounted)]),
    }
    if choices.platform == "github":  # webhooks are GitHub's (workflow_job)
        manifests["deployment-serve.yaml"] = (
            "# `gitscale serve`: GitHub workflow_job webhooks at /webhook, one commit per 10 s\n"
            "# window. Point the webhook at the Service (through your Ingress).\n" + STOP_SAID,
            [deployment("gitscale-serve", ["serve", *repo, "--listen", "0.0.0.0:8080",
                                           "--secret-file", f"{WEBHOOK_DIR}/secret",
                                           *STOPPING, *METRICS], mounted, serve=True)])
        manifests["service-serve.yaml"] = ("# Where GitHub's webhooks reach `gitscale serve`.\n",
                                           [service()])
    for name, (comment, objects) in manifests.items():
        files[f"deploy/scaler/{name}"] = comment + "---\n".join(
            hinted(dump(o, width=100), REPO_URL_HINT) for o in objects)
    # serve takes GitHub's webhooks: a Buildkite scaffold has no serve manifest to swap in
    swap = ("for `run` or `serve` replace cronjob.yaml and cache-pvc.yaml\n# with "
            "deployment-run.yaml, or with deployment-serve.yaml + service-serve.yaml (one of the "
            "three)" if choices.platform == "github" else
            "for `run` replace cronjob.yaml and cache-pvc.yaml\n# with deployment-run.yaml (one "
            "of the two; a Buildkite set is polled: no `serve`)")
    files["deploy/scaler/kustomization.yaml"] = (
        f"# The CronJob by default; {swap}.\n"
        + dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "namespace": NAMESPACE,
                "resources": ["serviceaccount.yaml", "cache-pvc.yaml", "cronjob.yaml"]},
               width=100))
    return files


def _files_named(secrets: list[SourceSecret]) -> str:
    """'the file `A_FILE` points at', or 'the files `A_FILE` and `B_FILE` point at'."""
    names = " and ".join(f"`{s.env}{FILE_SUFFIX}`" for s in secrets)
    return f"the file {names} points at" if len(secrets) == 1 else \
        f"the files {names} point at"


def service_account() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "gitscale-scaler", "namespace": NAMESPACE},
            "automountServiceAccountToken": False}


def cache_claim() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": CACHE_CLAIM, "namespace": NAMESPACE,
                         "labels": _labels("gitscale-reconcile")},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}


@dataclass(frozen=True)
class Mounted:
    """The Secrets a scaler pod reads as files: the ``NAME_FILE`` variables (the source's
    credential, the notify entry's secret), and the volumes and mounts they point into."""

    env: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]


def pod_spec(args: list[str], source: Mounted, *, restart: str,
             serve: bool = False, cache_claim: str | None = None) -> dict[str, Any]:
    """One scaler pod. The image runs as uid 65532 with a read-only root filesystem: /tmp
    (clones, git's askpass script: an emptyDir, which is not noexec) and the state cache are
    the writable mounts, and fsGroup makes a claim's volume writable for that user. Every
    credential is a Secret volume, which a rotation updates in the running pod: the git
    token, the source's and the notify entry's (``source``: ``gitscale-scaler``, and every
    key of the optional ``gitscale-notify``) and serve's webhook secret. No Secret is loaded as
    variables (docs/credentials.md, "Rotating credentials")."""
    cache: dict[str, Any] = ({"persistentVolumeClaim": {"claimName": cache_claim}}
                             if cache_claim else {"emptyDir": {}})
    env: list[dict[str, Any]] = [
        {"name": "GITSCALE_GIT_TOKEN_FILE", "value": f"{TOKEN_DIR}/token"},
        {"name": "GITSCALE_CACHE_DIR", "value": CACHE_DIR},
        *source.env,
    ]
    container: dict[str, Any] = {
        "name": "gitscale",
        "image": IMAGE,
        "args": args,
        "env": env,
        "volumeMounts": [
            {"name": "git-token", "mountPath": TOKEN_DIR, "readOnly": True},
            *source.mounts,
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "cache", "mountPath": CACHE_DIR},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    volumes: list[dict[str, Any]] = [
        {"name": "git-token", "secret": {"secretName": GIT_SECRET}},
        *source.volumes,
        {"name": "tmp", "emptyDir": {}},
        {"name": "cache", **cache},
    ]
    if serve:
        container["volumeMounts"].append({"name": "webhook-secret", "mountPath": WEBHOOK_DIR,
                                          "readOnly": True})
        volumes.append({"name": "webhook-secret", "secret": {"secretName": WEBHOOK_SECRET}})
    if restart == "Always":  # a Deployment: Prometheus metrics on a port the Service leaves out
        container["ports"] = [{"name": "metrics", "containerPort": METRICS_PORT}]
        if not serve:  # run: /healthz on the metrics port fails once a pass is stuck
            container["livenessProbe"] = {
                "httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": 10,
                "periodSeconds": 30, "failureThreshold": 3}
    if serve:
        container["ports"].insert(0, {"name": "http", "containerPort": 8080})
        probe = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10}
        container["readinessProbe"] = probe
        container["livenessProbe"] = {**probe, "initialDelaySeconds": 10, "failureThreshold": 3}
    return {
        "serviceAccountName": "gitscale-scaler",
        "automountServiceAccountToken": False,
        "restartPolicy": restart,
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID,
                            "fsGroup": UID, "fsGroupChangePolicy": "OnRootMismatch",
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": volumes,
    }


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "gitscale"}


def cronjob(args: list[str], source: Mounted) -> dict[str, Any]:
    name = "gitscale-reconcile"
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": _labels(name)},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 50,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {
                "backoffLimit": 0,  # the next minute's pass is the retry
                "activeDeadlineSeconds": 300,
                "ttlSecondsAfterFinished": 3600,
                "template": {"metadata": {"labels": _labels(name)},
                             "spec": pod_spec(args, source, restart="Never",
                                              cache_claim=CACHE_CLAIM)},
            }},
        },
    }


def deployment(name: str, args: list[str], source: Mounted, *,
               serve: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": _labels(name)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # two loops on one repo would race each push
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {"metadata": {"labels": _labels(name)},
                         "spec": {**pod_spec(args, source, restart="Always", serve=serve),
                                  "terminationGracePeriodSeconds": STOP_GRACE}},
        },
    }


def service() -> dict[str, Any]:
    name = "gitscale-serve"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": _labels(name)},
        "spec": {"selector": {"app.kubernetes.io/name": name},
                 "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
