"""The RunnerSet API's names and bounds, shared by the CRD, the scaler and the controller; and
the shape of gitscale's commits, shared by the workspace and `history`.

One place, so that raising a bound cannot make the controller refuse what the scaler writes.
Plain values and no imports: the pure core uses them too. ``gitscale.controller.crd`` builds the CRD
from them.
"""
from __future__ import annotations

GROUP = "gitscale.dev"
VERSION = "v1alpha1"
KIND = "RunnerSet"
PLURAL = "runnersets"
API_VERSION = f"{GROUP}/{VERSION}"

# The patch ID sequence wraps 2³¹−1 → 1 (0 means "force the state"): the largest value of a
# Kubernetes int32 field, as in actions-runner-controller.
PATCH_ID_MAX = 2**31 - 1
# Replicas (and buffers and step limits in a policy) above this are typos, not plans.
REPLICAS_MAX = 10_000
# Queued or running jobs a source may report for one set, and a Gitscale-Set trailer may
# record: a count above it is a source's error, or a trailer gitscale did not write.
JOB_LIMIT = 1_000_000
# What every commit gitscale makes looks like, as a pattern (flags inline, for re.match): its
# subject, then the Gitscale-Base trailer last — a scaling commit, and serve's commits of
# reservations alone, which have no Gitscale-Set. The workspace knows its own leftovers by it,
# `history` the commits that are not a person's.
OWN_COMMIT = r"(?ms)\Agitscale: .*^Gitscale-Base: [0-9a-f]{7,64}\s*\Z"
# spec.backlog (jobs the replicas could not cover at the write) is capped here: the controller
# refills at most this many finished slots per write, and the scaler writes again before then.
BACKLOG_MAX = REPLICAS_MAX

# The runner images `gitscale init` writes into its example RunnerSet: released versions,
# pinned, never `:latest` (a pod must start the runner the set was tested with). To bump the
# GitHub runner, pick a release of https://github.com/actions/runner/releases (each publishes
# ghcr.io/actions/actions-runner:<version>, e.g. v2.336.0 → :2.336.0); the agent, a release of
# https://github.com/buildkite/agent/releases (buildkite/agent:<version>). Change the docs'
# examples with it (docs/pod-templates.md, docs/examples/). A GitHub runner behind the newest
# release updates itself when it starts (each pod starts slower), and GitHub stops accepting
# runners that are too old: bump it with each gitscale release.
GITHUB_RUNNER_IMAGE = "ghcr.io/actions/actions-runner:2.336.0"
BUILDKITE_AGENT_IMAGE = "buildkite/agent:3.137.0"
