"""The pure half of notify: URLs as Argo CD matches them, and each engine's request."""
from __future__ import annotations

import json

import pytest

from gitscale.notify.payloads import Pushed, flux_hook_path, request
from gitscale.config.notify_targets import Target, web_url, without_credentials
from tests.notify.engines import web_url_regex

PUSHED = Pushed("https://git.example.com/ci/config.git", "main", "a" * 40, "b" * 40,
                "gitscale: linux 0→3", "2026-11-23T09:00:00+00:00",
                (".gitscale/reservations.yaml",), ("clusters/prod/linux.yaml",))


@pytest.mark.parametrize(("repo_url", "expected"), [
    pytest.param("https://github.com/org/config.git", "https://github.com/org/config", id="https"),
    pytest.param("https://github.com/org/config", "https://github.com/org/config", id="no-.git"),
    pytest.param("http://127.0.0.1:8080/config.git", "http://127.0.0.1:8080/config", id="port"),
    pytest.param("git@github.com:org/config.git", "https://github.com/org/config", id="scp"),
    pytest.param("ssh://git@github.com:2222/org/config.git", "https://github.com/org/config",
                 id="ssh-port"),
    pytest.param("https://gitlab.example.com/group/sub/config.git",
                 "https://gitlab.example.com/group/sub/config", id="subgroup"),
    pytest.param("/srv/git/config.git", None, id="local-path"),
    pytest.param("file:///srv/git/config.git", None, id="file-url"),
    pytest.param("https://github.com/", None, id="no-path"),
])
def test_web_url(repo_url: str, expected: str | None) -> None:
    assert web_url(repo_url) == expected
    if expected is not None:
        # and Argo CD's own pattern built from it matches the URL the Application uses
        assert web_url_regex(expected).match(repo_url)


def test_without_credentials() -> None:
    assert without_credentials("https://bot:pw@git.example.com/c.git") == \
        "https://git.example.com/c.git"
    assert without_credentials("ssh://git@git.example.com/c.git") == \
        "ssh://git@git.example.com/c.git"


def test_flux_path_is_the_one_the_controller_publishes() -> None:
    # sha256("token" + "gitscale" + "flux-system"), as Receiver.GetWebhookPath computes it
    assert flux_hook_path("token", "gitscale", "flux-system") == \
        "/hook/" + __import__("hashlib").sha256(b"tokengitscaleflux-system").hexdigest()
    target = Target("flux", "http://flux.example", {"env": "T"},
                    receiver=("gitscale", "flux-system"))
    req = request(target, PUSHED, "token")
    assert req.url == "http://flux.example" + flux_hook_path("token", "gitscale", "flux-system")


def test_argocd_event_uses_the_configured_repo_url_and_github_types() -> None:
    target = Target("argocd", "https://argocd.example.com/api/webhook", None,
                    repo_url="git@git.example.com:ci/config.git")
    req = request(target, PUSHED, None)
    assert "X-Hub-Signature-256" not in req.headers  # no secret configured: unsigned
    event = json.loads(req.body)
    assert event["repository"]["html_url"] == "https://git.example.com/ci/config"
    assert event["repository"]["full_name"] == "ci/config"
    assert event["commits"][0]["added"] == [".gitscale/reservations.yaml"]
    assert event["commits"][0]["timestamp"] == "2026-11-23T09:00:00+00:00"
    assert event["created"] is False and event["base_ref"] is None
