"""The one HTTP client against an API that is broken or hostile, on loopback: a next page or a
redirect that leaves the API's origin (nothing is sent there, the credential least), a
credential that cannot be a header (refused before anything is sent, never quoted), a body too
large to read or nested too deep to parse. Each is an ``ApiError`` naming the URL."""
from __future__ import annotations

import json
from typing import Iterator

import pytest

from gitscale.clients.errors import ApiError
from gitscale.clients.http import COURTESY_BODY, MAX_BODY, HttpClient
from gitscale.clients.urls import same_api
from gitscale.redact import secret_forms

from tests.clients.test_http import add_runs, assert_clean_auth, make_client, runs_url
from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub


@pytest.fixture(params=["127.0.0.2", "127.0.0.1"], ids=["another-host", "another-port"])
def elsewhere(request: pytest.FixtureRequest) -> Iterator[FakeGitHub]:
    """A second API that takes the same token and records every request that reaches it."""
    with FakeGitHub(token=GH_TOKEN, host=request.param) as fake:
        fake.add_repo("acme", "app")
        yield fake


def one_page(github: FakeGitHub) -> bytes:
    """A page of one queued run, as GitHub answers it."""
    run = github.run_object(github.add_run("acme/app", "queued", [("queued", ["linux"])]))
    return json.dumps({"total_count": 2, "workflow_runs": [run]}).encode()


# -- next pages and redirects stay on the API's origin -------------------------------------------
def test_a_next_page_on_another_origin_is_refused_and_nothing_is_sent_there(
        github: FakeGitHub, elsewhere: FakeGitHub) -> None:
    github.add_repo("acme", "app")
    github.fail("body", "/actions/runs", body=one_page(github), headers={
        "Link": f'<{elsewhere.url}/repos/acme/app/actions/runs?page=2>; rel="next"'})
    client = make_client(github)
    with pytest.raises(ApiError) as caught:
        client.paginate(runs_url(github), {"status": "queued"}, "workflow_runs")
    assert str(caught.value) == (
        f"github ({github.url}): GET {runs_url(github)}?status=queued: its next page is on "
        f"another origin ({elsewhere.url}): not followed, nothing is sent there")
    assert elsewhere.log == []
    assert_clean_auth(github)


def test_a_next_page_over_another_scheme_is_refused(github: FakeGitHub) -> None:
    """http:// ↔ https:// on the same host and port is another origin too."""
    github.add_repo("acme", "app")
    port = github.server.server_address[1]
    github.fail("body", "/actions/runs", body=one_page(github), headers={
        "Link": f'<https://127.0.0.1:{port}/repos/acme/app/actions/runs?page=2>; rel="next"'})
    with pytest.raises(ApiError, match=rf"another origin \(https://127.0.0.1:{port}\)"):
        make_client(github).paginate(runs_url(github), {}, "workflow_runs")
    assert len(github.log) == 1


@pytest.mark.parametrize(("target", "source", "same"), [
    pytest.param("https://api.github.com/x?page=2", "https://api.github.com/x", True,
                 id="same-origin"),
    pytest.param("https://API.github.com:443/x", "https://api.github.com/x", True,
                 id="default-port-and-case"),
    # a GitHub Enterprise Server that redirects plain http to TLS (httpx keeps the header too)
    pytest.param("https://ghes.example.com/api/v3/x", "http://ghes.example.com/api/v3/x", True,
                 id="upgrade-to-https"),
    pytest.param("http://ghes.example.com/api/v3/x", "https://ghes.example.com/api/v3/x", False,
                 id="never-downgraded"),
    pytest.param("https://ghes.example.com:8443/x", "http://ghes.example.com:8080/x", False,
                 id="upgrade-on-other-ports"),
    pytest.param("https://evil.example.com/x", "http://ghes.example.com/x", False,
                 id="upgrade-to-another-host"),
    pytest.param("https://api.github.com.evil.example/x", "https://api.github.com/x", False,
                 id="another-host"),
])
def test_what_may_be_sent_what_the_api_was_sent(target: str, source: str, same: bool) -> None:
    assert same_api(target, source) is same


def test_a_redirect_within_the_api_is_followed_with_the_credential(github: FakeGitHub) -> None:
    """GitHub answers 301 for a renamed repo, to the same API: that keeps working."""
    add_runs(github, 2, repo="acme/renamed")
    github.fail("body", "/repos/acme/app/", times=1, status=301, body=b'{"message": "Moved '
                b'Permanently"}', headers={"Location": f"{runs_url(github, 'acme/renamed')}"
                                                        "?status=queued"})
    runs = make_client(github).paginate(runs_url(github), {"status": "queued"}, "workflow_runs")
    assert len(runs) == 2
    assert [(r.route, r.status) for r in github.log] == [
        ("/repos/acme/app/actions/runs", 301), ("/repos/acme/renamed/actions/runs", 200)]
    assert_clean_auth(github)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_to_another_origin_is_refused_and_nothing_is_sent_there(
        github: FakeGitHub, elsewhere: FakeGitHub, status: int) -> None:
    add_runs(github, 1)
    add_runs(elsewhere, 1)
    github.fail("body", "/actions/runs", status=status, body=b"{}", headers={
        "Location": f"{runs_url(elsewhere)}?status=queued"})
    with pytest.raises(ApiError) as caught:
        make_client(github).get(runs_url(github), {"status": "queued"})
    assert str(caught.value) == (
        f"github ({github.url}): GET {runs_url(github)}?status=queued answered {status}, a "
        f"redirect to another origin ({elsewhere.url}): not followed, nothing is sent there")
    assert elsewhere.log == []  # its answer was not taken for the API's either
    assert [r.status for r in github.log] == [status]


