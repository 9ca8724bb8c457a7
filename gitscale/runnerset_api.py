"""The RunnerSet API's names and bounds, shared by the CRD, the scaler and the controller.

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
# spec.backlog (jobs the replicas could not cover at the write) is capped here: the controller
# refills at most this many finished slots per write, and the scaler writes again before then.
BACKLOG_MAX = REPLICAS_MAX
