"""`gitscale init`: a review of each proposed change to the config repo, in its CI.

A pull request (GitHub) or merge request (GitLab) that touches the repo gets `gitscale
validate` and `gitscale plan` run on its merge commit: the job fails on an invalid manifest or
a config gitscale refuses, and shows what the next pass would write with the change at the
demand of that moment (exit 2, changes pending, is a pass, not a failure). The checkout is a
detached HEAD, which plan and validate read as it is (``gitscale.repo.workspace``). Nothing is
written or pushed: the job has read access only.

Written beside the scheduler for ``--run-in github-actions`` and ``gitlab``, where the demand
source's credentials are already CI secrets; from the cluster those live in the cluster only.
"""
from __future__ import annotations

from gitscale import __version__
from gitscale.commands.init_choices import Choices

# exit 0: no change; 2: changes pending (what a review is for); 1: an error, the job fails
PLAN_SCRIPT = """\
set +e
gitscale plan --repo {repo}{config} --every 5m > plan.txt
code=$?
set -e
cat plan.txt"""

GITHUB = """\
# gitscale on pull requests: validate the proposed change and show what the next pass would
# write with it (the run's summary), before it is merged. It reads nothing but the checkout
# and the demand source, with the same secrets as gitscale.yml (a pull request from a fork
# gets no secrets: its plan says the demand could not be read). For a what-if at a demand of
# your choosing, add --demand demand.yaml to the plan.
name: gitscale plan

on:
  pull_request:
    branches: [{quoted_branch}]

permissions:
  contents: read

jobs:
  plan:
    runs-on: ubuntu-latest
    timeout-minutes: 10
    env:
      GITSCALE_VERSION: "{version}"
    steps:
      - uses: actions/checkout@v4
        with:
          path: config
          # the whole history: a forecast reads the past weeks' scaling commits
          fetch-depth: 0
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: python -m pip install "gitscale==${{GITSCALE_VERSION}}"
      - name: Validate
        run: gitscale validate --repo config{config}
      - name: Plan
        run: |
{script}
          {{ echo "### gitscale plan"; echo '```diff'; cat plan.txt; echo '```'; }} >> "$GITHUB_STEP_SUMMARY"
          test "$code" -ne 1
        env:
{source_env}"""

GITLAB = """\

# gitscale on merge requests: validate the proposed change and show what the next pass would
# write with it (the job's log), before it is merged. The source's variables above must not be
# protected for a merge request from an unprotected branch to read them. For a what-if at a
# demand of your choosing, add --demand demand.yaml to the plan.
gitscale-plan:
  image: python:3.11
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
  variables:
    GIT_DEPTH: "0"           # the whole history: a forecast reads the past weeks' commits
    GITSCALE_VERSION: "{version}"
  script:
    - pip install --quiet "gitscale==$GITSCALE_VERSION"
    - gitscale validate --repo .{config}
    - |
{script}
      test "$code" -ne 1
"""


def _indented(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def github_review(choices: Choices, source_env: str, quoted_branch: str) -> dict[str, str]:
    """``.github/workflows/gitscale-plan.yml``; ``source_env``: the scheduler's lines of
    the demand source's secrets (the same variables, the same indentation)."""
    script = PLAN_SCRIPT.format(repo="config", config=choices.config_flag)
    return {".github/workflows/gitscale-plan.yml": GITHUB.format(
        version=__version__, config=choices.config_flag, quoted_branch=quoted_branch,
        script=_indented(script, 10), source_env=source_env)}


def gitlab_review(choices: Choices) -> str:
    """The merge-request job appended to ``.gitlab-ci.yml``."""
    script = PLAN_SCRIPT.format(repo=".", config=choices.config_flag)
    return GITLAB.format(version=__version__, config=choices.config_flag,
                         script=_indented(script, 6))
