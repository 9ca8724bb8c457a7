"""`gitscale init`: what makes the GitOps engine sync seconds after a push, not at its poll.

Flux: a ``Receiver`` of type ``generic-hmac`` on the config repo's GitRepository, and a notify
entry that derives the Receiver's hook path from its token. The token itself is never written:
the Receiver's comment (and ``init``'s output) say how to create its Secret. Argo CD: a notify
entry for ``/api/webhook`` and how to put the shared secret into ``argocd-secret``.

The URL is where the scaler reaches the engine: ``--notify-url`` when given. Else, with
``--run-in cluster`` it is the engine's Service inside the cluster; from CI (GitHub Actions,
GitLab) a cluster's DNS names do not resolve, so it is ``CHANGE-ME``, the engine's public URL,
listed and refused like every other value init cannot know. In the cluster Argo CD's server speaks https with its own self-signed
certificate (plain http is redirected, and notify follows no redirect), so that entry alone
skips verification (``insecureSkipTLSVerify``; the request is HMAC-signed and carries no secret).
"""
from __future__ import annotations

from typing import Any

from gitscale.commands.init_choices import REPO_URL_HINT, SYSTEM_NAMESPACE, Choices, \
    hinted
from gitscale.config.notify_targets import web_url
from gitscale.files import FILE_SUFFIX, SECRET_MOUNTS
from gitscale.yamlio.placeholders import PLACEHOLDER
from gitscale.yamlio.write import dump

RECEIVER_SECRET = "gitscale-receiver-token"
FLUX_TOKEN_ENV = "FLUX_RECEIVER_TOKEN"
ARGOCD_SECRET_ENV = "ARGOCD_WEBHOOK_SECRET"
# The in-cluster scaler's notify secrets: the optional Secret gitscale-notify, every key a file
# in NOTIFY_DIR (a Secret volume, which the kubelet updates in a running pod), and a NAME_FILE
# variable pointing at the key gitscale.yaml's notify entry names (`notify_files_env`). Never
# loaded as variables (envFrom): a running pod never sees a variable change, and a key named
# NAME beside NAME_FILE would be refused as set twice.
NOTIFY_SECRET = "gitscale-notify"
NOTIFY_DIR = f"{SECRET_MOUNTS}/notify"  # Secret gitscale-notify (files.mounted_secret_hint)
NOTIFY_VOLUME = "notify-secret"

FLUX_TOKEN_FILE = "./flux-receiver-token"  # the file deploy/scaler/README.md reads too
FLUX_SECRET_COMMANDS = f"""\
printf '%s' "$(openssl rand -hex 32)" > {FLUX_TOKEN_FILE}   # no newline: an HMAC key
kubectl -n flux-system create secret generic {RECEIVER_SECRET} \\
  --from-file=token={FLUX_TOKEN_FILE}"""

ARGOCD_SECRET_FILE = "./argocd-webhook-secret"  # the file deploy/scaler/README.md reads too
# The value goes from the file to kubectl through a here-document (stdin), never as an argument.
ARGOCD_SECRET_COMMANDS = f"""\
printf '%s' "$(openssl rand -hex 32)" > {ARGOCD_SECRET_FILE}
kubectl -n argocd patch secret argocd-secret --type merge --patch-file /dev/stdin <<EOF
{{"stringData": {{"webhook.github.secret": "$(cat {ARGOCD_SECRET_FILE})"}}}}
EOF"""


def _share(what: str, env: str) -> str:
    return (f"# gitscale needs the same {what} as {env}: in CI a (masked) secret\n"
            f"# holding the file's content; in the cluster the key {env} of the\n"
            f"# Secret {NOTIFY_SECRET}, a file the pods read through {env}{FILE_SUFFIX}")


FLUX_SECRET_HOWTO = FLUX_SECRET_COMMANDS + "\n" + _share("token", FLUX_TOKEN_ENV)
ARGOCD_SECRET_HOWTO = ARGOCD_SECRET_COMMANDS + "\n" + _share("value", ARGOCD_SECRET_ENV)

FLUX_IN_CLUSTER = "http://webhook-receiver.flux-system.svc.cluster.local"
ARGOCD_IN_CLUSTER = "https://argocd-server.argocd.svc.cluster.local"
PUBLIC_URL = f"https://{PLACEHOLDER}"  # outside the cluster: the address only the user knows
FLUX_PUBLIC_HINT = ("the public URL of Flux's webhook-receiver Service, your Ingress to it "
                    "(no path: gitscale adds the Receiver's /hook/...)")
