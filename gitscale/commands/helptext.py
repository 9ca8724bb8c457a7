"""What `--help` says after the options: each command's examples and the environment variables
it reads. Text only, imported when a help page is shown (not by a pass, nor by `--version`).

``ENVIRONMENT`` names every variable gitscale reads; ``tests/commands/test_help.py`` finds the
names the package reads (``os.environ`` and ``SecretRef("env", …)``) and fails on one that no
`--help` names.
"""
from __future__ import annotations

import textwrap

_GIT = ("GITSCALE_GIT_TOKEN", "GITSCALE_GIT_TOKEN_FILE", "GITSCALE_GIT_USERNAME",
        "GITSCALE_GIT_TIMEOUT")
_SOURCES = ("GITHUB_TOKEN", "BUILDKITE_AGENT_TOKEN", "NAME_FILE")

ENVIRONMENT: dict[str, str] = {
    "GITSCALE_GIT_TOKEN": "token for git over HTTPS (--repo URL): clone and push. Given to git "
                          "through GIT_ASKPASS, never in argv or a URL",
    "GITSCALE_GIT_TOKEN_FILE": "a file holding that token, instead",
    "GITSCALE_GIT_USERNAME": "the user name sent with the token (default: x-access-token)",
    "GITSCALE_GIT_TIMEOUT": "how long one git command may run before it is stopped (120, "
                            "90s, 5m; default: 120 s)",
    "GITSCALE_AUTHOR": "author of gitscale's commits, \"Name <email>\" (default: gitscale "
                       "<gitscale@users.noreply.gitscale.dev>)",
    "GITSCALE_CACHE_DIR": "where state is kept between runs (default: "
                          "$XDG_CACHE_HOME/gitscale, else ~/.cache/gitscale; empty: nowhere)",
    "GITHUB_TOKEN": "token of a github source whose gitscale.yaml entry names no token: or "
                    "app: (any {env: NAME} there is read the same way)",
    "BUILDKITE_AGENT_TOKEN": "agent token of a buildkite source whose gitscale.yaml entry "
                             "names no token:",
    "GITHUB_WEBHOOK_SECRET": "the secret GitHub signs workflow_job deliveries with "
                             "(--secret-env names another variable)",
    "NAME_FILE": "for each credential variable NAME here (and every {env: NAME} of "
                 "gitscale.yaml): a file holding its value, read when NAME is not set; run "
                 "and serve read it again when it changes. Both set: an error",
    "GITSCALE_LOG_FORMAT": "text (default: a timestamp, then the message) or json (one "
                           "object a line: time, level, component, msg) for the log of run, "
                           "serve and controller",
    "GITSCALE_PROGRESS_DELAY": "seconds of work before a progress bar shows on a terminal "
                               "(default: 1; 0: at once). TERM=dumb: never",
    "KUBECONFIG": "kubeconfig outside a cluster (default: ~/.kube/config)",
    "KUBERNETES_SERVICE_HOST": "set in a pod: the in-cluster config is used, unless "
                               "--kubeconfig is given",
    "POD_NAMESPACE": "the controller's own namespace (the downward API), where its leader "
                     "Lease lives by default",
}

