"""The controller's errors: what the Kubernetes and CI APIs said, as our types.

``kube_answers.py`` (for ``kube.py``), ``github.py`` and ``buildkite.py`` translate their
client's exceptions into these at the boundary, so the loop branches on a class (``NotFound``, ``Conflict``, ``RunnerBusy``…)
and never on a status code. Messages name the object or URL, never a credential.
"""
from __future__ import annotations

from gitscale.errors import GitscaleError


class ControllerError(GitscaleError):
    """Anything the controller could not do to an object; the pass records it and moves on."""


class InvalidRunnerSet(ControllerError):
    """A RunnerSet the controller cannot act on (no template, negative replicas, …)."""


class UnsupportedPlatform(InvalidRunnerSet):
    """``spec.platform`` names no platform of the registry (``platforms.py``)."""


class KubeError(ControllerError):
    """The Kubernetes API refused or failed. ``status`` is the HTTP code (0: no answer).
    ``unreachable``: not even a connection could be made (refused, its name not resolved, its
    connect timed out): the API server is down or away, for every call, not for this one.
    ``retry_after``: the seconds the API server asked to be given (its ``Retry-After``: a 429
    of API Priority and Fairness, some 5xx), if it said."""

    def __init__(self, message: str, status: int = 0, reason: str = "", *,
                 unreachable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.unreachable = unreachable
        self.retry_after = retry_after


class NotFound(KubeError):
    """404: the object is gone (often fine: someone else deleted it first)."""


class Conflict(KubeError):
    """409: a stale resourceVersion, or a name already taken (``reason`` AlreadyExists)."""


class Invalid(KubeError):
    """422: the object was rejected by validation."""


class Gone(KubeError):
    """410: a watch resumed from a version the server no longer has: list again."""


class PlatformError(ControllerError):
    """GitHub or Buildkite refused or failed; the message names the URL, never a token."""


class PlatformOutage(PlatformError):
    """GitHub or Buildkite failed rather than refused: a 5xx, no answer, a rate limit
    (``PlatformUnavailable`` in Ready)."""


class RunnerBusy(PlatformError):
    """GitHub answered 422 to an unregister: the runner is still running a job."""


class RunnerNameTaken(PlatformError):
    """GitHub answered 409 to generate-jitconfig: a runner with that name already exists."""


class CredentialsError(PlatformError):
    """The credentials were refused: the platform answered 401/403, or a credential the
    Secret holds could not be sent (``CredentialsRefused`` in Ready). ``call``: the kind of
    call refused when the refusal is of a permission (a 403 on one kind of call: the others
    may work), None when it is of the credential itself (a 401, a token exchange refused)."""

    def __init__(self, message: str, call: str | None = None) -> None:
        super().__init__(message)
        self.call = call


class CredentialsMissing(CredentialsError):
    """The credentials Secret, or a key it needs, does not exist (or cannot be decoded): a
    configuration to fix (``CredentialsMissing`` in Ready). Names the Secret and key."""


class Interrupted(ControllerError):
    """The controller is stopping (or lost its leadership): the runner was left alone, for the
    next pass (or the next leader)."""
