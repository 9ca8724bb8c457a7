"""Argo CD learns the repository's URL from the remote gitscale pushed to (over HTTP, with a
token): no `repoURL:` needed, and the token is in no request, output or log."""
from __future__ import annotations

from pathlib import Path

from tests.helpers import RUNNERSET
from tests.integration.conftest import make_bare, rev, run_cli
from tests.integration.git_http import GitHTTPServer
from tests.notify.engines import Application, FakeArgoCD

SECRET = "argocd-webhook-secret-5e1b"


def test_argocd_gets_the_remote_url_without_credentials(http_git_server: GitHTTPServer,
                                                          tmp_path: Path) -> None:
    url = http_git_server.url("config.git")
    apps = [Application("config", url, "main"), Application("other", url + "-two", "main")]
    with FakeArgoCD(SECRET, *apps) as argo:
        bare = make_bare(http_git_server.project_root, "config.git", {
            "gitscale.yaml": (
                "runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                "    source: {file: demand.yaml}\n    policy: {maxReplicas: 5}\n"
                f"notify:\n  - argocd: {{url: {argo.base}, secret: {{env: ARGO_SECRET}}}}\n"),
            "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
            "demand.yaml": "linux: {queued: 2, running: 0}\n",
        })
        result = run_cli("reconcile", "--repo", url, cwd=tmp_path, env={
            "GITSCALE_GIT_TOKEN": http_git_server.token, "ARGO_SECRET": SECRET})
    assert result.code == 0, result
    assert argo.refreshed == ["config"], [s.error for s in argo.seen]
    event = argo.events[0]
    assert event["repository"]["html_url"] == f"http://127.0.0.1:{http_git_server.port}/config"
    assert event["repository"]["clone_url"] == url
    assert event["after"] == rev(bare)
    for text in (result.out, result.err, argo.seen[0].body.decode(), str(argo.seen[0].headers)):
        assert http_git_server.token not in text and SECRET not in text
    assert f"notified argocd ({argo.base})" in result.out
