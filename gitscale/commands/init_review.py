"""`gitscale init`: a review of each proposed change to the config repo, in its CI.

A pull request (GitHub) or merge request (GitLab) that touches the repo gets `gitscale
validate` and `gitscale plan` run on its merge with the target branch: the job fails on an
invalid manifest or a config gitscale refuses, and shows what the next pass would write with
the change at the demand of that moment. Exit 0 (no change) and 2 (changes pending) pass; any
other (1, an error; 70, a crash; a kill) fails the job. The checkout is a detached HEAD, which
plan and validate read as it is (``gitscale.repo.workspace``). GitHub checks out its merge
commit; GitLab checks out the source branch's head (merged results pipelines are a paid
option), so the job merges the target branch in itself — gitscale commits to it every few
minutes, and a plan against the branch point would diff stale replicas. Nothing is written or
pushed: the job has read access only.

Written beside the scheduler for ``--run-in github-actions`` and ``gitlab``, where the demand
source's credentials are already CI secrets; from the cluster those live in the cluster only.
Not for GitLab with a GitHub App's key: it cannot be masked, so it is a protected variable,
which a merge request's pipeline (an unprotected branch) does not get.
"""
from __future__ import annotations

from textwrap import indent

from gitscale import __version__
from gitscale.commands.init_choices import Choices
from gitscale.commands.init_runners import SourceSecret

# exit 0: no change; 2: changes pending (what a review is for); any other fails the job: 1 an
# error, 70 a crash, a kill (the summary would otherwise read as "no change")
PLAN_SCRIPT = """\
set +e
gitscale plan --repo {repo}{config} --every 5m > plan.txt
code=$?
set -e
cat plan.txt"""
PASS_ON = 'case "$code" in 0|2) ;; *) exit "$code" ;; esac'
# GitLab: the target branch merged into the source branch's head (detached), as it would land
MERGE = """\
git fetch --quiet origin "$CI_MERGE_REQUEST_TARGET_BRANCH_NAME"
git -c user.name=gitscale -c user.email=gitscale@localhost merge --quiet --no-edit FETCH_HEAD\
"""

GITHUB = """\
# gitscale on pull requests: validate the proposed change and show what the next pass would
# write with it (the run's summary), before it is merged. It reads nothing but the checkout
# and the demand source, with the same secrets as gitscale.yml (a pull request from a fork
# gets no secrets: its plan says the demand could not be read, and the check fails). For a
# what-if at a demand of your choosing, add --demand demand.yaml to the plan.
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
          {pass_on}
        env:
{source_env}"""

GITLAB = """\

# gitscale on merge requests: validate the proposed change, merged with the target branch, and
# show what the next pass would write with it (the job's log), before it is merged. A
# merge request's pipeline gets the source's variables above only when they are not
# protected (or its branch is). For a what-if at a demand of your choosing, add
# --demand demand.yaml to the plan.
gitscale-plan:
  image: python:3.11
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
  variables:
    GIT_DEPTH: "0"           # the whole history: a forecast reads the past weeks' commits
    GITSCALE_VERSION: "{version}"
  script:
    - pip install --quiet "gitscale==$GITSCALE_VERSION"
    - |
{merge}
    - gitscale validate --repo .{config}
    - |
{script}
      {pass_on}
"""


def github_review(choices: Choices, source_env: str, quoted_branch: str) -> dict[str, str]:
    """``.github/workflows/gitscale-plan.yml``; ``source_env``: the scheduler's lines of
    the demand source's secrets (the same variables, the same indentation)."""
    script = PLAN_SCRIPT.format(repo="config", config=choices.config_flag)
    return {".github/workflows/gitscale-plan.yml": GITHUB.format(
        version=__version__, config=choices.config_flag, quoted_branch=quoted_branch,
        script=indent(script, " " * 10), source_env=source_env, pass_on=PASS_ON)}


def gitlab_review(choices: Choices, secrets: list[SourceSecret]) -> str:
    """The merge-request job appended to ``.gitlab-ci.yml``; nothing when a credential of the
    source cannot be masked (a GitHub App's key: protected, so a merge request never gets it)."""
    if not all(s.maskable for s in secrets):
        return ""
    script = PLAN_SCRIPT.format(repo=".", config=choices.config_flag)
    return GITLAB.format(version=__version__, config=choices.config_flag,
                         script=indent(script, " " * 6), merge=indent(MERGE, " " * 6),
                         pass_on=PASS_ON)
