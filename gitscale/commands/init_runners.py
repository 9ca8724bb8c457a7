"""`gitscale init`: the example runner set, GitHub's or Buildkite's, and its credentials.

One set, ``linux``, written twice with the same facts: its entry in gitscale.yaml (where demand
comes from) and its RunnerSet (what the controller runs), so the labels or the queue agree.
Each line that holds a value init could not know says in its comment what belongs there;
``gitscale validate`` quotes that comment while the value is still ``CHANGE-ME``.

The credentials each part reads, and the Secrets they come from (docs/credentials.md):

- the scaler (``deploy/scaler/``: the CronJob, ``run`` and ``serve``) reads the source's token
  from the Secret ``gitscale-scaler`` (``SCALER_SECRET``), one key per variable
  (``SourceSecret``), mounted as files (``SCALER_DIR``) that ``NAME_FILE`` variables point at
  (the ``_FILE`` rule of ``{env: NAME}``, ``config/secrets.py``): a Secret volume is updated
  in a running pod, so ``run`` and ``serve`` take a rotated token without a restart;
- from CI (``--run-in github-actions`` or ``gitlab``) the same variables come from the
  workflow's repository secrets (``SourceSecret.ci_secret``) or the pipeline's CI/CD variables;
  gitscale.yaml's comments say which (``where_from``);
- the controller reads the Secrets the RunnerSet names, in the runners' namespace.
"""
from __future__ import annotations

from dataclasses import dataclass

from gitscale.commands.init_choices import SYSTEM_NAMESPACE, Choices
from gitscale.files import FILE_SUFFIX, SECRET_MOUNTS
from gitscale.runnerset_api import API_VERSION, BUILDKITE_AGENT_IMAGE, GITHUB_RUNNER_IMAGE, KIND
from gitscale.yamlio.placeholders import PLACEHOLDER

SET = "linux"
LABELS = "[self-hosted, linux]"
SCALER_SECRET = "gitscale-scaler"
GITHUB_CREDENTIALS = "github-app"  # spec.github.credentialsSecret (the controller's)
AGENT_TOKEN_SECRET = "buildkite-agent-token"
API_TOKEN_SECRET = "buildkite-api-token"


@dataclass(frozen=True)
class SourceSecret:
    """One credential of the demand source: the variable gitscale.yaml names, its key in the
    Secret ``gitscale-scaler`` (in the cluster) and the secret's name in CI."""

    env: str
    key: str
    file: str  # what the `kubectl create secret` line reads it from
    ci_secret: str  # GitHub Actions secrets may not start with GITHUB_
    maskable: bool = True  # one line: GitLab can mask it (a PEM key is several)


def source_secrets(choices: Choices) -> list[SourceSecret]:
    if choices.platform == "buildkite":
        return [SourceSecret("BUILDKITE_AGENT_TOKEN", "buildkite_agent_token",
                             "./buildkite-agent-token", "BUILDKITE_AGENT_TOKEN")]
    if choices.github_app is not None:
        return [SourceSecret("GITHUB_APP_PRIVATE_KEY", "github_app_private_key",
                             "./github-app.private-key.pem", "GITSCALE_APP_PRIVATE_KEY",
                             maskable=False)]
    return [SourceSecret("GITHUB_TOKEN", "github_token", "./github-source-token",
                         "GITSCALE_SOURCE_TOKEN")]


# A Buildkite source's optional ``jobIds`` token (written commented in gitscale.yaml), a
# GraphQL token: its key of the Secret is optional, so the pods start without it, and a jobIds
# uncommented later finds its variable once the key is added; the workflow passes its secret
# always (empty while it does not exist, and unread while jobIds is commented out). Its file
# and shell variable are not the controller's REST token's (``./buildkite-api-token``), so that
# following both sets of steps never puts one token where the other belongs.
JOB_IDS_TOKEN = SourceSecret("BUILDKITE_GRAPHQL_TOKEN", "buildkite_graphql_token",
                             "./buildkite-graphql-token", "GITSCALE_BUILDKITE_GRAPHQL_TOKEN")
JOB_IDS_SHELL = "BUILDKITE_GRAPHQL_TOKEN"  # what the printed steps write its file from
REST_TOKEN_FILE = "./buildkite-api-token"  # the controller's (read_agents)


