"""decide(): one set, one pass. Pure: no I/O, the clock passed in.

The target is clamp(queued + running + buffer, min, max), with scheduled overrides, a scale-down
delay and step limits. Then the patch-ID rules of actions-runner-controller's listener, adapted
to git (the sequence lives in the manifest, so restarts cannot collide) and to what the
controller does with each write (README, "The controller"):

- a write with patch ID > 0 makes the controller create the runners missing up to ``replicas``
  (finished runners no longer hold their slots) and never removes a runner; a write with patch
  ID 0 may also remove idle surplus. So a write is only worth a commit when it changes the count
  the controller fills to, when jobs wait for runners the last write did not provide, or when
  patch 0 lets the controller remove idle runners nobody needs.
- Runners are ephemeral: one finishes with its job, and its slot is not refilled until the next
  write. A completed job therefore needs no commit of its own; a lower count is written when a
  scale-down is due (after the delay) or when waiting jobs need a write anyway.
- Under saturation (more jobs than ``replicas``) a RunnerSet's write also carries its backlog,
  the jobs its replicas could not cover (``gitscale.core.backlog``): the controller refills
  that many finished slots itself, so a write is needed only when new jobs wait beyond what
  the last one covered and its refills are used up, not once per completed job.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from gitscale.core.backlog import backlog_of, refills_left, uncovered
from gitscale.core.forecast import Forecast
from gitscale.core.model import Cap, CapBy, Current, Decision, Demand, Drain, Reason, Why, \
    next_patch_id
from gitscale.core.policy import Policy
from gitscale.core.still_waiting import reaffirm_due, reaffirm_interval, reaffirms_after, \
    span, still_waiting

FOREVER = datetime.max.replace(tzinfo=timezone.utc)
# A last scale-up stamped later than this ahead of the pass's clock was written by a host whose
# clock ran ahead (a VM with a bad clock, `reconcile --now` in the future): not a time to hold a
# scale-down from. Past a few minutes no NTP-synced pair of hosts disagrees.
CLOCK_SKEW_TOLERANCE = timedelta(minutes=5)
DRAINED = Why(drain=Drain.DRAINED)


def hold_from(last_scale_up: datetime | None, now: datetime, *,
              pinned_clock: bool = False) -> datetime | None:
    """The last scale-up the scale-down delay counts from at ``now``: ``None`` when there is
    none, or when it lies more than ``CLOCK_SKEW_TOLERANCE`` in the future of a clock that is
    the host's.

    A future stamp is ignored rather than read as "now": it says nothing of when demand last
    rose, and read as now it would hold every pass, until the real clock reaches it (years,
    for a 2030 stamp). Ignored, the set scales as one with no scale-up on record — at worst
    one scale-down the delay would have held, which the next demand undoes — and the next
    scale-up writes a stamp from this clock, which ends the skew.

    ``pinned_clock`` (`plan`/`reconcile --now`): ``now`` is the user's statement of the time,
    not a host clock that may be wrong — "what if 40 jobs queue at 9:00?" asked after a 9:30
    scale-up. A stamp ahead of it is held from, as the delay says."""
    if last_scale_up is None:
        return None
    if not pinned_clock and last_scale_up - now > CLOCK_SKEW_TOLERANCE:
        return None
    return last_scale_up


def skew_note(last_scale_up: datetime | None, now: datetime, *,
              pinned_clock: bool = False) -> str:
    """What a pass says of a last scale-up ``hold_from`` ignores ("" for any other)."""
    if last_scale_up is None or \
            hold_from(last_scale_up, now, pinned_clock=pinned_clock) is not None:
        return ""
    return f"clock skew: last scale-up {last_scale_up.isoformat()} (annotation " \
           f"gitscale.dev/last-scale-up) is in the future of this pass's clock " \
           f"{now.isoformat()} by more than {_minutes(CLOCK_SKEW_TOLERANCE)}: the " \
           "scale-down delay is not held on it"


def _minutes(span: timedelta) -> str:
    return f"{span.total_seconds() / 60:g} minutes"


@dataclass(frozen=True)
class Target:
    """The count this pass aims for: ``value`` (with the scale-down delay) and ``unheld``."""

    value: int
    unheld: int  # what value would be without the scale-down delay
    reasoning: str  # how ``unheld`` was reached
    held_until: datetime | None = None  # set while the delay holds a scale-down
    forecast: bool = False  # a forecast keeps runners ahead of demand in the count
    reactive: int = 0  # the count demand alone asks for (inside the bounds)
    capped: Cap | None = None  # the max or the global limit cut what was wanted
    asked: int = 0  # the count without the scale-down delay and the step-down limit
    cut: bool = False  # the global limit cut what the delay or the step-down limit kept

    @property
    def why(self) -> str:
        if self.held_until is None:
            return self.reasoning
        return f"{self.reasoning}; scale-down held until {self.held_until.isoformat()} " \
               "(scaleDownDelay)"

    @property
    def facts(self) -> Why:
        """What ``why`` says held or capped the count, as values."""
        return Why(held_until=self.held_until, cap=self.capped)

    @property
    def unheld_facts(self) -> Why:
        """What ``reasoning`` (no delay) says capped the count, as values."""
        return Why(cap=self.capped)


def target_replicas(current: int, demand: Demand, policy: Policy, now: datetime,
                    last_scale_up: datetime | None, cap: int | None = None,
                    forecast: Forecast | None = None, *, pinned_clock: bool = False) -> Target:
    """The replica count this pass aims for, and a one-line explanation of how it was reached.

    ``cap`` is the set's share of ``limits.maxTotalReplicas`` this pass, if the sets together
    want more than it. It is harder than the scale-down delay and the step-down limit: what
    they would keep above it is cut to it (``Target.cut``; ``decide`` then writes patch 0, so
    the controller removes the idle runners now). ``forecast`` (``policy.forecast``: what the
    set's history predicts, ``gitscale.core.forecast``) adds its cushion to demand: runners
    kept ready for the jobs the past weeks saw arrive next; the same bounds, schedules, cap
    and step limits then apply to the sum. ``pinned_clock``: ``now`` is `--now`
    (``hold_from``).
    """
    lo, hi, window = policy.bounds(now)
    top = hi if cap is None else min(hi, cap)  # the most the set may have this pass
    wanted = demand.assigned + policy.buffer
    why = f"demand {demand.assigned} (queued {demand.queued}, running {demand.running})"
    if policy.buffer:
        why += f" + buffer {policy.buffer}"
    reactive = min(max(wanted, lo), hi)
    ahead = False
    capped: Cap | None = None
    if forecast is not None:
        if forecast.extra:
            wanted, ahead = wanted + forecast.extra, True
            why = f"{why} + {forecast.detail}"
        else:
            why += f"; {forecast.detail}"
    if cap is not None and cap < min(max(wanted, lo), hi):
        lo = min(lo, cap)  # the global limit is harder than a set's minimum
        why += f", capped at {cap} by limits.maxTotalReplicas (shared in proportion to " \
               "demand, then to forecasts)"
        capped = Cap(CapBy.MAX_TOTAL_REPLICAS, cap)
    elif wanted > hi:
        why += f", capped at max {hi}"
        capped = Cap(CapBy.MAX_REPLICAS, hi)
    elif wanted < lo:
        why += f", raised to min {lo}"
    if window:
        why += f" (schedule {window!r})"
    target = min(max(wanted, lo), top)

    kept = ""  # what the global limit cut: "the step-down limit (-N) kept", "the ... delay held"
    if target < current and policy.max_step_down is not None:
        if current - target > policy.max_step_down:
            stepped = min(max(current - policy.max_step_down, lo), hi)
            if stepped > top:
                kept = f"the step-down limit (-{policy.max_step_down}) kept"
            else:
                why += f"; step limited to -{policy.max_step_down}"
            asked, target = target, min(stepped, top)
        else:
            asked = target
    elif target > current and policy.max_step_up is not None:
        if target - current > policy.max_step_up:
            target = min(max(current + policy.max_step_up, lo), top)
            why += f"; step limited to +{policy.max_step_up}"
        asked = target
    else:
        asked = target
    # Bounds are hard; delays and step limits only act inside them.
    unheld = target
    skew = skew_note(last_scale_up, now, pinned_clock=pinned_clock)
    if skew:
        why += f"; {skew}"
    last_up = hold_from(last_scale_up, now, pinned_clock=pinned_clock)
    held_until = last_up + policy.scale_down_delay if last_up else None
    value = unheld
    if unheld < current and held_until is not None and now < held_until:
        # The delay never holds a set above its (possibly scheduled) max, nor above its share
        # of the global limit.
        if min(current, hi) > top:
            kept, held_until = "the scale-down delay held", None
        value = min(current, top)
    if kept:
        why += "; below" if capped else f", capped at {top} by limits.maxTotalReplicas: below"
        why += f" what {kept}"
        capped = Cap(CapBy.MAX_TOTAL_REPLICAS, top)
        return Target(value, unheld, why, reactive=reactive, capped=capped, asked=asked,
                      cut=True)
    if value > unheld:
        return Target(value, unheld, why, held_until, reactive=reactive, capped=capped,
                      asked=asked)
    return Target(unheld, unheld, why, forecast=ahead, reactive=reactive, capped=capped,
                  asked=asked)


class Want(NamedTuple):
    """What one set asks of ``limits.maxTotalReplicas`` (``gitscale.core.limits``)."""

    minimum: int
    asked: int  # what demand asks inside the bounds: no scale-down delay, no step-down limit
    held: int  # what the delay and the step-down limit keep (>= asked): the count uncapped


def wanted(current: Current, demand: Demand, policy: Policy, now: datetime,
           forecast: Forecast | None = None, *, pinned_clock: bool = False) -> Want:
    """What this set would aim for without a global cap: what limits share out."""
    target = target_replicas(current.replicas or 0, demand, policy, now,
                             current.last_scale_up, forecast=forecast,
                             pinned_clock=pinned_clock)
    return Want(policy.bounds(now)[0], target.asked, target.value)


def decide(current: Current, demand: Demand | None, policy: Policy, now: datetime,
           cap: int | None = None, forecast: Forecast | None = None, *,
           pinned_clock: bool = False) -> Decision:
    """What to write for one set this pass (``write`` False: leave it alone).

    In order, the first that applies:

    1. never written by gitscale → the target with patch 0 (force the state);
    2. target above the current count → scale up, patch + 1;
    3. jobs wait (queued > 0) for runners the last write did not provide, and finished runners
       left slots to refill → write the target *without* the scale-down delay, patch + 1:
       the controller refills the slots of finished runners up to that count, and a count held
       above demand would refill slots no job needs. When the ids of the last write's jobs are
       not known (a cold state cache, a source without job ids), any change of the jobs counts.
       On a RunnerSet the last write's backlog counts among what it provided, and its refills
       among the slots: jobs wait beyond it, and its refills are used up (``_runners_needed``);
    4. target below the current count (the delay has run out) → scale down, patch + 1; a
       ``forecast`` set with nothing queued: patch 0, so the idle runners of a falling cushion
       go at once;
    4b. a RunnerSet's jobs still wait ``reaffirm_interval`` after its last write (10 minutes,
       doubled for each still-waiting re-affirm in a row for the same jobs, at most 2 hours),
       its count covering them → the same count, patch + 1, the count of re-affirms in a row
       written (``still_waiting``, ``Decision.reaffirms``);
    5. a RunnerSet's backlog covers more than waits now (no job beyond the count) → the target
       without the delay, backlog 0, patch + 1: the controller stops refilling;
    6. target = current, nothing waits, patch ≠ 0 and the delay has run out → patch 0, once:
       the controller may now remove idle runners beyond the count (buffer runners left over,
       runners whose job was cancelled);
    7. otherwise nothing: a completed job needs no commit (its runner is gone with it).

    Every write to a RunnerSet carries the backlog of what it writes: the jobs (queued +
    running) beyond its replicas.

    ``forecast`` (sets with ``policy.forecast``) can raise the target ahead of demand; a
    scale-up that demand alone would not have made has the reason ``forecast`` and does not
    start the scale-down delay (``last scale-up`` is the last one demand asked for).

    ``pinned_clock``: ``now`` is the user's (`--now`), not the host's: a last scale-up ahead of
    it is held from, not ignored as clock skew (``hold_from``).

    What ``detail`` says held or capped the count (the scale-down delay and until when, the
    max or the global limit and at what, a drain) the decision also carries as values, in
    ``why`` (``gitscale.core.model.Why``): readers take them from there, not from the text.
    """
    have = current.replicas
    if current.paused:
        return Decision(False, have or 0, current.patch_id, Reason.PAUSED,
                        "paused (annotation gitscale.dev/paused: \"true\"): left alone")
    if current.drained:
        if have != 0 or current.patch_id != 0:
            return Decision(True, 0, 0, Reason.DRAIN, "drained: held at 0 until resumed",
                            why=DRAINED)
        return Decision(False, 0, 0, Reason.UNCHANGED, "drained", why=DRAINED)
    if demand is None:
        return Decision(False, have or 0, current.patch_id, Reason.DEMAND_UNKNOWN,
                        "demand unknown: left untouched (never scaled down on a guess)")

    target = target_replicas(have or 0, demand, policy, now, current.last_scale_up, cap,
                             forecast, pinned_clock=pinned_clock)
    why = target.why

    def write(replicas: int, patch: int, reason: Reason, detail: str,
              scaled_up: bool = False, facts: Why = target.facts,
              reaffirms: int = 0) -> Decision:
        if target.cut and have is not None and replicas < have and patch != 0:
            # The global limit cut what the delay or the step-down limit kept: on patch > 0
            # the controller would keep the idle runners above the count, beyond the limit.
            patch, detail = 0, f"{detail}, patch 0 so idle runners go now"
        backlog = backlog_of(demand.assigned, replicas) if current.backlog is not None else 0
        if backlog:
            detail += f"; backlog {backlog}: the controller refills up to {backlog} finished " \
                      "slot(s) without a new write"
        return Decision(True, replicas, patch, reason, detail, scaled_up, backlog, facts,
                        reaffirms)

    if current.patch_id is None or have is None:
        # no replicas in the file is none running (a RunnerSet's default): a first write
        # above that is a scale-up, and starts the scale-down delay as any other
        return write(target.value, 0, Reason.FIRST_WRITE,
                     f"{why}; first write forces the state (patch 0)",
                     scaled_up=target.value > (have or 0))
    patch = next_patch_id(current.patch_id)
    if target.value > have:
        # A scale-up demand alone would not have made is the forecast's: it does not start the
        # scale-down delay (the forecast knows when its runners are no longer expected, and a
        # held cushion would keep them that long for nobody). A demand scale-up does.
        ahead = target.forecast and target.reactive <= have
        return write(target.value, patch, Reason.FORECAST if ahead else Reason.SCALE_UP,
                     why, scaled_up=not ahead)
    dirty = current.fingerprint is not None and current.fingerprint != demand.fingerprint
    if dirty and demand.queued > 0 and _runners_needed(current, demand, have):
        if target.unheld < have:
            return write(target.unheld, patch, Reason.SCALE_DOWN,
                         f"{target.reasoning}; jobs wait: written at demand, not held at "
                         f"{have}, so no idle runner is refilled", facts=target.unheld_facts)
        return write(have, patch, Reason.REAFFIRM,
                     f"{why}; jobs wait and others started or completed: re-affirm so "
                     "finished slots refill")
    if target.value < have:
        if policy.forecast is not None and demand.queued == 0:
            return write(target.value, 0, Reason.SCALE_DOWN,
                         f"{why}; nothing waits: patch 0 lets the controller remove the idle "
                         "runners above the count")
        return write(target.value, patch, Reason.SCALE_DOWN, why)
    if still_waiting(current, demand, have, now):
        waited = span(now - (current.written_at or now))
        count = reaffirms_after(current, demand)
        following = "" if count else " (the jobs changed since the last write)"
        return write(have, patch, Reason.REAFFIRM,
                     f"{why}; jobs still wait {waited} after the last write, with runners "
                     "counted for them: re-affirm so that slots held by runners that finished "
                     "as it was written refill; next re-affirm in "
                     f"{span(reaffirm_interval(count))} if they still wait"
                     + (following or f" ({count} in a row for these jobs)"),
                     reaffirms=count)
    if current.backlog and not backlog_of(demand.assigned, have):
        return write(target.unheld, patch,
                     Reason.SCALE_DOWN if target.unheld < have else Reason.REAFFIRM,
                     f"{target.reasoning}; no job waits beyond {have}: backlog "
                     f"{current.backlog} withdrawn, so no slot is refilled for nobody",
                     facts=target.unheld_facts)
    last_up = hold_from(current.last_scale_up, now, pinned_clock=pinned_clock)
    delayed = last_up is not None and now < last_up + policy.scale_down_delay
    if demand.queued == 0 and current.patch_id != 0 and not delayed:
        return write(have, 0, Reason.QUIET_RESET,
                     f"{why}; nothing waits: patch 0 lets the controller remove idle "
                     "runners beyond the count")
    due = reaffirm_due(current, demand)  # (later than now: ``still_waiting`` said no)
    facts = target.facts if due is None else replace(target.facts, reaffirm_at=due)
    return Decision(False, target.value, current.patch_id, Reason.UNCHANGED, why, why=facts)


def settled_until(current: Current, policy: Policy, now: datetime,
                  demand: Demand | None = None) -> datetime | None:
    """Until when ``decide`` gives the answer it gave at ``now`` again, for the same state,
    demand and policy: the clock enters only through the scale-down delay (constant before
    it runs out, and after), the re-affirm of jobs that still wait (``reaffirm_due`` of
    ``demand``) and scheduled windows. ``None``: a schedule is in play, whose
    windows this does not follow, or a forecast, which moves with the clock and the history;
    decide again every pass. ``FOREVER``: no clock left in it.

    A pass may then skip the sets whose inputs did not change: ten thousand sets, ten
    changing, cost ten decisions. A last scale-up more than ``CLOCK_SKEW_TOLERANCE`` ahead of
    ``now`` gives ``None`` too: a host's clock ignores it and a pinned one holds from it
    (``hold_from``), and one remembered answer serves both (`plan --now` and `run` share the
    state cache)."""
    if policy.schedules or policy.forecast is not None:
        return None
    until = FOREVER
    if current.last_scale_up is not None:
        if current.last_scale_up - now > CLOCK_SKEW_TOLERANCE:
            return None
        held_until = current.last_scale_up + policy.scale_down_delay
        if now < held_until:
            until = held_until
    again = reaffirm_due(current, demand) if demand is not None else None
    if again is not None and now < again:  # ``still_waiting`` from then, for this demand
        until = min(until, again)
    return until


def drain(current: Current) -> Decision:
    """`gitscale drain`: replicas 0 with patch 0 (the controller removes every idle runner and
    lets busy ones finish), held there until resumed."""
    if current.replicas == 0 and current.patch_id == 0 and current.drained:
        return Decision(False, 0, 0, Reason.UNCHANGED, "already drained", why=DRAINED)
    return Decision(True, 0, 0, Reason.DRAIN, "drained by hand: replicas 0, patch 0; held "
                    "until `gitscale drain --resume`", why=DRAINED)


def resume(current: Current) -> Decision:
    """`gitscale drain --resume`: hand the set back to the loop, which scales it from demand."""
    if not current.drained:
        return Decision(False, current.replicas or 0, current.patch_id, Reason.UNCHANGED,
                        "not drained", why=Why(drain=Drain.NOT_DRAINED))
    return Decision(True, current.replicas or 0, 0, Reason.RESUME,
                    "resumed: the next pass scales from demand again")


def _runners_needed(current: Current, demand: Demand, have: int) -> bool:
    """Do waiting jobs lack runners that only a write can give them?

    The last write left ``have`` runners for its jobs J (any beyond them idle), and on a
    RunnerSet ``backlog`` refills of finished slots. Since then ``arrived`` jobs came; starts
    and completions cancel out of the count, so the jobs without a runner to come number
    |J| + arrived − have − backlog. A write fills the slots that ``completed`` jobs' runners
    left, so it helps only once the refills are used up (each completed job's runner took
    one): before, the controller still refills by itself; without a backlog field (not a
    RunnerSet) only if some completed, since otherwise (at max) a commit would only repeat
    the last one. On a RunnerSet the write may come before that completion: its backlog lets
    the controller refill the slot the moment it is freed.
    """
    changes = current.job_changes(demand)
    if changes is None:
        return True  # unknown ids: any change may be a new job
    arrived, completed = changes
    assert current.jobs is not None
    backlog = current.backlog or 0
    if not uncovered(len(current.jobs), arrived, have, backlog):
        return False
    if current.backlog is None:
        return completed > 0
    return refills_left(backlog, completed) == 0