ARGOCD_PUBLIC_HINT = "the public https URL of your Argo CD server (gitscale adds /api/webhook)"

NOTIFY_HEAD = """\

# Tell the GitOps engine to sync right after each push, instead of at its next poll (a
# failure is one log line, never a failed pass).
"""

FLUX_WHERE = {
    True: """\
# The URL is Flux's webhook-receiver Service inside the cluster, where gitscale runs
# (--run-in cluster; plain HTTP, as the Service serves it).
""",
    False: f"""\
# gitscale runs outside the cluster (a CI schedule), where the webhook-receiver Service's
# in-cluster address, {FLUX_IN_CLUSTER}, does not
# resolve: give the public URL your Ingress (or a LoadBalancer) gives that Service.
""",
}

FLUX_NOTIFY = """\
# The Receiver is flux/receiver.yaml; its token lives in the Secret {secret}
# (how to create it: the comment at the top of that file).
{where}\
notify:
  - flux:
      url: {url}
      receiver: {{name: gitscale, namespace: flux-system}}
      token: {{env: {env}}}
"""

ARGOCD_WHERE = {
    True: """\
# The URL is the argocd-server Service inside the cluster, where gitscale runs (--run-in
# cluster). It speaks https: plain http is redirected to https (unless server.insecure is
# "true"), and gitscale follows no redirect. Its certificate is self-signed unless you gave
# Argo CD one (the Secret argocd-server-tls), and would fail verification, so
# insecureSkipTLSVerify skips the check for this entry only: the request carries an HMAC
# signature, never the secret, and only the push's facts (repository, branch, commit, files).
# With a certificate gitscale can verify (a public CA, or SSL_CERT_FILE), delete that line.
""",
    False: f"""\
# gitscale runs outside the cluster (a CI schedule), where the argocd-server Service's
# in-cluster address, {ARGOCD_IN_CLUSTER}, does not resolve:
# give Argo CD's public https address (your Ingress to it), with a certificate gitscale can
# verify.
""",
}

GIVEN_WHERE = """\
# The URL is the one `gitscale init --notify-url` was given.
"""

ARGOCD_NOTIFY = """\
# Argo CD (which polls every 3 minutes) refreshes on a signed GitHub-style push event to
# /api/webhook. Set the shared secret in Argo CD (webhook.github.secret in the Secret
# argocd-secret) and give gitscale the same value:
{howto}
{where}\
notify:
  - argocd:
      url: {url}
{insecure}\
      secret: {{env: {env}}}{repo_url}
"""


def notify_block(choices: Choices) -> str:
    """The ``notify:`` section appended to the scaffold's gitscale.yaml: the engine's
    in-cluster address when gitscale runs in the cluster, else a ``CHANGE-ME`` for its public
    one (an address in the cluster's DNS cannot be reached from a CI runner)."""
    in_cluster = choices.run_in == "cluster"
    given = choices.notify_url
    if choices.gitops == "flux":
        url = given or (FLUX_IN_CLUSTER if in_cluster else hinted(PUBLIC_URL, FLUX_PUBLIC_HINT))
        where = GIVEN_WHERE if given else FLUX_WHERE[in_cluster]
        return NOTIFY_HEAD + FLUX_NOTIFY.format(secret=RECEIVER_SECRET, where=where, url=url,
                                                env=FLUX_TOKEN_ENV)
    howto = "\n".join(f"#   {line}" for line in ARGOCD_SECRET_HOWTO.splitlines())
    # Argo CD matches the Application's repoURL; without a URL here (a local path was given)
    # gitscale announces the URL of the remote it pushed to.
    repo_url = choices.repo_url
    repo = hinted(f"\n      repoURL: {_quoted(repo_url)}", REPO_URL_HINT) \
        if web_url(repo_url) else ""
    url = given or (ARGOCD_IN_CLUSTER if in_cluster else hinted(PUBLIC_URL,
                                                                ARGOCD_PUBLIC_HINT))
    insecure = "      insecureSkipTLSVerify: true  # argocd-server's own certificate\n" \
        if in_cluster and not given else ""
    where = GIVEN_WHERE if given else ARGOCD_WHERE[in_cluster]
    return NOTIFY_HEAD + ARGOCD_NOTIFY.format(howto=howto, where=where,
                                              url=url, insecure=insecure,
                                              env=ARGOCD_SECRET_ENV, repo_url=repo)