def token_to_file(variable: str, file: str) -> str:
    """The printed line that writes a token the reader gave ``variable`` (``read -rs``) to
    ``file``, without a newline. Pasted before the variable has a value, it stops and says so,
    writing nothing: an empty file would become a Secret holding an empty token, which kubectl
    creates without a word."""
    return f"printf '%s' \"${{{variable}:?not set: read -rs {variable}}}\" > {file}"


def optional_secrets(choices: Choices) -> list[SourceSecret]:
    """The credentials gitscale.yaml names only in a comment (Buildkite's jobIds)."""
    return [JOB_IDS_TOKEN] if choices.platform == "buildkite" else []


def where_from(choices: Choices, secret: SourceSecret, *, optional: bool = False) -> str:
    """Where the scaler that ``--run-in`` wrote finds ``secret``'s variable: for the comment
    on the line of gitscale.yaml that names it."""
    if choices.run_in == "github-actions":
        return f"from the repository secret {secret.ci_secret} (the workflow's env)"
    if choices.run_in == "gitlab":
        return f"from the CI/CD variable {secret.env}"
    return (f"in the cluster: {'the optional key' if optional else 'key'} {secret.key} of the "
            f"Secret {SCALER_SECRET}")


def job_ids_steps(choices: Choices) -> list[str]:
    """Commented lines: how the optional jobIds token reaches the scaler ``--run-in`` wrote
    (init's printed steps and deploy/scaler/README.md)."""
    if choices.platform != "buildkite":
        return []
    s = JOB_IDS_TOKEN
    if choices.run_in == "github-actions":
        give = [f"# gh secret set {s.ci_secret} < {s.file}"]
    elif choices.run_in == "gitlab":
        give = [f"# glab variable set {s.env} --masked < {s.file}"]
    else:
        give = [f"# and add --from-file={s.key}={s.file} to {SCALER_SECRET}'s line"]
    return ["# optional, for jobIds (commented out in gitscale.yaml): an API access token "
            "with GraphQL",
            "# access, read-only (docs/credentials.md, \"Job ids\"); one token that has "
            "read_agents too may",
            f"# serve the controller as well: then give {REST_TOKEN_FILE} here instead",
            f"# {token_to_file(JOB_IDS_SHELL, s.file)}", *give]


SCALER_DIR = f"{SECRET_MOUNTS}/scaler"  # gitscale-scaler's keys, one file each
SCALER_VOLUME = "scaler-secret"


def scaler_env(choices: Choices) -> list[dict[str, object]]:
    """The scaler container's variables for the source: ``NAME_FILE``, a path in the Secret's
    volume (``scaler_volume``), for each ``{env: NAME}`` gitscale.yaml names; never a value."""
    return [{"name": f"{s.env}{FILE_SUFFIX}", "value": f"{SCALER_DIR}/{s.key}"}
            for s in scaler_keys(choices)]


def scaler_volume(choices: Choices) -> dict[str, object]:
    """``gitscale-scaler`` as one directory of files: its required keys from one source (a
    key missing keeps the pod from starting, and its events say which), the optional jobIds
    key from a second, ``optional`` one (the pod starts without it; once added, the running
    pod's volume gets it). A projected volume: two sources of one Secret in one directory."""
    required = [{"key": s.key, "path": s.key} for s in source_secrets(choices)]
    sources: list[dict[str, object]] = [
        {"secret": {"name": SCALER_SECRET, "items": required}}]
    optional = [{"key": s.key, "path": s.key} for s in optional_secrets(choices)]
    if optional:
        sources.append({"secret": {"name": SCALER_SECRET, "optional": True, "items": optional}})
    return {"name": SCALER_VOLUME, "projected": {"sources": sources}}


def scaler_keys(choices: Choices) -> list[SourceSecret]:
    """Every credential the scaler's pods point a ``NAME_FILE`` at: required and optional."""
    return source_secrets(choices) + optional_secrets(choices)


def scaler_secret_command(choices: Choices) -> str:
    files = " \\\n  ".join(f"--from-file={s.key}={s.file}" for s in source_secrets(choices))
    return (f"kubectl -n {SYSTEM_NAMESPACE} create secret generic {SCALER_SECRET} \\\n"
            f"  {files}")


