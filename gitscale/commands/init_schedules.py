"""`gitscale init`: the ways to run gitscale itself; ``--run-in`` picks the one written.

- ``.github/workflows/gitscale.yml``: a reconcile pass every 5 minutes (GitHub's shortest
  schedule), never two at once, the state cache kept between runs, ``contents: write`` only,
  the config repo checked out whole (``fetch-depth: 0``: a forecast reads its history);
- ``.gitlab-ci.yml``: the same for a GitLab pipeline schedule;
- beside either, a review of each pull / merge request: validate and plan (``init_review``);
- ``deploy/scaler/``: gitscale in a cluster, outside the GitOps path (``init_scaler``).
"""
from __future__ import annotations

import json

from gitscale import __version__
from gitscale.commands.init_choices import DEFAULT_BRANCH, Choices
from gitscale.commands.init_notify import notify_env_name
from gitscale.commands.init_review import github_review, gitlab_review
from gitscale.commands.init_runners import optional_secrets, source_secrets
from gitscale.commands.init_scaler import scaler_files

WORKFLOW = """\
# gitscale on a schedule: one reconcile pass every 5 minutes. That is GitHub's shortest
# schedule, and runs often start a few minutes late; when jobs must not wait that long, run
# `gitscale serve` (webhooks) or `gitscale run` in the cluster instead (`gitscale init
# --run-in cluster` writes deploy/scaler/), and delete this file: one scheduler, never two.
# GitHub runs a scheduled workflow only from the repository's default branch: this file must be
# on it. It reconciles the branch {branch} (the one Argo CD / Flux follow, checked out below),
# which need not be the default one.
name: gitscale

on:
  schedule:
    - cron: "*/5 * * * *"
  workflow_dispatch: {{}}

# One pass at a time: a run that starts while another is going waits for it (never cancels it).
concurrency:
  group: gitscale
  cancel-in-progress: false

# Least privilege: push the scaling commit, nothing else.
permissions:
  contents: write

jobs:
  reconcile:
    runs-on: ubuntu-latest
    timeout-minutes: 10
    env:
      GITSCALE_VERSION: "{version}"
      GITSCALE_BRANCH: {quoted_branch}
      GITSCALE_CACHE_DIR: ${{{{ github.workspace }}}}/.gitscale-cache
    steps:
      - uses: actions/checkout@v4
        with:
          path: config
          ref: ${{{{ env.GITSCALE_BRANCH }}}}
          # The whole history: a forecast (policy.forecast) learns from the past weeks'
          # scaling commits, and gitscale never deepens a checkout it is given. The default
          # (one commit) would leave it reactive ("the checkout is shallow").
          fetch-depth: 0
      - name: Track the branch, so gitscale pushes the commit it makes
        run: git -C config branch --set-upstream-to="origin/$GITSCALE_BRANCH"
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: python -m pip install "gitscale==${{GITSCALE_VERSION}}"
      # The state cache makes a pass parse only the manifests that changed; a new key per run
      # and a prefix to restore from keeps the newest one.
      - uses: actions/cache@v4
        with:
          path: ${{{{ env.GITSCALE_CACHE_DIR }}}}
          key: gitscale-state-${{{{ github.run_id }}}}
          restore-keys: gitscale-state-
      - name: Reconcile
        # --every: the schedule's period (a forecast's cushion serves until the next run)
        run: gitscale reconcile --repo config{config} --every 5m
        env:
          {notify_env}: ${{{{ secrets.{notify_env} }}}}
          # The demand source's credential, as gitscale.yaml names it (a repository secret{why}):
{source_env}"""

GITLAB = """\
# gitscale on a GitLab pipeline schedule. Create the schedule under Build > Pipeline schedules
# with the cron "*/5 * * * *" (how soon GitLab really starts it depends on the instance), and a
# project access token with write_repository as the masked CI/CD variable GITSCALE_GIT_TOKEN:
# gitscale hands it to git through GIT_ASKPASS, never in a URL or a log.
gitscale:
  image: python:3.11
  rules:
    - if: $CI_PIPELINE_SOURCE == "schedule"
    - if: $CI_PIPELINE_SOURCE == "web"
  resource_group: gitscale   # one pass at a time: never two overlapping
  variables:
    GIT_STRATEGY: none       # gitscale clones the config repo itself (no GIT_DEPTH: it
                             # deepens its clone to what a forecast's lookback reads)
    GITSCALE_VERSION: "{version}"
    GITSCALE_GIT_USERNAME: oauth2
    GITSCALE_CACHE_DIR: $CI_PROJECT_DIR/.gitscale-cache
    # {notify_env} and {source_vars}: CI/CD variables, masked (init prints a
    # `glab variable set` line for each; a PEM key cannot be masked: protected)
{optional_vars}  cache:
    key: gitscale-state
    paths:
      - .gitscale-cache/
  script:
    - pip install --quiet "gitscale==$GITSCALE_VERSION"
    # --every: the schedule's period (a forecast's cushion serves until the next run)
    - gitscale reconcile --repo "$CI_PROJECT_URL.git" --branch "$CI_COMMIT_REF_NAME"{config} --every 5m
"""

