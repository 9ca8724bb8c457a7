"""What a CI platform is to the controller: the shape of one entry of the registry
(``platforms.py``) and of the adapter it makes per RunnerSet. Pure: types only.

A platform is everything the controller does differently for it: the settings under
``spec.<name>`` (their CRD schema and their parsing), the pod and runner-container defaults its
runners need (GitHub: the runner image's start command, which the image itself lacks), how a
running pod is told idle from busy, what the ``BusyKnown`` condition says, and an adapter with
four verbs — ``env`` (what the runner container needs), ``register`` (GitHub: a JIT config;
Buildkite: none), ``unregister`` (GitHub: DELETE the runner; ``RunnerBusy`` on 422) and
``registered`` (idle and busy as the platform sees them, read at most ``max_age`` seconds ago —
a ``Listed`` says how long ago exactly —; None when it cannot say).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from gitscale.controller.decide import Phase
from gitscale.controller.errors import PlatformError
from gitscale.controller.status import Condition

# Seconds a platform's runner list is reused by the passes of every set that shares it (one
# credentials Secret and configURL): LIST_MAX_AGE for a pass that may remove a running runner
# (a scale-down choosing idle ones, a set being deleted, a runner that may have timed out);
# STATUS_LIST_MAX_AGE for the others (their status counts, the leftover sweep). A list read
# earlier is safe for a removal on GitHub: a runner that took a job since is refused (422) and
# kept. A platform with no such guard reads its list again right before a pass removes a
# running runner (``Kind.fresh_before_removal``).
LIST_MAX_AGE = 15.0
STATUS_LIST_MAX_AGE = 4 * LIST_MAX_AGE


@dataclass(frozen=True)
class Registered:
    """What the platform says about a registered runner (GitHub's list, Buildkite's agents)."""

    online: bool
    busy: bool
    name: str = ""
    labels: tuple[str, ...] = ()


class Listed(Mapping[Any, Registered]):
    """The platform's runners as a list read ``age`` seconds before it was handed over (lists
    are reused across passes): a runner that came online since is not online in it, so its
    absence says nothing of the time after it was read (the registration timeout is judged at
    the list's time, ``observe.runner_of``). A plain mapping counts as read just now."""

    def __init__(self, runners: Mapping[Any, Registered], age: float = 0.0) -> None:
        self._runners = runners
        self.age = age

    def __getitem__(self, key: Any) -> Registered:
        return self._runners[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._runners)

    def __len__(self) -> int:
        return len(self._runners)


@dataclass(frozen=True)
class Registration:
    """A runner registered before its pod exists: its id, and the config the pod starts with
    (kept in a Secret owned by the pod)."""

    runner_id: int
    jit_config: str = field(repr=False)


class Adapter(Protocol):
    """One RunnerSet's platform: the four verbs, and where idle and busy come from."""

    def env(self, name: str) -> list[dict[str, Any]]: ...

    def register(self, name: str) -> Registration | None: ...

    def unregister(self, runner_id: int) -> None: ...

    def registered(self, max_age: float) -> Mapping[Any, Registered] | None: ...

    def busy_source(self) -> tuple[bool, str | None]:
        """(is the platform set up to say who is busy, why it cannot this time)"""
        ...


class Unavailable:
    """The adapter of a set being deleted whose platform cannot be reached at all (its
    credentials gone with it, and no client left from before): nothing can be registered or
    unregistered, and no one says which runner is busy."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def env(self, name: str) -> list[dict[str, Any]]:
        raise PlatformError(self.reason)

    def register(self, name: str) -> Registration | None:
        raise PlatformError(self.reason)

    def unregister(self, runner_id: int) -> None:
        raise PlatformError(self.reason)

    def registered(self, max_age: float) -> Mapping[Any, Registered] | None:
        raise PlatformError(self.reason)

    def busy_source(self) -> tuple[bool, str | None]:
        return True, self.reason


class Client(Protocol):
    def close(self) -> None: ...


@runtime_checkable
class Successor(Protocol):
    """A client that takes over what the one it replaces (its credentials read again, every
    ``platforms.CREDENTIALS_MAX_AGE``) kept: a runner list and its age, ETags, the rate limit
    as last stated."""

    def take_over(self, old: object) -> None: ...


SecretReader = Callable[[str, str], Mapping[str, str]]


class Clients(Protocol):
    """API clients kept across passes (``platforms.Platforms``), for an adapter to reuse;
    ``clock``: monotonic seconds, for the age of what they keep (a runner list)."""

    clock: Callable[[], float]

    def read_secret(self, namespace: str, name: str) -> Mapping[str, str]: ...

    def cached(self, key: tuple[str, ...], make: Callable[[], Client]) -> Client:
        """The client under ``key`` — ``(platform, namespace, Secret name, …)`` — made by
        ``make`` when missing or older than the credentials' time to live."""
        ...


RunningRule = Callable[[str, Mapping[str, Any], "int | None", "Mapping[Any, Registered] | None"],
                       Phase]


@dataclass(frozen=True)
class Kind:
    """One platform: an entry of the registry. ``settings`` objects are the platform's own."""

    name: str  # the value of spec.platform; its settings are under spec.<name>
    schema: dict[str, Any]  # the CRD's schema of spec.<name>
    # spec.<name> (None when absent) and the set's name → the platform's settings, or
    # InvalidRunnerSet naming the field
    settings: Callable[[Any, str], Any]
    # a running pod's phase: (pod name, pod annotations, runner id, the platform's list)
    running: RunningRule
    adapter: Callable[[Clients, str, Any], Adapter]  # (clients, namespace, settings)
    secrets: Callable[[Any], frozenset[str]]  # the Secrets its adapter reads (re-read on refusal)
    busy_known: Callable[[bool, "str | None"], Condition]  # (configured, why not heard)
    # Set in the pod spec, and in the runner container, where the template leaves them unset
    # (missing or null): what the platform's runners need to start and stop. Never over a
    # value the template gives.
    pod_defaults: Mapping[str, Any] = field(default_factory=dict)
    runner_defaults: Mapping[str, Any] = field(default_factory=dict)
    # The controller registers each runner (GitHub): without the platform's list no running
    # runner is known idle, so an unreadable list is an error of the pass; and registrations a
    # crash left without a pod are swept, found by these labels of the set.
    registration_labels: Callable[[Any], frozenset[str]] | None = None
    # The platform has no guard of its own against removing a runner that runs a job (GitHub
    # has one: its unregistration answers 422; deleting a Buildkite agent's pod stops it, busy
    # or not): a pass about to delete running runners' pods — to scale down, an outdated
    # runner's, one past its registration timeout — reads the list again first (once, unless
    # read this last second: ``registered.FRESH_MAX_AGE``), and keeps those it shows running a
    # job, and the timed-out ones it shows online (``registered.busy_now``).
    fresh_before_removal: bool = False
    # The settings that decide which jobs a runner takes (GitHub: scope, labels, runner group;
    # Buildkite: queue, tags), as strings: a runner made for others than the set has now is
    # outdated, and replaced unless busy (``decide``). Empty: never outdated.
    matching: Callable[[Any], tuple[str, ...]] = lambda settings: ()
    # spec.template (its containers checked already) → None, or InvalidRunnerSet naming what in
    # it would undo what the controller sets for the platform's runners
    check_template: Callable[[Mapping[str, Any]], None] = lambda template: None
    # (settings, namespace) → where to look when the set's runners keep failing (said in
    # RunnersFailing and its Event): what a platform's runner most often fails on at start
    failing_hint: Callable[[Any, str], str] = lambda settings, namespace: ""