# command → (examples, the variables it reads); the top level lists every variable.
COMMANDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "plan": ((
        "gitscale plan",
        "gitscale plan --repo https://github.com/acme/ci-config.git --output json",
        "gitscale plan --demand what-if.yaml --now 2026-11-23T09:00:00Z",
        "gitscale plan --set linux-x64 --set gpu",
    ), (*_SOURCES, *_GIT, "GITSCALE_CACHE_DIR", "GITSCALE_PROGRESS_DELAY")),
    "reconcile": ((
        "gitscale reconcile --repo https://github.com/acme/ci-config.git",
        "gitscale reconcile --no-push",
    ), (*_SOURCES, *_GIT, "GITSCALE_AUTHOR", "GITSCALE_CACHE_DIR", "GITSCALE_PROGRESS_DELAY")),
    "run": ((
        "gitscale run --repo https://github.com/acme/ci-config.git --interval 30s",
        "gitscale run --repo . --metrics-listen 0.0.0.0:9090",
    ), (*_SOURCES, *_GIT, "GITSCALE_AUTHOR", "GITSCALE_CACHE_DIR", "GITSCALE_PROGRESS_DELAY",
        "GITSCALE_LOG_FORMAT")),
    "serve": ((
        "gitscale serve --repo https://github.com/acme/ci-config.git --listen 0.0.0.0:8080",
        "gitscale serve --secret-file /run/secrets/webhook --resync 2m --window 5s",
        "gitscale serve --set linux-x64 --set gpu --state-file .gitscale/webhooks.yaml",
    ), ("GITHUB_WEBHOOK_SECRET", "GITHUB_TOKEN", "NAME_FILE", *_GIT, "GITSCALE_AUTHOR",
        "GITSCALE_CACHE_DIR", "GITSCALE_LOG_FORMAT")),
    "history": ((
        "gitscale history --set linux-x64 --since 2026-11-01T00:00:00Z",
        "gitscale history --repo https://github.com/acme/ci-config.git --output json",
        "gitscale history --chart history.svg --tz Europe/Berlin",
    ), (*_GIT, "GITSCALE_PROGRESS_DELAY")),
    "simulate": ((
        "gitscale simulate --synthetic spiky --policy default --policy '{buffer: 2}'",
        "gitscale simulate --from-history --since 2026-11-01T00:00:00Z --chart sim.svg",
        "gitscale simulate --trace jobs.csv --output json",
    ), (*_GIT, "GITSCALE_PROGRESS_DELAY")),
    "drain": ((
        "gitscale drain linux-x64",
        "gitscale drain linux-x64 --resume",
    ), (*_GIT, "GITSCALE_AUTHOR", "GITSCALE_CACHE_DIR")),
    "validate": ((
        "gitscale validate",
        "gitscale validate --repo https://github.com/acme/ci-config.git --branch staging",
    ), (*_GIT, "GITSCALE_CACHE_DIR")),
    "controller": ((
        "gitscale controller --leader-elect",
        "gitscale controller --kubeconfig ~/.kube/config --namespace ci-runners --health-port 0",
    ), ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "POD_NAMESPACE", "GITSCALE_LOG_FORMAT")),
    "init": ((
        "gitscale init ci-config --gitops argocd --github-org acme "
        "--repo-url https://github.com/acme/ci-config.git",
        "gitscale init --gitops flux --platform buildkite --buildkite-org acme "
        "--path clusters/staging",
    ), ("GITSCALE_AUTHOR",)),
    "crd": ((
        "gitscale crd > deploy/crds/runnersets.gitscale.dev.yaml",
        "gitscale crd --repo .",
    ), ("GITSCALE_AUTHOR",)),
    "demo": ((
        "gitscale demo",
        "gitscale demo --repo ./gitscale-demo",
    ), ("GITSCALE_AUTHOR", "GITSCALE_CACHE_DIR")),
}

TOP_EXAMPLES: tuple[str, ...] = (
    "gitscale init ci-config --gitops argocd --github-org acme "
    "--repo-url https://github.com/acme/ci-config.git",
    "gitscale plan --repo ci-config",
    "gitscale reconcile --repo https://github.com/acme/ci-config.git",
    "gitscale COMMAND --help",
)

_WIDTH = 77


def epilog(command: str | None = None) -> str:
    """The text after the options of ``command``'s help (None: `gitscale --help`). Click keeps a
    paragraph that starts with a ``\\b`` line as it is, so examples and the table stay lines."""
    examples: tuple[str, ...] = TOP_EXAMPLES
    names: tuple[str, ...] = tuple(ENVIRONMENT)
    if command is not None:
        examples, names = COMMANDS[command]
    text = "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in examples)
    if names:
        text += "\n\nEnvironment:\n\n\b\n" + "\n".join(_variable(name) for name in names)
    return text


def _variable(name: str) -> str:
    """``  NAME  what it does``, continued under the description."""
    lines = textwrap.wrap(ENVIRONMENT[name], _WIDTH - 6)
    return "\n".join([f"  {name}", *(f"      {line}" for line in lines)])