def schedule_files(choices: Choices) -> dict[str, str]:
    """path → text of the one scheduler ``--run-in`` chose: the GitHub workflow, the GitLab
    pipeline, or the in-cluster scaler's manifests (never two: they would race)."""
    notify_env = notify_env_name(choices.gitops)
    secrets = source_secrets(choices)
    source_env = "".join(f"          {s.env}: ${{{{ secrets.{s.ci_secret} }}}}\n"
                         for s in secrets)
    # the optional jobIds token, always passed: a secret that does not exist is an empty
    # value, which nothing reads while jobIds is commented out (and which, once it is not, is
    # refused as empty, naming the variable and gitscale.yaml's line)
    source_env += "".join(
        "          # optional: jobIds' GraphQL token (gitscale.yaml), once that secret exists\n"
        f"          {s.env}: ${{{{ secrets.{s.ci_secret} }}}}\n"
        for s in optional_secrets(choices))
    config = choices.config_flag
    if choices.run_in == "github-actions":
        # GitHub's source reads the organization's jobs, which the workflow's own token cannot
        why = (": the\n          # workflow's own GITHUB_TOKEN can read only this repository"
               if choices.platform == "github" else "")
        return {".github/workflows/gitscale.yml": WORKFLOW.format(
            version=__version__, notify_env=notify_env, source_env=source_env, why=why,
            branch=choices.branch, quoted_branch=json.dumps(choices.branch), config=config),
            **github_review(choices, source_env, json.dumps(choices.branch))}
    if choices.run_in == "gitlab":
        optional_vars = "".join(
            f"    # {s.env} too (a CI/CD variable, masked), once jobIds in gitscale.yaml is\n"
            "    # uncommented: its GraphQL token\n" for s in optional_secrets(choices))
        return {".gitlab-ci.yml": GITLAB.format(version=__version__, notify_env=notify_env,
                                                source_vars=", ".join(s.env for s in secrets),
                                                optional_vars=optional_vars, config=config)
                + gitlab_review(choices, secrets)}
    return scaler_files(choices)


def schedule_next_steps(choices: Choices) -> str:
    """Which scheduler runs gitscale (the one init wrote), and how to switch."""
    others = ", ".join(r for r in ("github-actions", "gitlab", "cluster") if r != choices.run_in)
    switch = (f"To run it elsewhere, `gitscale init SCRATCH --run-in {others.replace(', ', '|')}`"
              " writes that one: copy it in and delete this one (never two at once: they "
              "would race each other's pushes).")
    if choices.run_in_from is not None:
        switch = (f"(Chosen by where the config repo lives, {choices.run_in_from}; --run-in "
                  f"picks another.) " + switch)
    if choices.run_in == "github-actions":
        default = "" if choices.branch == DEFAULT_BRANCH else (
            f" GitHub runs a schedule only from the repository's default branch: make "
            f"{choices.branch} the default, or commit .github/workflows/gitscale.yml to the "
            f"default branch too (it checks out {choices.branch} itself).")
        return ("gitscale runs from .github/workflows/gitscale.yml: every 5 minutes once "
                "pushed to GitHub (repository secrets: the workflow's env)." + default + " "
                + switch)
    if choices.run_in == "gitlab":
        return ("gitscale runs from .gitlab-ci.yml once you create its pipeline schedule "
                "(Build > Pipeline schedules, \"*/5 * * * *\"; the file's comment). " + switch)
    instead = "`run` / `serve`" if choices.platform == "github" else "`run`"  # serve: GitHub's
    return ("gitscale runs in the cluster: `kubectl apply -k deploy/scaler/` (a CronJob every "
            f"minute; deploy/scaler/README.md: its Secrets, and {instead} instead). " + switch)