def controller_secret_commands(choices: Choices) -> list[str]:
    """The Secrets the example RunnerSet names, in its namespace."""
    ns = choices.namespace
    if choices.platform == "buildkite":
        # the agent reads its token as it is: no trailing newline in the file
        return ["# the agent token the pods register with, no newline: in a Buildkite cluster "
                "one of its\n# agent tokens (Agents > the cluster > Agent Tokens), and the "
                f"queue {choices.buildkite_queue} must exist in\n# that cluster before the "
                "agents start; unclustered: Agents > Agent Tokens",
                token_to_file("BUILDKITE_AGENT_TOKEN", "./buildkite-agent-token"),
                f"kubectl -n {ns} create secret generic {AGENT_TOKEN_SECRET} "
                "--from-file=token=./buildkite-agent-token",
                "# a REST API token with read_agents only, to see which agent is busy "
                "(Buildkite: Personal\n# Settings > API Access Tokens)",
                token_to_file("BUILDKITE_API_TOKEN", REST_TOKEN_FILE),
                f"kubectl -n {ns} create secret generic {API_TOKEN_SECRET} "
                f"--from-file=token={REST_TOKEN_FILE}"]
    if choices.github_app is not None:
        app_id, installation = choices.github_app
        # Without its id the controller looks the installation up (GET /orgs/ORG/installation):
        # a CHANGE-ME here would be taken for the id.
        known = installation != PLACEHOLDER
        return [f"kubectl -n {ns} create secret generic {GITHUB_CREDENTIALS} \\\n"
                f"  --from-literal=github_app_id={app_id} \\\n"
                + (f"  --from-literal=github_app_installation_id={installation} \\\n"
                   if known else "")
                + "  --from-file=github_app_private_key=./github-app.private-key.pem"]
    return [f"kubectl -n {ns} create secret generic {GITHUB_CREDENTIALS} "
            "--from-file=github_token=./github-controller-token"]


CONFIG_HEAD = """\
# gitscale.yaml: which runner sets gitscale scales, from what demand, by which policy.
# Docs: README.md of gitscale. Validate with `gitscale validate`, preview with `gitscale plan`.
runnerSets:
  - name: {name}
    manifest: {path}/runnersets/{name}.yaml
    object: {{kind: RunnerSet, name: {name}}}
"""

GITHUB_SOURCE = """\
    # Demand: the organization's queued and running workflow jobs, polled from GitHub's REST API
    # (or sent by `gitscale serve` webhooks). Permissions: docs/credentials.md of gitscale.
    source:
      github:
        org: {org}  # the GitHub organization whose jobs these runners take (gitscale init --github-org)
{api}\
        labels: {labels}  # the RunnerSet's spec.github.labels: keep the two equal
{credential}\
    policy: default
"""

GITHUB_TOKEN = """\
        token: {{env: GITHUB_TOKEN}}  # {where}
"""

GITHUB_APP = """\
        app:
          appId: {app_id}  # the GitHub App's id (gitscale init --github-app-id)
{installation}\
          privateKey: {{env: GITHUB_APP_PRIVATE_KEY}}  # {where}
"""
INSTALLATION = """\
          installationId: {installation}  # the id of the App's installation (gitscale init --github-app-installation-id)
"""
# without the id, the source looks the installation up once (GET /orgs/ORG/installation)
LOOKED_UP = """\
          # installationId: the App's installation on the org, looked up once; give it to skip that
"""

BUILDKITE_SOURCE = """\
    # Demand: the queue's scheduled and running jobs, from Buildkite's agent metrics API.
    source:
      buildkite:
        queue: {queue}  # the RunnerSet's spec.buildkite.queue: keep the two equal
        token: {{env: BUILDKITE_AGENT_TOKEN}}  # an agent token; {where}
        # Optional: the jobs' ids too (GraphQL API), so that a saturated queue costs a commit per
        # backlog used up, not per change (README, "Sources"). An API access token with GraphQL
        # API access (read-only; one with read_agents too may serve the controller as well),
        # {job_ids_where}
        # (docs/credentials.md of gitscale, "Job ids").
        # jobIds:
        #   token: {{env: BUILDKITE_GRAPHQL_TOKEN}}
        #   cluster: UUID-OF-THE-QUEUE-S-CLUSTER  # its Cluster ID (Agents > the cluster > Settings); omit for an unclustered queue
    policy: default
"""

