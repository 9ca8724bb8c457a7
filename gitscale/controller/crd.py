"""The RunnerSet resource (gitscale.dev/v1alpha1): the one source of truth for its schema.

The API's names and bounds live in ``gitscale.runnerset_api`` (the scaler and the controller use
the same values), the platforms and their settings in the controller's registry
(``gitscale.controller.platforms``). The CRD file in ``deploy/crds/`` is generated from here
(``gitscale crd``) and a test checks that the committed file matches. In-process validation
derives its JSON Schema from the same CRD, as it does for any other CRD in a config repo.
"""
from __future__ import annotations

from typing import Any

from gitscale.controller.platforms import PLATFORMS
from gitscale.runnerset_api import (
    BACKLOG_MAX,
    GROUP,
    KIND,
    PATCH_ID_MAX,
    PLURAL,
    REPLICAS_MAX,
    VERSION,
)


SPEC: dict[str, Any] = {
    "type": "object",
    "description": "The set's runners. gitscale owns replicas, patchID, effectiveTime and "
                   "backlog (written in the config repo); the rest is yours.",
    "required": ["platform", "template"],
    "properties": {
        "replicas": {
            "type": "integer", "minimum": 0, "maximum": REPLICAS_MAX,
            "description": "Runners wanted. Owned by gitscale.",
        },
        "patchID": {
            "type": "integer", "minimum": 0, "maximum": PATCH_ID_MAX,
            "description": "Sequence of the write (0 = force the state, the only value that "
                           "allows scale-down). Owned by gitscale.",
        },
        "effectiveTime": {
            "type": "string", "format": "date-time", "nullable": True,
            "description": "When gitscale last wrote this spec. Slots freed by runners that "
                           "finished after it are refilled only once the spec is re-affirmed, "
                           "or from the backlog.",
        },
        "backlog": {
            "type": "integer", "minimum": 0, "maximum": BACKLOG_MAX,
            "description": "Jobs this write's replicas could not cover: once the write is "
                           "applied, the controller refills up to this many slots of runners "
                           "that finished after effectiveTime, without a new write (never "
                           "beyond replicas). Owned by gitscale.",
        },
        # The platforms of the controller's registry: the enum, and each one's settings.
        "platform": {"type": "string", "enum": list(PLATFORMS),
                     "description": "The CI system of the runners; its settings are under "
                                    "spec.<platform>."},
        **{name: kind.schema for name, kind in PLATFORMS.items()},
        "template": {
            "type": "object",
            "description": "Pod template of one ephemeral runner (a core/v1 PodTemplateSpec).",
            "required": ["spec"],
            "properties": {
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                             "description": "Labels and annotations of every runner pod "
                                            "(the rest is not used)."},
                "spec": {
                    "type": "object",
                    "description": "A core/v1 PodSpec, kept as written: the API server "
                                   "checks it when the controller creates a pod.",
                    "required": ["containers"],
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {
                        "containers": {
                            "type": "array", "minItems": 1,
                            "description": "The runner is the container named runner, else "
                                           "the first; the controller adds its environment "
                                           "to that one.",
                            "items": {
                                "type": "object",
                                "required": ["name", "image"],
                                "x-kubernetes-preserve-unknown-fields": True,
                                "properties": {
                                    "name": {"type": "string", "minLength": 1,
                                             "description": "The container's name."},
                                    "image": {"type": "string", "minLength": 1,
                                              "description": "The container's image: pin "
                                                             "a version."},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}

COUNTS = {
    "replicas": "The set's runners, those that hold its slots: pending + idle + busy + "
                "failed (not those being deleted).",
    "pending": "Runner pods not running yet, and runners not connected to the platform yet.",
    "idle": "Runners connected and waiting for a job.",
    "busy": "Runners running a job (one the platform cannot vouch for counts as busy).",
    "failed": "Runners whose container failed, waiting for their replacement.",
}

STATUS: dict[str, Any] = {
    "type": "object",
    "description": "Written by the controller, through the status subresource.",
    "properties": {
        **{k: {"type": "integer", "minimum": 0, "description": what}
           for k, what in COUNTS.items()},
        "terminating": {
            "type": "integer", "minimum": 0,
            "description": "Runner pods being deleted that have not stopped yet (in their "
                           "grace period). Not in replicas: they hold no slot of the set.",
        },
        "observedPatchID": {"type": "integer", "minimum": 0,
                            "description": "spec.patchID of the spec this status was "
                                           "computed for."},
        "observedGeneration": {"type": "integer", "minimum": 0,
                               "description": "metadata.generation of that spec."},
        "appliedPatchID": {
            "type": "integer", "minimum": 0,
            "description": "Patch ID of the last spec write the controller fully applied "
                           "(every runner it wanted created). Until the spec's write is this "
                           "one, the controller keeps acting on it.",
        },
        "appliedEffectiveTime": {"type": "string", "format": "date-time",
                                 "description": "effectiveTime of the write appliedPatchID "
                                                "names."},
        "appliedReplicas": {
            "type": "integer", "minimum": 0,
            "description": "spec.replicas of the write appliedPatchID names, as it was applied. "
                           "A spec.replicas written by hand over that write (patchID and "
                           "effectiveTime unchanged, patchID above 0) is not acted on: Ready's "
                           "message says so.",
        },
        "refilled": {
            "type": "integer", "minimum": 0,
            "description": "Slots the controller refilled from the backlog of the write "
                           "refilledPatchID / refilledEffectiveTime (at most its backlog).",
        },
        "refilledPatchID": {"type": "integer", "minimum": 0,
                            "description": "Patch ID of the write refilled counts for."},
        "refilledEffectiveTime": {"type": "string", "format": "date-time",
                                  "description": "effectiveTime of the write refilled "
                                                 "counts for."},
        "conditions": {
            "type": "array",
            "description": "Ready, Reconciling, Stalled, RunnersFailing and BusyKnown "
                           "(kstatus conditions: kubectl wait --for=condition=Ready).",
            "items": {
                "type": "object",
                "required": ["type", "status"],
                "properties": {
                    "type": {"type": "string", "description": "The condition's type."},
                    "status": {"type": "string", "enum": ["True", "False", "Unknown"],
                               "description": "True, False or Unknown."},
                    "reason": {"type": "string",
                               "description": "Why, in one CamelCase word."},
                    "message": {"type": "string", "description": "Why, for people."},
                    "lastTransitionTime": {"type": "string", "format": "date-time",
                                           "description": "When status last changed."},
                    "observedGeneration": {"type": "integer", "minimum": 0,
                                           "description": "metadata.generation the "
                                                          "condition was set for."},
                },
            },
        },
    },
}


def _column(name: str, path: str, kind: str = "integer") -> dict[str, str]:
    return {"name": name, "type": kind, "jsonPath": path}


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition, as applied to a cluster."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL,
                      "singular": "runnerset", "shortNames": ["grs"]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    _column("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
                    _column("Desired", ".spec.replicas"),
                    _column("Patch", ".spec.patchID"),
                    _column("Pending", ".status.pending"),
                    _column("Idle", ".status.idle"),
                    _column("Busy", ".status.busy"),
                    _column("Age", ".metadata.creationTimestamp", "date"),
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A pool of ephemeral CI runners: gitscale writes how many "
                                   "it wants into the config repo, the controller makes one "
                                   "pod per runner. Reference: docs/runnerset.md of "
                                   "gitscale.",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": SPEC,
                        "status": STATUS,
                    },
                }},
            }],
        },
    }


def crd_yaml() -> str:
    from gitscale.yamlio.write import dump

    header = ("# Generated by `gitscale crd` from gitscale/controller/crd.py. Do not edit by hand.\n")
    return header + dump(crd(), width=100)