def notify_files(gitops: str) -> dict[str, str]:
    """Extra scaffold files: the Flux Receiver (Argo CD needs none)."""
    if gitops != "flux":
        return {}
    howto = "\n".join(f"#   {line}" for line in FLUX_SECRET_HOWTO.splitlines())
    header = ("# A webhook for gitscale: after each push it POSTs here (signed with HMAC-SHA256 "
              "of the\n# token), and Flux reconciles the GitRepository now instead of at its "
              "interval.\n# Create the token's Secret first (never commit it):\n" + howto + "\n")
    return {"flux/receiver.yaml": header + dump(receiver())}


def receiver() -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1",
        "kind": "Receiver",
        "metadata": {"name": "gitscale", "namespace": "flux-system"},
        "spec": {
            "type": "generic-hmac",
            "secretRef": {"name": RECEIVER_SECRET},
            "resources": [{"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                           "name": "gitscale"}],
        },
    }


def notify_next_steps(choices: Choices) -> str:
    """Step 4 of init's output: the engine's secret made into a file, given to the engine,
    then the same file to the scaler, wherever ``--run-in`` put it (so the file exists before
    any command reads it); outside the cluster, first the engine's public URL."""
    flux = choices.gitops == "flux"
    env, file = (FLUX_TOKEN_ENV, FLUX_TOKEN_FILE) if flux else (ARGOCD_SECRET_ENV,
                                                                ARGOCD_SECRET_FILE)
    lines = ["sync in seconds: " + ("a token for Flux's Receiver, then `kubectl apply -f "
                                    "flux/receiver.yaml`" if flux else
                                    "a webhook secret shared with Argo CD") + ":"]
    if choices.run_in != "cluster" and choices.notify_url is None:
        what = ("Flux's webhook-receiver Service, commit and push (the\n# Service has no "
                "Ingress of its own: expose it)" if flux else
                "Argo CD's server (its https address), commit and push")
        lines.append("# gitscale runs in CI, outside the cluster: set notify's url in "
                     f"gitscale.yaml (in `edits left`\n# above) to the public URL of {what}")
    lines.append(FLUX_SECRET_COMMANDS if flux else ARGOCD_SECRET_COMMANDS)
    if flux:
        lines.append("kubectl apply -f flux/receiver.yaml")
    lines.append(f"# and the same {'token' if flux else 'value'} for gitscale:")
    lines.append(scaler_secret_line(choices.run_in, env, file))
    return "\n".join(lines)


def notify_env_name(gitops: str) -> str:
    """The variable init's notify entry names (``{env: NAME}``), also its key in the Secret."""
    return FLUX_TOKEN_ENV if gitops == "flux" else ARGOCD_SECRET_ENV


def notify_files_env(gitops: str) -> list[dict[str, object]]:
    """The in-cluster scaler's ``NAME_FILE`` for the notify entry's ``{env: NAME}``: its key's
    file in the ``gitscale-notify`` volume (``notify_volume``), read at each send, so a rotated
    key reaches a running ``run`` or ``serve`` once the kubelet has updated the volume."""
    env = notify_env_name(gitops)
    return [{"name": f"{env}{FILE_SUFFIX}", "value": f"{NOTIFY_DIR}/{env}"}]


def notify_volume() -> dict[str, object]:
    """``gitscale-notify``, every key a file, ``optional``: the pods start without it (a notify
    entry then fails with one line per push, naming the file, and the engine's poll applies)."""
    return {"name": NOTIFY_VOLUME, "secret": {"secretName": NOTIFY_SECRET, "optional": True}}


def scaler_secret_line(run_in: str, env: str, file: str, *, masked: bool = True) -> str:
    """The command that gives the scaler, where ``run_in`` put it, the variable ``env`` read
    from ``file`` (stdin or --from-file: never an argument)."""
    if run_in == "github-actions":
        return f"gh secret set {env} < {file}"
    if run_in == "gitlab":
        return f"glab variable set {env} {'--masked' if masked else '--protected'} < {file}"
    return (f"kubectl -n {SYSTEM_NAMESPACE} create secret generic {NOTIFY_SECRET} "
            f"--from-file={env}={file}")


def _quoted(text: str) -> str:
    return dump(text, default_style='"').strip()
