"""What the Kubernetes API answered, as ours: a raw response's JSON, a list's page (its items
given the kind and apiVersion a list leaves out), a watch stream's event, and the client's
exceptions (``ApiException``, a pydantic validation error, no answer, an answer too slow) as
``KubeError`` subclasses (``NotFound``, ``Conflict``, ``Invalid``, ``Gone``), the API server's
words masked. ``kube.py`` calls the client through ``answer`` (a watch: ``call``), which reads
the whole answer within its deadline (``kube_deadline.py``), and reads every answer here.
"""
from __future__ import annotations

import http.client
import json
import re
from typing import Any, Callable, TypeVar

import pydantic
import urllib3
from kubernetes.client.exceptions import ApiException

from gitscale.controller.errors import Conflict, Gone, Invalid, KubeError, NotFound
from gitscale.controller.kube_deadline import Overdue
from gitscale.controller.observe import RawObject
from gitscale.redact import redact

T = TypeVar("T")
WatchEvent = tuple[str, RawObject]  # (ADDED|MODIFIED|DELETED|BOOKMARK, object)


def event_of(what: str, line: bytes) -> WatchEvent:
    try:
        event = json.loads(line)
        kind, obj = event["type"], event["object"]
    except (ValueError, KeyError, TypeError):
        raise KubeError(f"{what}: the stream sent something that is not a watch event") from None
    if kind == "ERROR":
        code = int(obj.get("code", 0))
        cls = Gone if code == 410 else KubeError
        raise cls(f"{what}: {obj.get('message', 'error')}", code, str(obj.get("reason", "")))
    return kind, obj


def answer(what: str, fn: Callable[[], Any]) -> Any:
    """``fn``'s raw response (``_preload_content=False``) read whole, by its deadline, and
    parsed: its JSON. An answer that does not come whole in time is an error like no answer."""
    return call(what, lambda: json_of(fn(), what))


def call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as exc:
        raise _translate(what, exc) from None
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}"
                             for e in exc.errors()[:5])
        raise Invalid(f"{what}: the object is not valid: {problems}", 422, "Invalid") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        late = overdue(exc)
        if late is not None:  # (no traceback: its cause is the deadline, not a bug)
            raise KubeError(f"{what}: the API server answered too slowly ({late})") from None
        # (urllib3's NewConnectionError and NameResolutionError are ConnectTimeoutErrors)
        raise KubeError(f"{what}: the API server did not answer ({_no_answer(exc)})",
                        unreachable=isinstance(exc, urllib3.exceptions.ConnectTimeoutError)
                        ) from None


def overdue(exc: BaseException) -> Overdue | None:
    """The deadline ``exc`` stands for, if it is an answer that did not come in time (urllib3
    raises ``ReadTimeoutError`` from ``kube_deadline.Overdue``)."""
    seen: BaseException | None = exc
    for _ in range(5):  # (a cause chain is short; never loop on a cycle)
        if seen is None or isinstance(seen, Overdue):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _no_answer(exc: BaseException) -> str:
    """Why no answer came, in a few words: the error's type and the system's word for its
    cause (``NewConnectionError: Connection refused``, ``ProtocolError: Remote end closed
    connection without response``), or that it timed out. (The client tries each call once,
    ``kube_config.Once``: the cause itself is raised, not a retry count.)"""
    seen: BaseException | None = exc
    for _ in range(5):  # (a cause chain is short; never loop on a cycle)
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.strerror:
            return f"{type(exc).__name__}: {seen.strerror}"
        if isinstance(seen, http.client.HTTPException) and str(seen):
            return f"{type(exc).__name__}: {seen}"
        inner = seen.args[1] if isinstance(seen, urllib3.exceptions.ProtocolError) and len(
            seen.args) > 1 else None  # ('Connection aborted.', RemoteDisconnected(…))
        seen = inner if isinstance(inner, BaseException) else seen.__cause__ or seen.__context__
    if isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)):
        return f"{type(exc).__name__}: timed out"
    return type(exc).__name__


