"""The Buildkite clients against Buildkite-shaped servers on loopback: the agent metrics API
(tests/demand) and the REST API's agents (tests/controller), pages followed by ``Link``."""
from __future__ import annotations

import json

import pytest

from gitscale.clients.buildkite import Agents, Metrics
from gitscale.clients.errors import ApiError
from tests.controller.buildkite_fake import FakeBuildkite as FakeAgentsAPI
from tests.demand.conftest import BK_TOKEN
from tests.demand.fake_buildkite import FakeBuildkite, metrics

REST_TOKEN = "bkua_rest_token_for_tests"


def test_a_queues_metrics_and_the_poll_duration(buildkite: FakeBuildkite) -> None:
    buildkite.queues["default"] = metrics("TestCollectorWithSomeJobsAndAgentsForAQueue")
    buildkite.queues["other"] = metrics("TestCollectorWithNoJobsForAllQueues")
    answer = Metrics(buildkite.url, BK_TOKEN).queue("default")
    assert answer.body == json.loads(buildkite.queues["default"])
    assert answer.body["jobs"] == {"scheduled": 3, "running": 1, "total": 4}
    assert answer.headers["buildkite-agent-metrics-poll-duration"] == "15s"
    assert [r.authorization for r in buildkite.log] == [f"Token {BK_TOKEN}"]


def test_connected_agents_over_several_pages() -> None:
    server = FakeAgentsAPI(REST_TOKEN).start()
    try:
        for n in range(230):
            server.connect(f"agent-{n:03d}", busy=n % 3 == 0)
        server.connect("gone")
        server.disconnect("gone")
        agents = Agents(server.url, "acme", REST_TOKEN).connected()
        assert sorted(a["name"] for a in agents) == [f"agent-{n:03d}" for n in range(230)]
        assert sum(a["job"] is not None for a in agents) == 77
        assert len(server.calls) == 3
        with pytest.raises(ApiError) as refused:
            Agents(server.url, "acme", "wrong-token").connected()
        assert refused.value.status == 401 and "wrong-token" not in str(refused.value)
    finally:
        server.stop()
