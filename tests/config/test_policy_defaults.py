"""An inline policy's defaults are the `default` preset's, so that a first hand-written policy
changes only what it says (before, an inline policy held no scale-down at all)."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from gitscale.config.load import load_config, load_preset
from tests.helpers import RUNNERSET, simple_config, write


def policy_of(tmp_path: Path, inline: str):  # type: ignore[no-untyped-def]
    write(tmp_path, {"gitscale.yaml": simple_config({"linux": inline}),
                     "demand.yaml": "linux: {queued: 0, running: 0}\n",
                     "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0)})
    (runner_set,) = load_config(tmp_path, "gitscale.yaml").sets
    return runner_set.policy


def test_an_empty_inline_policy_is_the_default_preset(tmp_path: Path) -> None:
    preset = load_preset(tmp_path, "default", "test", None)
    assert preset.scale_down_delay == timedelta(minutes=5)
    assert policy_of(tmp_path, "{}") == preset


@pytest.mark.parametrize(("inline", "delay"), [
    pytest.param("{maxReplicas: 50}", timedelta(minutes=5), id="unsaid-the-presets-5m"),
    pytest.param("{maxReplicas: 50, scaleDownDelay: 0s}", timedelta(0), id="said-0s"),
    pytest.param("{scaleDownDelay: 90s}", timedelta(seconds=90), id="said-90s"),
])
def test_scale_down_delay(tmp_path: Path, inline: str, delay: timedelta) -> None:
    assert policy_of(tmp_path, inline).scale_down_delay == delay


def test_only_what_it_says_differs_from_the_preset(tmp_path: Path) -> None:
    preset = load_preset(tmp_path, "default", "test", None)
    assert policy_of(tmp_path, "{maxReplicas: 50, buffer: 2}") == replace(
        preset, max_replicas=50, buffer=2)
