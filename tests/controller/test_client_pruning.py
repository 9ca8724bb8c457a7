"""The clients (and tokens) and the refusals ``Platforms`` keeps go when no set uses their
credentials Secret any more: its last set deleted, or moved to another Secret by a spec edit
(``Platforms._note``). Through the real ``kubernetes`` client against the local API server and
the GitHub fake."""
from __future__ import annotations

import base64
import gc
import weakref

import kubernetes

from gitscale.controller.platforms import Platforms
from tests.controller.harness import NS, TOKEN, Harness, github_spec


def secret(harness: Harness, name: str, token: str) -> None:
    harness.api.create_object("secrets", {"metadata": {"name": name}, "type": "Opaque", "data": {
        "github_token": base64.b64encode(token.encode()).decode()}}, NS)


def move(harness: Harness, name: str, credentials: str) -> None:
    """The set's spec edited: its credentials are now in Secret ``credentials``."""
    harness.api.mutate_object("runnersets", name, lambda o: o["spec"]["github"].update(
        credentialsSecret=credentials), NS)


def secrets_of(platforms: Platforms) -> set[str]:
    """The Secrets the platforms keep a client or a refusal of."""
    return {key[2] for key in [*platforms._clients, *platforms._refusals._by_key]}


def delete(harness: Harness, name: str) -> None:
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", name)


def test_a_deleted_sets_clients_go_with_it_and_another_secrets_stay(harness: Harness) -> None:
    """Two sets on two Secrets: once one is deleted, its Secret's client (and the token it
    holds) is not kept, and is collected; the other set's client serves on, not made again."""
    secret(harness, "other-creds", TOKEN)
    harness.write("rs", 0, 0)
    harness.write("gone", 0, 0, spec=github_spec(harness.github.url,
                                                 credentialsSecret="other-creds"))
    harness.sync("rs")
    harness.sync("gone")
    platforms = harness.controller.ctx.platforms
    assert secrets_of(platforms) == {"gh-creds", "other-creds"}
    (made,) = [m for k, m in platforms._clients.items() if k[2] == "other-creds"]
    client = weakref.ref(made.client)
    kept = platforms._clients[next(k for k in platforms._clients if k[2] == "gh-creds")]
    del made
    delete(harness, "gone")
    harness.sync("gone")  # (no pod: the finalizer goes at once)
    harness.catch_up()
    harness.sync("gone")  # gone
    assert secrets_of(platforms) == {"gh-creds"}
    gc.collect()
    assert client() is None
    harness.sync("rs")
    assert next(iter(platforms._clients.values())) is kept  # (not made again)


def test_a_set_moved_to_another_secret_leaves_the_old_ones_refusal_and_client(
        harness: Harness) -> None:
    """A set whose token is refused is moved to another Secret (its spec edited): the old
    Secret's refusal and client go with that pass, not when some set is deleted. Moved back
    once GitHub takes the old token again, the old Secret is tried at once, not held back by
    the backoff of a refusal no set met meanwhile."""
    harness.github.tokens = {"ghp-the-new-one"}
    secret(harness, "new-creds", "ghp-the-new-one")
    harness.write("rs", 1, 1)
    harness.write("other", 0, 0, spec=github_spec(harness.github.url,
                                                  credentialsSecret="new-creds"))
    harness.sync("other")
    assert harness.sync("rs").created == []  # refused: a backoff of 10 s starts
    platforms = harness.controller.ctx.platforms
    assert "gh-creds" in {key[2] for key in platforms._refusals._by_key}
    move(harness, "rs", "new-creds")
    assert len(harness.sync("rs").created) == 1
    assert secrets_of(platforms) == {"new-creds"}

    harness.github.tokens.add(TOKEN)  # the old token works again
    move(harness, "rs", "gh-creds")
    harness.write("rs", 2, 2)
    assert len(harness.sync("rs").created) == 1  # (no clock advance: at once)
    assert secrets_of(platforms) == {"gh-creds", "new-creds"}  # ("other" uses new-creds)


def test_a_pass_with_the_same_credentials_keeps_its_client(harness: Harness) -> None:
    """Passes of a set whose credentials did not move reuse its client: no Secret read, no
    new client, per pass."""
    harness.write("rs", 1, 1)
    harness.sync("rs")
    platforms = harness.controller.ctx.platforms
    (made,) = platforms._clients.values()
    for _ in range(3):
        harness.sync("rs")
    assert list(platforms._clients.values()) == [made]
    assert platforms._users == {next(iter(platforms._clients)): 1}
