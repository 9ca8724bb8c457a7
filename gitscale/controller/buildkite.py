"""Buildkite's side of a runner: a do-once agent configured through its environment.

The controller never reads the agent token: the pod takes it from the Secret named in
``spec.buildkite.agentTokenSecret`` (key ``token``). Each agent runs with
``--disconnect-after-job`` (``BUILDKITE_AGENT_DISCONNECT_AFTER_JOB``), so it exits after one job
and its pod ends Succeeded (seed 004: ephemeral do-once agents, one pod each).

Idle or busy: an agent has no registration the controller could ask about without a separate
API token, so a running agent is idle unless its pod says ``gitscale.dev/busy: "true"`` (the
agent's ``environment`` hook can set it and its ``pre-exit`` hook clear it). Scale-down stays
safe without it: the pod is deleted with SIGTERM, on which buildkite-agent stops taking jobs and
finishes the one it runs; runner pods get ``terminationGracePeriodSeconds: 3600`` unless the
template sets its own, so a running job is not interrupted.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitscale.controller.observe import BuildkiteSettings, Registered

TOKEN_KEY = "token"


class Buildkite:
    def __init__(self, settings: BuildkiteSettings) -> None:
        self.settings = settings

    def env(self, name: str) -> list[dict[str, Any]]:
        bk = self.settings
        env: list[dict[str, Any]] = [
            {"name": "BUILDKITE_AGENT_NAME", "value": name},
            {"name": "BUILDKITE_AGENT_TAGS", "value": ",".join((f"queue={bk.queue}", *bk.tags))},
            {"name": "BUILDKITE_AGENT_DISCONNECT_AFTER_JOB", "value": "true"},
        ]
        if bk.agent_token_secret:
            env.append({"name": "BUILDKITE_AGENT_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": bk.agent_token_secret, "key": TOKEN_KEY}}})
        return env

    def register(self, name: str) -> None:
        return None  # the agent registers itself with its token

    def unregister(self, runner_id: int) -> None:
        return None  # nothing to undo: an agent that never connected left no trace

    def registered(self) -> Mapping[int, Registered] | None:
        return None  # idle/busy comes from the pod (see the module docstring)
