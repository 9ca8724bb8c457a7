"""The RunnerSet's status: counts from the decision and conditions from the pass.

Conditions: ``Ready`` (the last pass did everything it decided, or why not: ``InvalidSpec``,
``PlatformUnavailable``, ``CreateFailed``…) and ``RunnersFailing`` (runners failing in a row).
A condition keeps its ``lastTransitionTime`` while its status stays the same, and the status is
written only when something in it changed.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gitscale.controller.decide import Status
from gitscale.timeutil import format_time


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str


def ready(message: str = "runners reconciled") -> Condition:
    return Condition("Ready", True, "Reconciled", message)


def not_ready(reason: str, message: str) -> Condition:
    return Condition("Ready", False, reason, message[:1000])


def failing(runners: tuple[tuple[str, int], ...]) -> Condition:
    if not runners:
        return Condition("RunnersFailing", False, "NoRepeatedFailures", "")
    named = ", ".join(f"{name} ({n} in a row)" for name, n in runners[:5])
    return Condition("RunnersFailing", True, "RepeatedFailures",
                     f"runners keep failing and are replaced with backoff: {named}")


def build(current: Mapping[str, Any] | None, counts: Status | None,
          conditions: list[Condition], now: datetime) -> dict[str, Any]:
    """The new status; counts None keeps the current ones (a pass that could not count)."""
    current = dict(current or {})
    status: dict[str, Any] = {k: current[k] for k in
                              ("replicas", "pending", "idle", "busy", "failed", "observedPatchID")
                              if k in current}
    if counts is not None:
        status.update(replicas=counts.replicas, pending=counts.pending, idle=counts.idle,
                      busy=counts.busy, failed=counts.failed,
                      observedPatchID=counts.observed_patch_id)
    previous = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, dict)}
    out = []
    for cond in conditions:
        value = "True" if cond.status else "False"
        old = previous.get(cond.type) or {}
        since = old.get("lastTransitionTime") if old.get("status") == value else None
        entry = {"type": cond.type, "status": value, "reason": cond.reason,
                 "lastTransitionTime": since or format_time(now)}
        if cond.message:
            entry["message"] = cond.message
        out.append(entry)
    status["conditions"] = out
    return status


def changed(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    return dict(current or {}) != dict(new)
