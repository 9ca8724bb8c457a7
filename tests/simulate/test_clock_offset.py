"""`simulate --scaler-clock-offset`: gitscale's clock (its passes, every effectiveTime it
writes) off the cluster's (the kubelet's finishedAt), worked out by hand.

Settings of the outcome targets: decisions every 10 s, sync 10 s, pod start 45 s, policy
{minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m}. Job A arrives at 5 and runs 63 s on
the runner ready at 65 (decided at 10, synced at 20): it ends at 128. Job B arrives at 125,
while A still runs. The pass at 130 reads B queued and A gone: the count stays 1, and it
re-affirms it (effectiveTime: the pass's clock) so that A's slot refills. The controller
refills it when A finished (128, to the second) no later than the effectiveTime (to the
second); otherwise A's slot is held as if the write had counted A as running, and with no
other change no pass writes again until B has waited 10 minutes after that write
(``core.still_waiting.STILL_WAITING``): the re-affirm at 730 (synced at 740, ready at 785; serve's
at its batch of the minute, 780: ready at 835). Without
it B waited for the next job, C, at 1003 (ready at 1065); in a quiet set, for ever. Webhook
mode (`serve`, window 10 s) batches the same events at the same times and decides alike.
"""
from __future__ import annotations

from collections.abc import Callable

import pytest

from gitscale.simulate.harness import Outcome, Settings
from gitscale.simulate.strategies import run_gitscale, run_serve
from tests.simulate.util import TARGET, trace_of

TRACE = trace_of((5, 63), (125, 60), (1003, 60))
REFILLED = [60.0, 185 - 125, 62.0]  # B's runner: synced at 140, ready at 185
HELD = [60.0, 785 - 125, 62.0]  # re-affirmed for B 10 minutes after the write
HELD_SERVE = [60.0, 835 - 125, 62.0]  # serve: by its batch of the minute after (780)


@pytest.mark.parametrize("offset, waits", [
    pytest.param(0.0, REFILLED, id="same-clock"),
    pytest.param(2.0, REFILLED, id="ahead"),  # effectiveTime 132: A finished before it
    pytest.param(-0.5, REFILLED, id="behind-within-the-second"),  # 129.5 is 129: not after 128
    pytest.param(-2.5, HELD, id="behind-2.5s"),  # 127.5 is 127: A "finished after" the write
    pytest.param(-5.0, HELD, id="behind-5s"),
])
@pytest.mark.parametrize("strategy", [run_gitscale, run_serve], ids=["run", "serve"])
def test_a_scaler_clock_behind_holds_the_slot_of_a_job_the_write_did_not_count(
        offset: float, waits: list[float], strategy: Callable[..., Outcome]) -> None:
    settings = Settings(interval=10, sync_delay=10, pod_start=45, scaler_clock_offset=offset)
    outcome = strategy(TRACE, {"default": TARGET}, settings, "target")
    assert outcome.waits == (HELD_SERVE if waits is HELD and strategy is run_serve else waits)
