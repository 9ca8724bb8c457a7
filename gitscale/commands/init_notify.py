"""`gitscale init`: what makes the GitOps engine sync seconds after a push, not at its poll.

Flux: a ``Receiver`` of type ``generic-hmac`` on the config repo's GitRepository, and a notify
entry that derives the Receiver's hook path from its token. The token itself is never written:
the Receiver's comment (and ``init``'s output) say how to create its Secret. Argo CD: a notify
entry for ``/api/webhook`` and how to put the shared secret into ``argocd-secret``.
"""
from __future__ import annotations

from typing import Any

from gitscale.commands.init_choices import REPO_URL_HINT, hinted
from gitscale.config.notify_targets import web_url
from gitscale.yamlio.write import dump

RECEIVER_SECRET = "gitscale-receiver-token"
FLUX_TOKEN_ENV = "FLUX_RECEIVER_TOKEN"
ARGOCD_SECRET_ENV = "ARGOCD_WEBHOOK_SECRET"

FLUX_TOKEN_FILE = "./flux-receiver-token"  # the file deploy/scaler/README.md reads too
FLUX_SECRET_HOWTO = f"""\
printf '%s' "$(openssl rand -hex 32)" > {FLUX_TOKEN_FILE}   # no newline: an HMAC key
kubectl -n flux-system create secret generic {RECEIVER_SECRET} \\
  --from-file=token={FLUX_TOKEN_FILE}
# gitscale needs the same token, e.g. in CI as the secret {FLUX_TOKEN_ENV} (the file's
# content), or in the cluster as the key {FLUX_TOKEN_ENV} of the Secret gitscale-notify"""

ARGOCD_SECRET_FILE = "./argocd-webhook-secret"  # the file deploy/scaler/README.md reads too
# The value goes from the file to kubectl through a here-document (stdin), never as an argument.
ARGOCD_SECRET_HOWTO = f"""\
printf '%s' "$(openssl rand -hex 32)" > {ARGOCD_SECRET_FILE}
kubectl -n argocd patch secret argocd-secret --type merge --patch-file /dev/stdin <<EOF
{{"stringData": {{"webhook.github.secret": "$(cat {ARGOCD_SECRET_FILE})"}}}}
EOF
# gitscale needs the same value, e.g. in CI as the secret {ARGOCD_SECRET_ENV} (the file's
# content), or in the cluster as the key {ARGOCD_SECRET_ENV} of the Secret gitscale-notify"""

FLUX_NOTIFY = f"""\

# Tell the GitOps engine to sync right after each push, instead of at its next poll (a
# failure is one log line, never a failed pass). The Receiver is flux/receiver.yaml; its token
# lives in the Secret {RECEIVER_SECRET} (how to create it: the comment at the top of that file).
# This URL is Flux's webhook-receiver Service inside the cluster; from CI outside the cluster,
# use the address your Ingress gives that Service.
notify:
  - flux:
      url: http://webhook-receiver.flux-system.svc.cluster.local
      receiver: {{name: gitscale, namespace: flux-system}}
      token: {{env: {FLUX_TOKEN_ENV}}}
"""

ARGOCD_NOTIFY = """\

# Tell Argo CD to refresh right after each push (a signed GitHub-style push event to
# /api/webhook) instead of at its 3-minute poll; a failure is one log line, never a failed
# pass. Set the shared secret in Argo CD (webhook.github.secret in the Secret argocd-secret)
# and give gitscale the same value:
{howto}
# The URL is the argocd-server Service inside the cluster (plain HTTP needs
# server.insecure: "true" in argocd-cmd-params-cm); from CI use your Argo CD's https address.
notify:
  - argocd:
      url: http://argocd-server.argocd.svc.cluster.local
      secret: {{env: {env}}}{repo_url}
"""


def notify_block(gitops: str, repo_url: str) -> str:
    """The ``notify:`` section appended to the scaffold's gitscale.yaml."""
    if gitops == "flux":
        return FLUX_NOTIFY
    howto = "\n".join(f"#   {line}" for line in ARGOCD_SECRET_HOWTO.splitlines())
    # Argo CD matches the Application's repoURL; without a URL here (a local path was given)
    # gitscale announces the URL of the remote it pushed to.
    repo = hinted(f"\n      repoURL: {_quoted(repo_url)}", REPO_URL_HINT) \
        if web_url(repo_url) else ""
    return ARGOCD_NOTIFY.format(howto=howto, env=ARGOCD_SECRET_ENV, repo_url=repo)


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


def notify_next_steps(gitops: str) -> str:
    if gitops == "flux":
        return ("sync in seconds: create the Receiver's token, then `kubectl apply -f "
                f"flux/receiver.yaml`:\n{FLUX_SECRET_HOWTO}")
    return f"sync in seconds: share a webhook secret with Argo CD:\n{ARGOCD_SECRET_HOWTO}"


def _quoted(text: str) -> str:
    return dump(text, default_style='"').strip()
