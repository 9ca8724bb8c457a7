"""``quick_batches``: `gitscale serve` run in-process (tests/commands/test_serve.py's Server)
batches as if its window were a quarter of the 1 s the tests give (the least --window takes),
for the tests that wait for one delivery's batch at a time, never for two deliveries to share
a batch: the same batches, sooner. A failed batch's backoff is as it was (serve's own, or a
test's shortened one: test_serve_outage.py's ``quick_retries``)."""
from __future__ import annotations

import pytest

import gitscale.commands.serve


@pytest.fixture
def quick_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    delay = gitscale.commands.serve.batch_delay  # (a test's own, when it set one)
    monkeypatch.setattr(gitscale.commands.serve, "batch_delay",
                        lambda window, failures: delay(window / 4, failures))
