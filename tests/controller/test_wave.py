"""When a pass's creations stop (``wave.py``): the failures each creation may meet, sorted into
those every creation would meet (stop at once), the API server's (stop after
``WAVE_FAILURES`` in a row) and the others (one runner's). The wave itself, driven through the
controller, is in ``test_api_outage.py``."""
from __future__ import annotations

import pytest

from gitscale.controller.errors import (
    Conflict,
    ControllerError,
    CredentialsError,
    Interrupted,
    KubeError,
    PlatformError,
    PlatformOutage,
    RunnerNameTaken,
)
from gitscale.controller.wave import WAVE_FAILURES, Wave, for_all, server_failure


@pytest.mark.parametrize("exc, every, server", [
    pytest.param(KubeError("quota", 403), True, False, id="403-quota"),
    pytest.param(KubeError("webhook", 400), True, False, id="400-webhook"),
    pytest.param(KubeError("refused", unreachable=True), True, False, id="no-connection"),
    pytest.param(Conflict("taken", 409), False, False, id="409-name-taken"),
    pytest.param(KubeError("etcd", 500), False, True, id="500"),
    pytest.param(KubeError("busy", 503), False, True, id="503"),
    pytest.param(KubeError("apf", 429), False, True, id="429"),
    pytest.param(KubeError("timeout", 408), False, True, id="408"),
    pytest.param(KubeError("reset"), False, True, id="no-answer"),
    pytest.param(CredentialsError("401"), True, False, id="github-credentials"),
    pytest.param(PlatformError("404"), True, False, id="github-refuses"),
    pytest.param(PlatformOutage("502"), False, False, id="github-outage"),
    pytest.param(RunnerNameTaken("409"), False, False, id="github-name-taken"),
    pytest.param(Interrupted("stopping"), False, False, id="interrupted"),
])
def test_each_failure_of_a_creation_is_sorted(exc: ControllerError, every: bool,
                                             server: bool) -> None:
    assert (for_all(exc), server_failure(exc)) == (every, server)


def test_server_failures_end_the_wave_only_in_a_row() -> None:
    wave, failure = Wave(), KubeError("503 ServiceUnavailable", 503)
    for _ in range(3):  # a creation that succeeds starts the count over
        for _ in range(WAVE_FAILURES - 1):
            wave.failed(failure)
        wave.created()
    assert not wave.stop.is_set()
    for _ in range(WAVE_FAILURES - 1):
        wave.failed(failure)
    wave.failed(Conflict("409", 409))  # (one runner's: neither counted nor a new start)
    assert not wave.stop.is_set()
    wave.failed(failure)
    assert wave.stop.is_set() and wave.browned_out


def test_a_refusal_every_creation_would_meet_ends_the_wave_at_once() -> None:
    wave = Wave()
    wave.failed(KubeError("403 Forbidden: exceeded quota", 403))
    assert wave.stop.is_set() and not wave.browned_out
