"""`plan`'s note on a set it leaves alone: the same words whichever path finds them."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gitscale.core.model import NO_WHY, Cap, CapBy, Decision, Demand, Drain, Reason, Why
from gitscale.plan.explain import unchanged_note

HELD = datetime(2026, 11, 21, 9, 10, tzinfo=timezone.utc)


@pytest.mark.parametrize(("reason", "why", "demand", "note"), [
    pytest.param(Reason.UNCHANGED, NO_WHY, Demand(9, 0), None, id="plain-with-jobs-waiting"),
    pytest.param(Reason.UNCHANGED, Why(), Demand(9, 0), None, id="an-equal-empty-why"),
    pytest.param(Reason.UNCHANGED, Why(cap=Cap(CapBy.MAX_REPLICAS, 3)), Demand(9, 0),
                 "at max 3; demand 9 (9 queued, 0 running)", id="at-max-with-jobs-waiting"),
    pytest.param(Reason.UNCHANGED, Why(cap=Cap(CapBy.MAX_REPLICAS, 3)), Demand(2, 1), None,
                 id="at-max-demand-met"),
    pytest.param(Reason.UNCHANGED, Why(cap=Cap(CapBy.MAX_TOTAL_REPLICAS, 3)), Demand(4, 1),
                 "capped at 3 by limits.maxTotalReplicas; demand 5 (4 queued, 1 running)",
                 id="capped-by-the-total"),
    pytest.param(Reason.PAUSED, NO_WHY, Demand(9, 0),
                 'annotation gitscale.dev/paused: "true"; demand 9 (9 queued, 0 running)',
                 id="paused-with-jobs-waiting"),
    pytest.param(Reason.PAUSED, NO_WHY, None, 'annotation gitscale.dev/paused: "true"',
                 id="paused-no-demand"),
    pytest.param(Reason.UNCHANGED, Why(drain=Drain.DRAINED), Demand(5, 0),
                 "drained: held at 0 until `gitscale drain --resume`; demand 5 (5 queued, "
                 "0 running)", id="drained"),
    pytest.param(Reason.UNCHANGED, Why(held_until=HELD), Demand(0, 0),
                 "scale-down held until 2026-11-21 09:10:00 UTC (scaleDownDelay)", id="held"),
    pytest.param(Reason.DEMAND_UNKNOWN, NO_WHY, None,
                 "demand could not be read: left as it is", id="demand-unknown"),
    pytest.param(Reason.UNCHANGED, Why(reaffirm_at=HELD), Demand(1, 2),
                 "jobs wait with runners counted for them: re-affirm at 2026-11-21 09:10:00 "
                 "UTC if they still wait", id="still-waiting"),
    pytest.param(Reason.UNCHANGED, Why(held_until=HELD, reaffirm_at=HELD), Demand(1, 0),
                 "scale-down held until 2026-11-21 09:10:00 UTC (scaleDownDelay); jobs wait "
                 "with runners counted for them: re-affirm at 2026-11-21 09:10:00 UTC if they "
                 "still wait", id="held-and-still-waiting"),
])
def test_the_note_says_what_held_the_set(reason: Reason, why: Why, demand: Demand | None,
                                         note: str | None) -> None:
    decision = Decision(False, 3, 1, reason, "detail", why=why)
    assert unchanged_note(decision, demand) == note