# -- a credential that cannot be a header is refused before anything is sent ---------------------
@pytest.mark.parametrize(("token", "problem"), [
    pytest.param(GH_TOKEN[:20] + "\n" + GH_TOKEN[20:], "contains a newline", id="newline"),
    pytest.param(GH_TOKEN + "\r\nX-Injected: 1", "contains a carriage return", id="crlf"),
    pytest.param("ghp_SECRETé" + GH_TOKEN[10:], "is not ASCII", id="non-ascii"),
    pytest.param("ghp_SECRET\udcff" + GH_TOKEN[10:], "is not ASCII", id="a-0xff-byte"),
    pytest.param("ghp_SECRET " + GH_TOKEN[10:], "contains whitespace", id="a-space"),
    pytest.param("ghp_SECRET\x00" + GH_TOKEN[10:], "contains a control character", id="nul"),
])
def test_a_credential_that_cannot_be_a_header_is_refused_before_anything_is_sent(
        github: FakeGitHub, token: str, problem: str) -> None:
    add_runs(github, 1)
    sleeps: list[float] = []
    client = HttpClient(name=f"github ({github.url})",
                        headers=lambda: {"Authorization": f"Bearer {token}"}, sleep=sleeps.append)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    message = str(caught.value)
    assert message == (f"github ({github.url}): GET {runs_url(github)}?status=queued not sent: "
                       f"the credential of its Authorization header {problem}")
    assert github.log == [] and sleeps == []  # nothing sent, and not tried again
    for form in secret_forms(token):
        assert form not in message


# -- bodies: bounded, and no nesting crashes the parser -------------------------------------------
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_over_the_cap_is_refused_before_it_is_all_read(github: FakeGitHub,
                                                              declared: bool) -> None:
    add_runs(github, 1)
    github.fail("huge", size=MAX_BODY + 2**20, declared=declared)
    client = make_client(github)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert str(caught.value) == (f"github ({github.url}): GET {runs_url(github)}?status=queued "
                                 f"answered 200 with a body over 32 MiB (the most gitscale "
                                 "reads of an API's answer)")
    assert len(github.log) == 1  # not retried


def test_a_body_just_under_the_cap_is_read(github: FakeGitHub) -> None:
    """The cap refuses what is over it, not what is near it: a JSON string of 32 MiB."""
    add_runs(github, 1)
    github.fail("body", body=b'"' + b"x" * (MAX_BODY - 2) + b'"')
    assert len(make_client(github).get(runs_url(github)).body) == MAX_BODY - 2


def test_a_courtesy_call_keeps_the_start_of_a_huge_answer_and_does_not_fail(
        github: FakeGitHub) -> None:
    """``send`` (a notification) reads the status and a line of the body: a huge body is
    neither read whole nor an error."""
    github.fail("huge", size=MAX_BODY + 2**20)
    answer = HttpClient(name="notify").send("POST", runs_url(github), content=b"{}",
                                            headers={"Content-Type": "application/json"})
    assert answer.status == 200 and len(answer.content) == COURTESY_BODY
    assert answer.content.startswith(b"[0,0,")


@pytest.mark.parametrize("status", [200, 422])
def test_json_nested_too_deep_is_invalid_json_not_a_crash(github: FakeGitHub,
                                                          status: int) -> None:
    add_runs(github, 1)
    github.fail("body", status=status, body=b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ApiError) as caught:
        make_client(github).get(runs_url(github), {"status": "queued"})
    said = {200: "returned invalid or truncated JSON (status 200, 200000 bytes)",
            422: "answered 422"}[status]
    assert str(caught.value) == f"github ({github.url}): GET {runs_url(github)}?status=queued " \
                                f"{said}"


# -- an echoed secret is masked in every form an error may show it --------------------------------
def test_an_echoed_credential_is_masked_when_the_message_is_cut(github: FakeGitHub) -> None:
    """The API's words are cut at 200 characters: a credential is masked before the cut (a
    long one, cut in half, was shown up to the cut)."""
    long_token = "eyJ" + "A" * 400  # an App's JWT is this long
    github.tokens.add(long_token)
    add_runs(github, 1)
    github.fail("body", status=401, body=json.dumps(
        {"message": f"Bad credentials: {'x' * 150} Authorization: Bearer {long_token}"}).encode())
    client = HttpClient(name="github", headers=lambda: {"Authorization": f"Bearer {long_token}"})
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github))
    assert "Authorization: ***" in str(caught.value)
    assert "AAAAAAAA" not in str(caught.value) and "AAAAAAAA" not in caught.value.detail
