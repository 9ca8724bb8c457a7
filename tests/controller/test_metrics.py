"""The controller's /metrics on its health port, scraped over HTTP while the test plays Argo CD,
the kubelet and GitHub: the values follow what each pass did."""
from __future__ import annotations

import kubernetes.client
import pytest

from tests.controller.harness import NS, Harness
from tests.test_metrics import Samples, scrape, value


def metrics(port: int) -> Samples:
    status, _, samples = scrape(port)
    assert status == 200
    return samples


def runners(samples: Samples, name: str) -> dict[str, float | None]:
    return {state: value(samples, "gitscale_controller_runners", namespace=NS, set=name,
                         state=state) for state in ("pending", "idle", "busy", "failed")}


def test_runners_creations_deletions_and_refusals(harness: Harness, port: int) -> None:
    per_set = {"namespace": NS, "set": "rs"}
    assert value(metrics(port), "gitscale_controller_leader") == 1
    harness.write("rs", 3, 0)
    harness.sync("rs")
    after_create = metrics(port)
    a, b, c = harness.names("rs")
    harness.running(a)
    harness.running(b)
    harness.running(c, busy=True)
    harness.sync("rs")
    running = metrics(port)
    harness.github.refuse_delete(b)  # took a job just before the DELETE
    harness.write("rs", 1, 0)
    harness.sync("rs")
    after_delete = metrics(port)

    assert value(after_create, "gitscale_controller_runner_creations_total", **per_set) == 3
    assert runners(after_create, "rs") == {"pending": 3, "idle": 0, "busy": 0, "failed": 0}
    assert value(after_create, "gitscale_controller_desired_replicas", **per_set) == 3
    assert value(after_create, "gitscale_controller_runners_missing", **per_set) == 0
    assert runners(running, "rs") == {"pending": 0, "idle": 2, "busy": 1, "failed": 0}
    # 1 wanted: the idle a goes, b answers 422 (kept, counted busy), c is busy
    assert value(after_delete, "gitscale_controller_runner_deletions_total", **per_set) == 1
    assert value(after_delete, "gitscale_controller_unregister_refusals_total", **per_set) == 1
    assert runners(after_delete, "rs") == {"pending": 0, "idle": 0, "busy": 2, "failed": 0}
    assert value(after_delete, "gitscale_controller_api_errors_total", **per_set) == 0
    assert value(after_delete, "gitscale_controller_reconcile_duration_seconds_count") == 3
    assert value(after_delete, "gitscale_controller_last_reconcile_seconds", **per_set) \
        == pytest.approx(harness.controller.reports[-1].seconds)


def test_a_set_short_of_runners_and_api_errors(harness: Harness, port: int) -> None:
    per_set = {"namespace": NS, "set": "rs"}
    harness.write("rs", 2, 0)
    # every creation of the pass fails (taken as a dry run first)
    harness.api.inject_error("create", "pods", times=10, skip=1)
    harness.sync("rs")
    short = metrics(port)
    harness.api.clear_errors()
    harness.clock.advance(30)
    harness.sync("rs")
    whole = metrics(port)

    assert value(short, "gitscale_controller_runner_creations_total", **per_set) == 0
    assert (value(short, "gitscale_controller_api_errors_total", **per_set) or 0) >= 2
    assert value(short, "gitscale_controller_desired_replicas", **per_set) == 2
    assert value(short, "gitscale_controller_runners_missing", **per_set) == 2
    assert value(whole, "gitscale_controller_runner_creations_total", **per_set) == 2
    assert value(whole, "gitscale_controller_runners_missing", **per_set) == 0


def test_a_follower_reports_no_set(harness: Harness, port: int) -> None:
    harness.write("rs", 1, 0)
    harness.sync("rs")
    assert value(metrics(port), "gitscale_controller_desired_replicas", namespace=NS,
                 set="rs") == 1
    harness.controller._follow()  # lost the Lease: the new leader reports the sets
    samples = metrics(port)
    assert value(samples, "gitscale_controller_leader") == 0
    assert value(samples, "gitscale_controller_desired_replicas", namespace=NS, set="rs") is None
    assert runners(samples, "rs") == dict.fromkeys(("pending", "idle", "busy", "failed"))
    assert value(samples, "gitscale_controller_runner_creations_total", namespace=NS,
                 set="rs") == 1  # counters are the process's: they stay


def test_a_deleted_set_takes_its_series_with_it(harness: Harness, port: int) -> None:
    harness.write("rs", 1, 0)
    harness.write("other", 1, 0)
    harness.sync("rs")
    harness.sync("other")
    assert value(metrics(port), "gitscale_controller_desired_replicas", namespace=NS,
                 set="rs") == 1
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", "rs")
    harness.sync("rs")  # its pending runner goes, then the finalizer, then the set
    assert harness.api.get_object("runnersets", "rs", NS) is None
    samples = metrics(port)
    assert not [key for key in samples if ("set", "rs") in key[1]]
    assert value(samples, "gitscale_controller_desired_replicas", namespace=NS, set="other") == 1
