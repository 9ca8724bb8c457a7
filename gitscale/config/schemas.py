"""JSON Schemas for the files people write: gitscale.yaml, policy presets, demand files."""
from __future__ import annotations

import functools
import math
from datetime import date, time
from typing import Any

from gitscale.core.forecast import DAYS
from gitscale.errors import InputError, shown, shown_as_yaml
from gitscale.runnerset_api import JOB_LIMIT, REPLICAS_MAX
from gitscale.yamlio.read import Document, format_path, unusual

LIMIT = REPLICAS_MAX  # replicas, buffers and steps above this are typos, not plans

DURATION = {"type": "string", "pattern": r"^(\d+d)?(\d+h)?(\d+m)?(\d+s)?$", "minLength": 2}
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

# policy.forecast (gitscale.core.forecast): lookback in days or weeks, a quantile in (0, 1]
# (the one fractional number gitscale's files hold), how far ahead to look, how far the
# pattern moves from week to week, the wait it aims for, which past days hold the pattern, and
# the zone of the pattern's wall clock (default: the zone of the policy's schedules, else UTC).
FORECAST: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "lookback": DURATION,
        "quantile": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "lead": DURATION,
        "jitter": DURATION,
        "wait": DURATION,
        "timezone": {"type": "string", "minLength": 1},
        "days": {"enum": list(DAYS)},
    },
}
FRACTIONS = {("forecast", "quantile")}  # (parent key, key) of the numbers that may be floats

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
        "forecast": FORECAST,
    },
}

# a set's policy: a preset's name (policies/NAME.yaml, or a shipped one) or the policy itself
POLICY_CHOICE: dict[str, Any] = {"oneOf": [{"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$"},
                                           POLICY]}

from gitscale.config.secrets import SECRET_REF  # noqa: E402  (the notify schema uses it)
from gitscale.config.sources import API_URL, CLUSTER_UUID, SOURCE  # noqa: E402  (each source's schema is
# in its entry)

