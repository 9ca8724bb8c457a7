"""The informer's store across a relist (after a 410 or an error): it must not forget the
controller's own recent writes, nor the sets whose pods went while no watch was open."""
from __future__ import annotations

import threading
from collections.abc import Iterator

from gitscale.controller.cache import Informer, Store, set_of_pod
from gitscale.controller.observe import LABEL_SET, RawObject


def pod(name: str, version: int, uid: str = "") -> RawObject:
    return {"kind": "Pod", "metadata": {"namespace": "default", "name": name,
                                        "uid": uid or f"uid-{name}",
                                        "resourceVersion": str(version),
                                        "labels": {LABEL_SET: "rs"}}}


def relist(store: Store, listed: list[RawObject], version: str) -> list[RawObject]:
    """Run an informer whose list answers ``listed`` at ``version``; return what it reported."""
    stop = threading.Event()
    changed: list[RawObject] = []

    def watch(_version: str, _timeout: int) -> Iterator[tuple[str, RawObject]]:
        stop.wait()
        return iter(())

    informer = Informer("pods", store, lambda: (listed, version), watch, changed.append, stop)
    informer.start()
    try:
        assert informer.synced.wait(5)
    finally:
        stop.set()
        informer.thread.join(5)
    return changed


def test_relist_keeps_objects_written_after_the_list_snapshot() -> None:
    # A pass created pod "new" (version 12) while the list (snapshot at version 10) was in
    # flight. The watch resumes from 10 and will deliver it; until then a pass that cannot see
    # it would create its slot a second time.
    store = Store(index=set_of_pod)
    store.put(pod("old", 3))
    store.put(pod("new", 12))
    relist(store, [pod("old", 3)], "10")
    assert sorted(p["metadata"]["name"] for p in store.group("default/rs")) == ["new", "old"]


def test_relist_forgets_objects_older_than_the_snapshot() -> None:
    store = Store(index=set_of_pod)
    store.put(pod("gone", 3))
    relist(store, [], "10")
    assert store.group("default/rs") == []


def test_relist_reports_a_pod_that_went_with_its_labels() -> None:
    # The pod was deleted while no watch was open: its set must be queued (by its label).
    store = Store(index=set_of_pod)
    store.put(pod("gone", 3))
    changed = relist(store, [], "10")
    assert [set_of_pod(obj) for obj in changed] == ["default/rs"]
