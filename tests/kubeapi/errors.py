"""Errors as the real API server words them: a ``Status`` body, an HTTP code and a reason.

The kubernetes client turns a non-2xx answer into ``ApiException(status=code)`` whose ``body``
is this JSON, so a controller under test sees the same codes and reasons it would in a cluster.
"""
from __future__ import annotations

from typing import Any

from tests.kubeapi.resources import ResourceType


class APIError(Exception):
    def __init__(self, code: int, reason: str, message: str, *,
                 details: dict[str, Any] | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        # seconds: sent as the ``Retry-After`` header and the Status's
        # ``details.retryAfterSeconds``, as API Priority and Fairness answers a 429
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": self.message,
                                "reason": self.reason, "code": self.code}
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> APIError:
    return APIError(404, "NotFound", f'{rt.key} "{name}" not found', details=_details(rt, name))


def already_exists(rt: ResourceType, name: str) -> APIError:
    return APIError(409, "AlreadyExists", f'{rt.key} "{name}" already exists',
                    details=_details(rt, name))


def conflict(rt: ResourceType, name: str, why: str = "the object has been modified; please "
             "apply your changes to the latest version and try again") -> APIError:
    return APIError(409, "Conflict", f'Operation cannot be fulfilled on {rt.key} "{name}": {why}',
                    details=_details(rt, name))


def invalid(rt: ResourceType, name: str, cause: str) -> APIError:
    return APIError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {cause}',
                    details=_details(rt, name))


def quota_exceeded(rt: ResourceType, name: str, quota: str, used: int, hard: int) -> APIError:
    """A ResourceQuota's admission refusing one more object, as its plugin words it."""
    return APIError(403, "Forbidden", f'{rt.plural} "{name}" is forbidden: exceeded quota: '
                    f"{quota}, requested: {rt.plural}=1, used: {rt.plural}={used}, limited: "
                    f"{rt.plural}={hard}", details=_details(rt, name))


def webhook_denied(webhook: str, message: str, code: int = 400, reason: str = "") -> APIError:
    """A validating admission webhook's denial as the API server answers it: the webhook's
    own code (400 when it gives none) and reason (often none), its message prefixed
    (``webhookerrors.ToStatusErr``)."""
    return APIError(max(code, 400), reason,
                    f'admission webhook "{webhook}" denied the request: {message}')


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def expired(message: str) -> APIError:
    return APIError(410, "Expired", message)


def unsupported_media_type(content_type: str) -> APIError:
    return APIError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - {content_type!r} is not "
                    "accepted for this resource")


def no_route() -> APIError:
    return APIError(404, "NotFound", "the server could not find the requested resource")


def method_not_allowed(method: str) -> APIError:
    return APIError(405, "MethodNotAllowed",
                    f"the server does not allow this method on the requested resource ({method})")
