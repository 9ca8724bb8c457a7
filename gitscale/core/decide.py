"""decide(): one set, one pass. Pure: no I/O, the clock passed in.

PRODUCT §3: target = clamp(queued + running + buffer, min, max), with scheduled overrides,
a scale-down delay and step limits, then the patch-ID rules of actions-runner-controller's
listener adapted to git (the sequence lives in the manifest, so restarts cannot collide).
"""
from __future__ import annotations

from datetime import datetime

from gitscale.core.model import Current, Decision, Demand, Reason, next_patch_id
from gitscale.core.policy import Policy


def target_replicas(current: int, demand: Demand, policy: Policy, now: datetime,
                    last_scale_up: datetime | None) -> tuple[int, str]:
    """The replica count this pass aims for, and a one-line explanation of how it was reached."""
    lo, hi, window = policy.bounds(now)
    wanted = demand.assigned + policy.buffer
    target = min(max(wanted, lo), hi)
    why = f"demand {demand.assigned} (queued {demand.queued}, running {demand.running})"
    if policy.buffer:
        why += f" + buffer {policy.buffer}"
    if wanted > hi:
        why += f", capped at max {hi}"
    elif wanted < lo:
        why += f", raised to min {lo}"
    if window:
        why += f" (schedule {window!r})"

    if target < current:
        held_until = last_scale_up + policy.scale_down_delay if last_scale_up else None
        if held_until is not None and now < held_until:
            # The delay never holds a set above its (possibly scheduled) max.
            target = min(current, hi)
            why += f"; scale-down held until {held_until.isoformat()} (scaleDownDelay)"
        elif policy.max_step_down is not None and current - target > policy.max_step_down:
            target = max(current - policy.max_step_down, lo)
            why += f"; step limited to -{policy.max_step_down}"
    elif target > current and policy.max_step_up is not None:
        if target - current > policy.max_step_up:
            target = min(current + policy.max_step_up, hi)
            why += f"; step limited to +{policy.max_step_up}"
    # Bounds are hard; delays and step limits only act inside them.
    return min(max(target, lo), hi), why


def decide(current: Current, demand: Demand | None, policy: Policy, now: datetime) -> Decision:
    """What to write for one set this pass (``write`` False: leave it alone)."""
    have = current.replicas
    if current.drained:
        if have != 0 or current.patch_id != 0:
            return Decision(True, 0, 0, Reason.DRAIN, "drained: held at 0 until resumed")
        return Decision(False, 0, 0, Reason.UNCHANGED, "drained")
    if demand is None:
        return Decision(False, have or 0, current.patch_id, Reason.DEMAND_UNKNOWN,
                        "demand unknown: left untouched (never scaled down on a guess)")

    target, why = target_replicas(have or 0, demand, policy, now, current.last_scale_up)
    scaled_up = have is not None and target > have

    if current.patch_id is None or have is None:
        return Decision(True, target, 0, Reason.FIRST_WRITE,
                        f"{why}; first write forces the state (patch 0)", scaled_up=scaled_up)
    if target != have:
        reason = Reason.SCALE_UP if target > have else Reason.SCALE_DOWN
        return Decision(True, target, next_patch_id(current.patch_id), reason, why,
                        scaled_up=scaled_up)
    dirty = current.fingerprint is not None and current.fingerprint != demand.fingerprint
    if dirty:
        return Decision(True, target, next_patch_id(current.patch_id), Reason.REAFFIRM,
                        f"{why}; jobs started or completed: re-affirm so finished slots refill")
    lo, _, _ = policy.bounds(now)
    if target == lo and current.patch_id != 0:
        return Decision(True, target, 0, Reason.QUIET_RESET,
                        f"{why}; quiet at min: patch 0 lets the controller self-correct")
    return Decision(False, target, current.patch_id, Reason.UNCHANGED, why)


def drain_decision(current: Current) -> Decision:
    return Decision(True, 0, 0, Reason.DRAIN, "drained by hand: replicas 0, patch 0")
