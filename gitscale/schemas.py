"""JSON Schemas for the files people write: gitscale.yaml, policy presets, demand files."""
from __future__ import annotations

import functools
from typing import Any

from gitscale.runnerset_api import REPLICAS_MAX

LIMIT = REPLICAS_MAX  # replicas, buffers and steps above this are typos, not plans
JOB_LIMIT = 1_000_000

DURATION = {"type": "string", "pattern": r"^(\d+h)?(\d+m)?(\d+s)?$", "minLength": 2}
COUNT = {"type": "integer", "minimum": 0, "maximum": LIMIT}
NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}

SCHEDULE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "start", "duration"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 100},
        "start": {"type": "string", "minLength": 1},
        "duration": DURATION,
        "recurrence": {"type": "string", "minLength": 1},
        "timezone": {"type": "string", "minLength": 1},
        "minReplicas": COUNT,
        "maxReplicas": COUNT,
    },
    "anyOf": [{"required": ["minReplicas"]}, {"required": ["maxReplicas"]}],
}

POLICY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "minReplicas": COUNT,
        "maxReplicas": COUNT,
        "buffer": COUNT,
        "scaleDownDelay": DURATION,
        "maxStepUp": {"type": "integer", "minimum": 1, "maximum": LIMIT},
        "maxStepDown": {"type": "integer", "minimum": 1, "maximum": LIMIT},
        "schedules": {"type": "array", "items": SCHEDULE, "maxItems": 100},
    },
}

SECRET_REF: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "maxProperties": 1,
    "properties": {"env": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
                   "file": {"type": "string", "minLength": 1}},
}
API_URL = {"type": "string", "pattern": r"^https?://[^\s@]+$"}

GITHUB: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["labels"],
    "oneOf": [{"required": ["org"]}, {"required": ["repos"]}],
    "properties": {
        "apiUrl": API_URL,
        "org": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9-]*$"},
        "repos": {"type": "array", "minItems": 1, "maxItems": 10_000, "uniqueItems": True,
                  "items": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"}},
        "labels": {"type": "array", "minItems": 1, "maxItems": 100,
                   "items": {"type": "string", "minLength": 1, "maxLength": 256}},
        "token": SECRET_REF,
        "concurrency": {"type": "integer", "minimum": 1, "maximum": 64},
        "app": {
            "type": "object",
            "additionalProperties": False,
            "required": ["appId", "installationId", "privateKey"],
            "properties": {"appId": {"type": ["integer", "string"]},
                           "installationId": {"type": ["integer", "string"]},
                           "privateKey": SECRET_REF},
        },
    },
}

BUILDKITE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["queue"],
    "properties": {
        "apiUrl": API_URL,
        "queue": {"type": "string", "minLength": 1, "maxLength": 256},
        "token": SECRET_REF,
        "countWaiting": {"type": "boolean"},
    },
}

SOURCE: dict[str, Any] = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": 1,
    "additionalProperties": False,
    "properties": {
        "file": {"type": "string", "minLength": 1},
        "github": GITHUB,
        "buildkite": BUILDKITE,
    },
}

# Where to tell a GitOps engine that a push landed (see gitscale/notify/). URLs carry no
# credentials; the secrets are {env: NAME} or {file: PATH} like every other credential.
NOTIFY_URL = {"type": "string", "pattern": r"^https?://[^\s@/]+(/[^\s@]*)?$", "maxLength": 2048}
NOTIFY_TIMEOUT = {"type": "string", "pattern": r"^([1-9]|[1-5][0-9]|60)s$"}
NOTIFY: dict[str, Any] = {
    "type": "array",
    "maxItems": 20,
    "items": {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": False,
        "properties": {
            "flux": {
                "type": "object",
                "additionalProperties": False,
                "required": ["url", "token"],
                "properties": {
                    "url": NOTIFY_URL,
                    "token": SECRET_REF,
                    "receiver": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "namespace"],
                        "properties": {"name": NAME, "namespace": NAME},
                    },
                    "timeout": NOTIFY_TIMEOUT,
                },
            },
            "argocd": {
                "type": "object",
                "additionalProperties": False,
                "required": ["url"],
                "properties": {
                    "url": NOTIFY_URL,
                    "secret": SECRET_REF,
                    "repoURL": {"type": "string", "minLength": 1, "maxLength": 2048},
                    "timeout": NOTIFY_TIMEOUT,
                },
            },
            "webhook": {
                "type": "object",
                "additionalProperties": False,
                "required": ["url"],
                "properties": {"url": NOTIFY_URL, "secret": SECRET_REF,
                               "timeout": NOTIFY_TIMEOUT},
            },
        },
    },
}

CONFIG: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["runnerSets"],
    "properties": {
        "limits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"maxTotalReplicas": {"type": "integer", "minimum": 0,
                                                "maximum": 10_000_000}},
        },
        "notify": NOTIFY,
        "runnerSets": {
            "type": "array",
            "maxItems": 100_000,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "manifest", "source", "policy"],
                "properties": {
                    "name": NAME,
                    "manifest": {"type": "string", "minLength": 1, "maxLength": 1024},
                    "object": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "kind": {"type": "string", "minLength": 1},
                            "name": {"type": "string", "minLength": 1},
                            "namespace": {"type": "string", "minLength": 1},
                        },
                    },
                    "source": SOURCE,
                    "policy": {"oneOf": [{"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$"},
                                         POLICY]},
                },
            },
        },
    },
}

DEMAND: dict[str, Any] = {
    "type": "object",
    "propertyNames": NAME,
    "additionalProperties": {
        "type": "object",
        "additionalProperties": False,
        "required": ["queued", "running"],
        "properties": {
            "queued": {"type": "integer", "minimum": 0, "maximum": JOB_LIMIT},
            "running": {"type": "integer", "minimum": 0, "maximum": JOB_LIMIT},
            "jobs": {
                "type": "array",
                "maxItems": JOB_LIMIT,
                "items": {"type": ["string", "integer"]},
            },
        },
    },
}


@functools.cache
def fast_check(name: str) -> Any:
    """fastjsonschema's compiled check (10-50x faster): a thousand sets validate in milliseconds.
    It only answers valid/invalid well; jsonschema explains an invalid document."""
    import fastjsonschema

    # (no detailed exceptions: only valid/invalid is read, and they triple the compile time)
    return fastjsonschema.compile(globals()[name], detailed_exceptions=False)


@functools.cache
def validator(name: str) -> Any:
    """A compiled validator for one of the schemas above (jsonschema is imported on first use:
    it is the slowest import of the CLI, and most passes never need it)."""
    import jsonschema

    return jsonschema.Draft202012Validator(globals()[name])
