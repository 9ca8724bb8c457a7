"""Why a set the pass leaves alone is where it is: a short note for `plan`'s text line.

A plain unchanged set (demand met, nothing held) gets no note, so its line stays short; a set
held, drained, paused, capped or at its max with jobs waiting beyond it says so, since that
is what an operator asks of a set that "should" have moved. Pure: the decision and the demand
the pass read in, a string out.
"""
from __future__ import annotations

import re

from gitscale.core.model import Decision, Demand, Reason

# decide()'s wording (gitscale.core.decide.Target.why); tests/commands/test_plan.py holds the
# notes to it, so a change of wording there fails a test rather than silently losing a note.
_HELD = re.compile(r"scale-down held until (\S+?)(?:\+00:00)? \(scaleDownDelay\)")
_LIMITS = re.compile(r"capped at (\d+) by limits\.maxTotalReplicas")
_MAX = re.compile(r"capped at max (\d+)")


def unchanged_note(decision: Decision, demand: Demand | None) -> str | None:
    """A few words on why ``decision`` (which writes nothing) leaves the set where it is, or
    None when there is nothing worth saying (demand is met)."""
    detail, reason = decision.detail, decision.reason
    waiting = _waiting(decision, demand)
    if reason is Reason.PAUSED:
        return "annotation gitscale.dev/paused: \"true\"" + waiting
    if reason is Reason.DEMAND_UNKNOWN:
        return "demand could not be read: left as it is"
    if detail in ("drained", "already drained"):
        return "drained: held at 0 until `gitscale drain --resume`" + waiting
    if detail == "not drained":
        return "not drained: nothing to resume"
    held = _HELD.search(detail)
    if held:
        return f"scale-down held until {held.group(1).replace('T', ' ')} UTC (scaleDownDelay)"
    capped = _LIMITS.search(detail)
    if capped and waiting:
        return f"capped at {capped.group(1)} by limits.maxTotalReplicas" + waiting
    at_max = _MAX.search(detail)
    if at_max and waiting:
        return f"at max {at_max.group(1)}" + waiting
    return None


def _waiting(decision: Decision, demand: Demand | None) -> str:
    """"; demand N (queued, running)" when the demand read asks for more runners than the set
    has, else nothing."""
    if demand is None or demand.assigned <= decision.replicas:
        return ""
    return f"; demand {demand.assigned} ({demand.queued} queued, {demand.running} running)"
