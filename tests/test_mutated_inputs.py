"""Whatever a person does to the config, a manifest or a demand file, `validate` and `plan`
answer with exit 0, 1 or 2 and a message — never a crash (exit 70) or a traceback.

The edits are the ones people make by hand: a value replaced by another YAML value of any
kind, a key added with a hostile name (``~``, ``true``, ``1``…), a line deleted, duplicated or
indented differently, an item turned into a list entry. Hypothesis draws them from a fixed seed
(``derandomize``), so a run is reproducible and the suite stays deterministic. It finds the
crash that ``~:`` beside an unknown key caused (exit 70, sorting ``None`` with a name).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import make_repo, run

CONFIG = """\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    object: {kind: RunnerSet, name: linux}
    source: {file: demand.yaml}
    policy:
      minReplicas: 1
      maxReplicas: 20
      buffer: 2
      scaleDownDelay: 5m
      maxStepUp: 5
      schedules:
        - name: mornings
          start: '2026-01-05T08:00:00Z'
          duration: 2h
          minReplicas: 4
          recurrence: 'FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR'
          timezone: Europe/Berlin
      forecast: {lookback: 14d, quantile: 0.9, lead: 2m}
  - name: other
    manifest: sets/other.yaml
    source: {github: {org: acme, labels: [self-hosted, linux], token: {env: NO_SUCH_TOKEN}}}
    policy: default
"""

RUNNERSET = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: {name}
  namespace: ci-runners
  annotations:
    gitscale.dev/last-scale-up: '2026-11-26T08:00:00Z'
spec:
  replicas: 2
  patchID: 7
  effectiveTime: '2026-11-26T08:00:00Z'
  platform: github
  github:
    configURL: https://github.com/acme
    labels: [self-hosted, linux]
    credentialsSecret: github-app
  template:
    spec:
      containers:
        - name: runner
          image: ghcr.io/actions/actions-runner:2.330.0
"""

DEMAND = "linux: {queued: 3, running: 1, jobs: [1, 2, 3, 4]}\nother: {queued: 0, running: 0}\n"

FILES = {"gitscale.yaml": CONFIG, "sets/linux.yaml": RUNNERSET.format(name="linux"),
         "sets/other.yaml": RUNNERSET.format(name="other"), "demand.yaml": DEMAND}

VALUES = ["~", "[]", "{}", "1.5", "-1", "0", "true", "'x'", "2026-01-01", "!!binary aGk=",
          "&a 1", "*a", "{env: X}", "[a, b]", "99999999999999999999", ".nan", "''",
          '"\\u0000"', "!!python/name:os.system", "{a: {b: [1, {c: 2}]}}", "10m", "-5m",
          "1e3", "0x10", "? x", "|\n  text", ">-\n  folded", "'2026-01-01T00:00:00Z'",
          "'FREQ=DAILY;COUNT=0'", "Mars/Olympus", "2147483648", "{file: /etc/passwd}"]
KEYS = ["~", "true", "on", "1", "name", "policy", "source", "minReplicas", "maxReplicas",
        "schedules", "forecast", "buffer", "scaleDownDelay", "github", "file", "labels", "org",
        "notify", "runnerSets", "object", "kind", "replicas", "patchID", "effectiveTime",
        "backlog", "timezone", "quantile", "lookback", "lead", "queued", "running", "jobs"]


@st.composite
def edits(draw: st.DrawFn, text: str) -> str:
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        indent = " " * (len(line) - len(line.lstrip()))
        kind = draw(st.sampled_from(["value", "key", "delete", "duplicate", "indent", "item"]))
        if kind == "value" and ":" in line:
            lines[i] = line.split(":", 1)[0] + ": " + draw(st.sampled_from(VALUES))
        elif kind == "key":  # one or two: an odd key beside an unknown one crashed once
            for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2)):
                lines.insert(i, f"{indent}{key}: {draw(st.sampled_from(VALUES))}")
        elif kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, line)
        elif kind == "indent":
            lines[i] = " " * draw(st.sampled_from([0, 2, 4, 6])) + line.lstrip()
        else:
            lines[i] = f"{indent}- {draw(st.sampled_from(KEYS))}: {draw(st.sampled_from(VALUES))}"
    return "\n".join(lines)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("mutated"), FILES, bare_remote=False)


@pytest.mark.parametrize("name", sorted(FILES))
def test_an_edited_file_is_answered_never_crashed_on(checkout: Path, name: str, capsys) -> None:  # type: ignore[no-untyped-def]
    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(text=edits(FILES[name]))
    def check(text: str) -> None:
        (checkout / name).write_text(text)
        try:
            for argv in (["validate"], ["plan", "--demand", str(checkout / "demand.yaml"),
                                        "--now", "2026-11-26T09:00:00Z"]):
                code, out, err = run(capsys, *argv, "--repo", str(checkout))
                assert code in (0, 1, 2), (argv, text, err)
                assert "Traceback" not in out + err and "crashed" not in err, (argv, text, err)
                if code == 1:  # the error, or a set's (`! linux  error: …` in the plan)
                    assert err.startswith("error: ") or "  error: " in out, (argv, text, err)
        finally:
            (checkout / name).write_text(FILES[name])

    check()