DEMAND = """\
# What-if demand, for `gitscale plan --demand demand.yaml`: set name -> queued and running jobs.
# A pass reads the set's `source:` in gitscale.yaml; this file only when given with --demand.
{name}: {{queued: 0, running: 0}}
"""

RUNNERSET_HEAD = """\
# A pool of ephemeral {what}. gitscale owns spec.replicas, spec.patchID,
# spec.effectiveTime and spec.backlog (and gitscale.dev/ annotations); everything else is yours.
# Reference: docs/runnerset.md of gitscale.
apiVersion: {api_version}
kind: {kind}
metadata:
  name: {name}
  namespace: {namespace}
spec:
  replicas: 0
"""

GITHUB_SPEC = """\
  platform: github
  github:
    configURL: {config_url}  # your GitHub organization, where the runners register (gitscale init --github-org)
    labels: {labels}  # the labels of the set's source in gitscale.yaml: keep the two equal
    # A Secret in this namespace with github_token, or github_app_id + github_app_private_key
    # (+ github_app_installation_id): docs/credentials.md of gitscale.
    credentialsSecret: {secret}
  template:
    spec:
      containers:
        - name: runner
          image: {image}
          # No command: when the runner container has none, the controller starts
          # /home/runner/run.sh (the image has no entrypoint of its own); one set here is kept.
          resources:
            requests: {{cpu: "1", memory: 2Gi}}
"""

BUILDKITE_SPEC = """\
  platform: buildkite
  buildkite:
    queue: {queue}  # the queue of the set's source in gitscale.yaml: keep the two equal
    agentTokenSecret: {agent_secret}  # its key `token`: the agent token the pods register with
    organization: {org}  # your Buildkite organization's slug, to see which agent is busy (gitscale init --buildkite-org)
    apiTokenSecret: {api_secret}  # its key `token`: a REST API token with read_agents
  template:
    spec:
      containers:
        - name: agent
          image: {image}
          # No command or args: the image's entrypoint starts `buildkite-agent start`, which
          # reads what the controller puts in the environment (name, tags, the agent token).
          resources:
            requests: {{cpu: "1", memory: 2Gi}}
"""


def config_text(choices: Choices, api_url: str | None) -> str:
    """gitscale.yaml up to the notify block. ``api_url``: GitHub's REST API when it is not
    api.github.com (the one the controller derives from configURL)."""
    head = CONFIG_HEAD.format(name=SET, path=choices.path)
    if choices.platform == "buildkite":
        (agent,) = source_secrets(choices)
        return head + BUILDKITE_SOURCE.format(
            queue=choices.buildkite_queue, where=where_from(choices, agent),
            job_ids_where=where_from(choices, JOB_IDS_TOKEN, optional=True))
    (secret,) = source_secrets(choices)
    if choices.github_app is not None:
        app_id, installation = choices.github_app
        credential = GITHUB_APP.format(
            app_id=app_id, where=where_from(choices, secret),
            installation=LOOKED_UP if installation == PLACEHOLDER else INSTALLATION.format(
                installation=installation))
    else:
        credential = GITHUB_TOKEN.format(where=where_from(choices, secret))
    api = (f"        apiUrl: {api_url}  # the REST API of {choices.github_server}\n"
           if api_url else "")
    return head + GITHUB_SOURCE.format(org=choices.github_org, api=api, labels=LABELS,
                                       credential=credential)


def demand_text() -> str:
    return DEMAND.format(name=SET)


def runnerset_text(choices: Choices) -> str:
    github = choices.platform == "github"
    head = RUNNERSET_HEAD.format(
        what="GitHub Actions runners" if github else "Buildkite agents (one job each)",
        api_version=API_VERSION, kind=KIND, name=SET, namespace=choices.namespace)
    if github:
        return head + GITHUB_SPEC.format(config_url=choices.config_url, labels=LABELS,
                                         secret=GITHUB_CREDENTIALS, image=GITHUB_RUNNER_IMAGE)
    return head + BUILDKITE_SPEC.format(queue=choices.buildkite_queue,
                                        agent_secret=AGENT_TOKEN_SECRET,
                                        org=choices.buildkite_org, api_secret=API_TOKEN_SECRET,
                                        image=BUILDKITE_AGENT_IMAGE)
