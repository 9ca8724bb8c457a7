"""Why a set the pass leaves alone is where it is: a short note for `plan`'s text line.

A plain unchanged set (demand met, nothing held) gets no note, so its line stays short; a set
held, drained, paused, capped or at its max with jobs waiting beyond it says so, since that
is what an operator asks of a set that "should" have moved. Pure: the decision (its reason and
``why``, the facts ``decide`` set as values; never its ``detail`` text) and the demand the pass
read in, a string out.
"""
from __future__ import annotations

from datetime import datetime, timezone

from gitscale.core.model import NO_WHY, CapBy, Decision, Demand, Drain, Reason


def unchanged_note(decision: Decision, demand: Demand | None) -> str | None:
    """A few words on why ``decision`` (which writes nothing) leaves the set where it is, or
    None when there is nothing worth saying (demand is met); and when jobs that wait with
    runners counted for them are re-affirmed for if they still wait."""
    note = _held(decision, demand)
    again = decision.why.reaffirm_at
    if again is None:
        return note
    said = f"jobs wait with runners counted for them: re-affirm at {_utc(again)} UTC if " \
           "they still wait"
    return f"{note}; {said}" if note else said


def _held(decision: Decision, demand: Demand | None) -> str | None:
    why, reason = decision.why, decision.reason
    if why is NO_WHY and reason is Reason.UNCHANGED:
        return None  # nearly every set of a pass: nothing held, capped or drained it
    if reason is Reason.PAUSED:
        return "annotation gitscale.dev/paused: \"true\"" + _waiting(decision, demand)
    if reason is Reason.DEMAND_UNKNOWN:
        return "demand could not be read: left as it is"
    if why.drain is Drain.DRAINED:
        return "drained: held at 0 until `gitscale drain --resume`" + _waiting(decision, demand)
    if why.drain is Drain.NOT_DRAINED:
        return "not drained: nothing to resume"
    if why.held_until is not None:
        return f"scale-down held until {_utc(why.held_until)} UTC (scaleDownDelay)"
    if why.cap is not None:
        waiting = _waiting(decision, demand)
        if not waiting:
            return None
        if why.cap.by is CapBy.MAX_TOTAL_REPLICAS:
            return f"capped at {why.cap.at} by limits.maxTotalReplicas" + waiting
        return f"at max {why.cap.at}" + waiting
    return None


def _utc(when: datetime) -> str:
    """``2026-11-21 09:10:00``: the time in UTC (a time without an offset is taken as UTC)."""
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when.isoformat(sep=" ")


def _waiting(decision: Decision, demand: Demand | None) -> str:
    """"; demand N (queued, running)" when the demand read asks for more runners than the set
    has, else nothing."""
    if demand is None or demand.assigned <= decision.replicas:
        return ""
    return f"; demand {demand.assigned} ({demand.queued} queued, {demand.running} running)"