# Where to tell a GitOps engine that a push landed (see gitscale/notify/). URLs carry no
# credentials; the secrets are {env: NAME} or {file: PATH} like every other credential.
NOTIFY_URL = {"type": "string", "pattern": r"^https?://[^\s@/]+(/[^\s@]*)?$", "maxLength": 2048}
NOTIFY_TIMEOUT = {"type": "string", "pattern": r"^([1-9]|[1-5][0-9]|60)s$"}
# true: this entry's https certificate is not verified (an in-cluster server's self-signed one)
NOTIFY_INSECURE = {"type": "boolean"}
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
                    "insecureSkipTLSVerify": NOTIFY_INSECURE,
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
                    "insecureSkipTLSVerify": NOTIFY_INSECURE,
                },
            },
            "webhook": {
                "type": "object",
                "additionalProperties": False,
                "required": ["url"],
                "properties": {"url": NOTIFY_URL, "secret": SECRET_REF,
                               "timeout": NOTIFY_TIMEOUT,
                               "insecureSkipTLSVerify": NOTIFY_INSECURE},
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
                    # the names the set had before a rename: its history (the scaling
                    # commits' trailers) under them is its own (config.load checks the rest)
                    "previousNames": {"type": "array", "items": NAME, "maxItems": 100},
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
                    "policy": POLICY_CHOICE,
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


def check_schema(
    document: Document,
    schema: str,
    source: str,
    error: type[InputError],
    describe: Any = None,
) -> None:
    """Validate ``document.data`` against the schema named ``schema`` here; raise ``error`` at the line of
    the most relevant problem. ``describe(path)`` may turn a data path into a friendlier label.
    """
    import fastjsonschema

    odd_key, floats = unusual(document.data)  # (one walk of the data for both checks)
    if odd_key:
        _refuse_odd_keys(document, source, error, describe)
    try:
        fast_check(schema)(document.data)
    except fastjsonschema.JsonSchemaException:
        pass  # explain it with jsonschema, which finds the most relevant error and its path
    else:
        if floats:
            _refuse_floats(document, source, error, describe)
        return
    import jsonschema  # only now: importing it costs more than most passes

    problem = _policy_branch(jsonschema.exceptions.best_match(
        validator(schema).iter_errors(document.data)))
    if problem is None:
        return
    path = list(problem.absolute_path)
    label = describe(path) if describe else format_path(path)
    if _in_secret_ref(problem):  # the value may be the secret itself: never shown
        if problem.validator == "not":
            said = ("a token, not the name of the environment variable that holds it: write "
                    "{env: NAME}, and revoke the token, which is now in the config repo's "
                    "history")
        elif problem.validator == "pattern":
            said = "not the name of an environment variable (letters, digits and _)"
        elif isinstance(problem.instance, dict):
            said = "a secret is written {env: NAME} or {file: PATH}: one of the two, no other key"
        else:
            said = "a secret is written {env: NAME} or {file: PATH}, never inline"
        raise error(source, f"{label}: {said} (the value is not shown)", document.line_of(path))
    if problem.validator == "additionalProperties" and isinstance(problem.instance, dict):
        allowed = sorted(problem.schema.get("properties", {}))
        extra = sorted(k for k in problem.instance if k not in allowed)
        key = str(extra[0]) if extra else "?"
        line = document.key_line(path, key)
        where = f"{label}: " if path else ""
        raise error(source, f"{where}unknown key {shown(key)} (allowed: {', '.join(allowed)})",
                    line)
    raise error(source, f"{label}: {_explain(problem)}", document.line_of(path))


def _refuse_odd_keys(document: Document, source: str, error: type[InputError],
                     describe: Any) -> None:
    """Every key in gitscale's files is a name, but YAML reads ``~:`` as null, ``true:`` (or
    ``on:``, ``yes:``) as a boolean and ``123:`` as a number: said at the key's own line, not
    as a schema error about ``None`` (or a crash sorting a name beside it)."""
    found = document.odd_key()
    if found is None:
        return
    path, read, line = found
    label = describe(path) if describe and path else format_path(path)
    raise error(source, f"{label}: a key YAML reads as {read[:60]}, not as a name: quote it "
                        "if it is meant as one, or remove it", line)


def _refuse_floats(document: Document, source: str, error: type[InputError],
                   describe: Any) -> None:
    """JSON Schema counts 2.0 as an integer; gitscale's files have no fractional numbers but
    ``forecast.quantile`` (``FRACTIONS``), and a float that got this far crashed the manifest
    edit (``replicas: 2.0``). Nor does it refuse YAML's ``.nan`` where a number is bounded
    (NaN is neither above a minimum nor below a maximum): no file holds a number that is not
    finite, a fraction neither."""
    found = _first_float(document.data, [])
    if found is None:
        return
    path, value = found
    label = describe(path) if describe else format_path(path)
    if tuple(path[-2:]) in FRACTIONS:  # not finite
        raise error(source, f"{label}: {value!r} is not a number (write one such as 0.9)",
                    document.line_of(path))
    hint = f" (write {int(value)})" if math.isfinite(value) and value.is_integer() else ""
    raise error(source, f"{label}: {value!r} is not an integer{hint}", document.line_of(path))


def _first_float(data: Any, path: list[Any]) -> tuple[list[Any], float] | None:
    stack: list[tuple[Any, list[Any]]] = [(data, path)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, float) and (tuple(at[-2:]) not in FRACTIONS
                                         or not math.isfinite(value)):
            return at, value
        if isinstance(value, dict):
            stack.extend((v, [*at, k]) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((v, [*at, i]) for i, v in reversed(list(enumerate(value))))
    return None


def _in_secret_ref(problem: Any) -> bool:
    """Did ``problem`` fail in a credential's ``{env: NAME}`` or ``{file: PATH}`` (or in its
    name or path)? Its value may then be a token written inline, never to be echoed."""
    from gitscale.config.secrets import SECRET_REF

    return any(problem.schema is schema for schema in (SECRET_REF,
                                                       *SECRET_REF["properties"].values()))


def _policy_branch(problem: Any) -> Any:
    """A policy that is neither: the problem of the branch its type chose (a name's, or a
    mapping's, at its own key and line), not "not valid under any of the given schemas"."""
    import jsonschema

    if problem is None or problem.schema is not POLICY_CHOICE or not problem.context:
        return problem
    if not isinstance(problem.instance, (str, dict)):
        return problem  # (``_explain`` says what a policy is)
    branch = 0 if isinstance(problem.instance, str) else 1
    errors = [e for e in problem.context if list(e.relative_schema_path)[:1] == [branch]]
    return jsonschema.exceptions.best_match(errors) or problem


def _explain(problem: Any) -> str:
    value = shown(problem.instance)
    if problem.schema is POLICY_CHOICE["oneOf"][0] and problem.validator == "pattern":
        return (f"{value} is not a preset's name (letters, digits, '_', '.' and "
                "'-': policies/NAME.yaml's NAME, or a shipped preset such as default)")
    if problem.schema is POLICY_CHOICE:
        return (f"{value} is not a policy: write a preset's name (such as default "
                "or warm, or policies/NAME.yaml's NAME) or a mapping such as "
                "{maxReplicas: 10, buffer: 1}")
    if problem.validator == "required":
        return str(problem.message).replace("is a required property", "is required")
    if problem.validator == "type":
        if isinstance(problem.instance, (date, time)) and "string" in problem.validator_value:
            # YAML reads an unquoted 2026-01-05T09:00:00Z as a timestamp, not as text
            return (f"{problem.instance.isoformat()} is a YAML timestamp here, not text: "
                    f"quote it ('{problem.instance.isoformat()}')")
        return f"{shown_as_yaml(problem.instance)} is not of type {problem.validator_value}"
    if problem.validator == "pattern" and problem.schema is API_URL:
        return (f"{value} is not an API's base URL: https://HOST or https://HOST/PATH, "
                "without credentials, query or fragment (a token goes in {env: NAME} or "
                "{file: PATH})")
    if problem.validator == "pattern" and problem.schema is CLUSTER_UUID:
        return (f"{value} is not a cluster's UUID: the Cluster ID that Buildkite shows on the "
                "cluster's Settings page (Agents > the cluster > Settings), such as "
                "0190c3a5-6a6e-7c4f-9e3b-5d2c8a1f4b7e; for an unclustered queue, leave cluster out")
    if problem.validator == "pattern" and problem.schema is NOTIFY_URL:
        return (f"{value} is not an http(s) URL without credentials (a secret goes in "
                "{env: NAME} or {file: PATH})")
    message = str(problem.message)
    whole = repr(problem.instance)
    return message.replace(whole, value) if len(whole) > len(value) else message