def _translate(what: str, exc: ApiException) -> KubeError:
    status = int(exc.status or 0)
    if status == 0:  # the client's word for no answer it could read: a TLS failure
        return KubeError(redact(f"{what}: the API server did not answer ({_no_status(exc)})"))
    reason, message, details = str(exc.reason or ""), "", None
    try:
        body = json.loads(exc.body or "{}")
        reason, message = str(body.get("reason") or reason), str(body.get("message") or "")
        details = body.get("details") or {}
    except (ValueError, TypeError, AttributeError):
        pass
    # The API server's words may echo a credential (an admission webhook's URL with user info):
    # masked here, so no status, log or Event built from the error shows it.
    text = redact(f"{what}: {status} {reason}" + (f": {message}" if message else "")
                  + _what_to_fix(status, message))
    cls = {404: NotFound, 409: Conflict, 410: Gone, 422: Invalid}.get(status, KubeError)
    return cls(text, status, reason, retry_after=_retry_after(exc.headers, details))


def _retry_after(headers: Any, details: Any) -> float | None:
    """The seconds an answer asks to be given: its ``Retry-After`` header (the API server
    sends seconds), else its Status's ``details.retryAfterSeconds``; None when it says
    neither (or nonsense)."""
    said = headers.get("Retry-After") if headers is not None else None
    if said is None and isinstance(details, dict):
        said = details.get("retryAfterSeconds")
    try:
        seconds = float(said) if said is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


def _no_status(exc: ApiException) -> str:
    """The client raises ``ApiException(status=0, reason="SSLError\\n[SSL: …] …")`` when TLS
    fails: one line, and for an untrusted certificate, where trust comes from."""
    said = " ".join(str(exc.reason or "no answer").split())
    if "CERTIFICATE_VERIFY_FAILED" in said:
        said += ("; the API server's certificate is not trusted: the CA comes from the "
                 "kubeconfig's certificate-authority(-data), or in a pod from the "
                 "ServiceAccount's ca.crt (/var/run/secrets/kubernetes.io/serviceaccount)")
    return said


# RBAC's refusal, as the API server words it (``authorizer.go``'s ``forbiddenMessage``)
RBAC_REFUSAL = re.compile(r'cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)" in API group '
                          r'"(?P<group>[^"]*)"(?: in the namespace "(?P<namespace>[^"]+)")?')


def _what_to_fix(status: int, message: str) -> str:
    """What a refusal of the controller's identity asks for: the RBAC rule a 403 names, to add
    to the Role (or, at the cluster scope, the ClusterRole); for a 401, its credentials. Not a
    403 of admission (a quota, a webhook): no rule would fix those."""
    if status == 401:
        return (" (the API server rejected the controller's credentials: its ServiceAccount "
                "token, or the kubeconfig's user; check the Deployment's serviceAccountName "
                "and that the token is mounted, or --kubeconfig)")
    found = RBAC_REFUSAL.search(message) if status == 403 else None
    if found is None:
        return ""
    rule = (f'{{apiGroups: ["{found["group"]}"], resources: ["{found["resource"]}"], '
            f'verbs: ["{found["verb"]}"]}}')
    where = (f'the controller\'s Role in namespace "{found["namespace"]}"'
             if found["namespace"] else "the controller's ClusterRole (without --namespace it "
             "watches every namespace)")
    return (f" (RBAC: add the rule {rule} to {where}; `gitscale init` writes it in "
            "gitscale-system/rbac.yaml)")


def json_of(response: Any, what: str) -> Any:
    """The JSON of a raw response, read whole (urllib3's errors, a timeout, pass through)."""
    try:
        return json.loads(response.data or b"{}")
    except ValueError:
        raise KubeError(f"{what}: the API server answered something that is not JSON") \
            from None


def page_of(body: Any, kind: str, api_version: str) -> tuple[list[RawObject], dict[str, Any]]:
    """A list's answer (its JSON): its items, and its metadata (version, continue token)."""
    items: list[RawObject] = body.get("items") or []
    for item in items:  # list items carry neither kind nor apiVersion
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
    return items, body.get("metadata") or {}

