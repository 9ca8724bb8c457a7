"""gitscale.controller.github against a GitHub-shaped server on loopback."""
from __future__ import annotations

from typing import Iterator
from urllib.parse import parse_qs

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gitscale.controller.errors import (
    CredentialsError,
    InvalidRunnerSet,
    PlatformError,
    RunnerBusy,
)
from gitscale.controller.github import Credentials, GitHub, Scope, credentials_from, scope_of
from gitscale.controller.platform_github import settings
from gitscale.redact import SECRET_ENV, SECRET_FILE_ENV, known_secrets, redact
from tests.controller.github_fake import FakeGitHub

TOKEN = "ghp-test-token"


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    server = FakeGitHub(TOKEN).start()
    yield server
    server.stop()


def client(server: FakeGitHub, path: str = "orgs/acme", *, sleeps: list[float] | None = None,
           **creds: str) -> GitHub:
    return GitHub(Scope(f"{server.url}/api/v3", path), Credentials(**(creds or {"token": TOKEN})),
                  sleep=(sleeps if sleeps is not None else []).append)


@pytest.mark.parametrize(("url", "api", "path"), [
    pytest.param("https://github.com/acme", "https://api.github.com", "orgs/acme", id="org"),
    pytest.param("https://github.com/acme/app/", "https://api.github.com", "repos/acme/app",
                 id="repo"),
    pytest.param("https://github.com/enterprises/big", "https://api.github.com",
                 "enterprises/big", id="enterprise"),
    pytest.param("https://ghe.example.com/acme", "https://ghe.example.com/api/v3", "orgs/acme",
                 id="ghes"),
    pytest.param("https://acme.ghe.com/acme", "https://api.acme.ghe.com", "orgs/acme",
                 id="ghe-com"),
])
def test_scope_of_config_url(url: str, api: str, path: str) -> None:
    assert scope_of(url) == Scope(api, path)


def test_scope_of_rejects_other_urls() -> None:
    with pytest.raises(InvalidRunnerSet, match="configURL"):
        scope_of("https://github.com/a/b/c")


@pytest.mark.parametrize("url", [
    pytest.param("https://api.github.com/acme?access_token=SECRETq1", id="api-address"),
    pytest.param("https://github.com/?token=SECRETq1", id="no-scope"),
    pytest.param("https://github.com/a/b/c#ghp_" + "A1b2" * 9, id="token-shape"),
])
def test_a_refused_config_url_is_said_without_its_credential(url: str) -> None:
    """The refusal is the RunnerSet's Ready condition (status, not masked there) and what
    `validate` says: a token in the URL's query is masked, as user info is refused unsaid."""
    with pytest.raises(InvalidRunnerSet) as caught:
        settings({"configURL": url, "credentialsSecret": "gh"}, "linux")
    said = str(caught.value)
    assert "spec.github.configURL 'https://" in said and "***" in said, said
    assert "SECRETq1" not in said and "A1b2A1b2" not in said, said


@pytest.mark.parametrize("url", [
    pytest.param("https://api.github.com/acme", id="api.github.com"),
    pytest.param("https://API.acme.ghe.com/acme", id="ghe-com-api"),
    pytest.param("https://ghe.example.com/api/v3/orgs/acme", id="ghes-api-path"),
])
def test_a_config_url_of_the_api_is_refused_naming_the_web_address(url: str) -> None:
    """Runners register at the web address (``--url`` of config.sh); the API is derived from it.
    An API address given instead was taken for a GitHub Enterprise Server's host
    (``https://api.github.com/api/v3``), or for a ``*.ghe.com`` tenant (``api.api.…``)."""
    with pytest.raises(InvalidRunnerSet) as caught:
        scope_of(url)
    said = str(caught.value)
    assert said.startswith(f"spec.github.configURL {url!r} is the REST API's address"), said
    assert "https://github.com/ORG" in said and "https://HOST/ORG" in said
    # ``validate`` and the controller's Ready condition see it where they check the settings
    with pytest.raises(InvalidRunnerSet, match="is the REST API's address"):
        settings({"configURL": url, "credentialsSecret": "gh"}, "linux")


def test_a_ghe_com_tenant_named_api_is_not_taken_for_the_api() -> None:
    assert scope_of("https://api.ghe.com/acme") == Scope("https://api.api.ghe.com", "orgs/acme")


def test_an_enterprise_server_without_rate_limit_headers_registers_lists_and_removes() -> None:
    """GitHub Enterprise Server with rate limiting off (its default) sends no x-ratelimit-*
    header: nothing is waited for, the list is reused as long as its reader allows, and every
    call goes to the API that configURL's host derives (``/api/v3`` once: the fake serves
    nothing else)."""
    server = FakeGitHub(TOKEN, rate_limits=False).start()
    try:
        scope = scope_of(f"{server.url}/acme")
        assert scope == Scope(f"{server.url}/api/v3", "orgs/acme")
        gh = GitHub(scope, Credentials(token=TOKEN), sleep=[].append)
        registration = gh.register("linux-1", ["linux"], "gpu")
        assert registration.jit_config == f"jit-linux-1-{registration.runner_id}"
        assert server.runners[registration.runner_id].group_id == 7
        assert set(gh.runners()) == {registration.runner_id}
        assert gh._api.http.budget is None and gh.reuse(60) == 60
        gh.unregister(registration.runner_id)
        assert server.runners == {}
        assert server.calls == [
            ("GET", "/orgs/acme/actions/runner-groups"),
            ("POST", "/orgs/acme/actions/runners/generate-jitconfig"),
            ("GET", "/orgs/acme/actions/runners"),
            ("DELETE", f"/orgs/acme/actions/runners/{registration.runner_id}")]
    finally:
        server.stop()


def test_credentials_from_secret_never_show_the_secret() -> None:
    creds = credentials_from({"github_token": "ghp-very-secret\n"}, "Secret ns/creds")
    assert creds.token == "ghp-very-secret" and "very-secret" not in repr(creds)
    app = credentials_from({"github_app_id": "12", "github_app_private_key": "PEM"}, "s")
    assert app.app_id == "12" and "PEM" not in repr(app)
    with pytest.raises(CredentialsError, match="Secret ns/creds: needs the key github_token"):
        credentials_from({"github_app_id": "12"}, "Secret ns/creds")


def test_register_unregister_and_list(github: FakeGitHub) -> None:
    gh = client(github)
    reg = gh.register("set-abc123", ["linux", "x64"], None)
    assert reg.jit_config == f"jit-set-abc123-{reg.runner_id}"
    assert "jit-" not in repr(reg)
    runner = github.runners[reg.runner_id]
    assert (runner.labels, runner.group_id, runner.scope) == (["linux", "x64"], 1, "orgs/acme")
    github.set_state("set-abc123", online=True, busy=True)
    listed = gh.runners(max_age=0)
    assert listed[reg.runner_id].busy and listed[reg.runner_id].online
    with pytest.raises(RunnerBusy, match="answered 422: .*still running a job"):
        gh.unregister(reg.runner_id)
    github.set_state("set-abc123", online=True, busy=False)
    gh.unregister(reg.runner_id)
    gh.unregister(reg.runner_id)  # already gone: fine
    assert github.runners == {}


def test_name_taken_by_a_stale_registration_is_replaced(github: FakeGitHub) -> None:
    gh = client(github)
    first = gh.register("set-1", ["l"], None)
    second = gh.register("set-1", ["l"], None)  # 409 → found, removed, registered again
    assert second.runner_id != first.runner_id
    assert list(github.runners) == [second.runner_id]
    github.set_state("set-1", busy=True)
    with pytest.raises(RunnerBusy):  # a live runner owns the name: it is left alone
        gh.register("set-1", ["l"], None)


def test_runner_list_is_paginated_and_reused(github: FakeGitHub) -> None:
    gh = client(github)
    github.add_runners((f"r-{n}" for n in range(150)), ["l"])
    before = github.count("GET", r"/actions/runners$")
    assert len(gh.runners()) == 150
    assert len(gh.runners()) == 150  # within max_age: no new request
    assert github.count("GET", r"/actions/runners$") - before == 2


def test_250_runners_are_listed_over_3_pages_by_link(github: FakeGitHub) -> None:
    """Pages are followed by GitHub's Link header to the end, not guessed from their size."""
    gh = client(github)
    github.add_runners((f"r-{n:03d}" for n in range(250)), ["l"])
    before = len(github.calls)
    listed = gh.runners(max_age=0)
    assert sorted(r.name for r in listed.values()) == [f"r-{n:03d}" for n in range(250)]
    queries = github.queries[before:]
    assert [parse_qs(q).get("page", ["1"])[0] for q in queries] == ["1", "2", "3"]
    assert all(parse_qs(q)["per_page"] == ["100"] for q in queries)


def test_a_runner_group_past_the_first_100_is_found(github: FakeGitHub) -> None:
    """The groups were read from the first page only: group 140 of 150 was reported missing."""
    github.groups = {"Default": 1, **{f"team-{n:03d}": 100 + n for n in range(150)}}
    gh = client(github)
    reg = gh.register("t-1", ["l"], "team-140")
    assert github.runners[reg.runner_id].group_id == 240
    assert github.count("GET", "runner-groups") == 2
    with pytest.raises(InvalidRunnerSet, match="runnerGroup 'team-150' does not exist") as exc:
        gh.register("t-2", ["l"], "team-150")
    # the groups there are, so a typo or a case can be seen (the first 20 of 151)
    assert "its groups, names compared exactly: Default, team-000, team-001," in str(exc.value)
    assert "team-018, … (151 in all))" in str(exc.value)


def test_the_default_group_in_lower_case_is_the_default_group(github: FakeGitHub) -> None:
    """`runnerGroup: default` was refused as a group that does not exist: GitHub's is
    `Default`, id 1 in every organization."""
    github.groups = {"Default": 1, "team": 2}
    gh = client(github)
    reg = gh.register("t-1", ["l"], "default")
    assert github.runners[reg.runner_id].group_id == 1
    assert github.count("GET", "runner-groups") == 0


def test_a_short_rate_limit_is_waited_for(github: FakeGitHub) -> None:
    sleeps: list[float] = []
    gh = client(github, sleeps=sleeps)
    github.limit(retry_after=2)
    reg = gh.register("w-1", ["l"], None)
    assert reg.runner_id in github.runners
    assert len(sleeps) == 1 and 1 < sleeps[0] <= 2
    assert github.count("POST", "generate-jitconfig") == 2  # refused, then made after the wait


def test_a_long_rate_limit_is_reported_and_github_not_asked_again(github: FakeGitHub) -> None:
    sleeps: list[float] = []
    gh = client(github, sleeps=sleeps)
    github.limit(reset=4102444800)  # 2100: far past any wait
    with pytest.raises(PlatformError) as caught:
        gh.runners(max_age=0)
    assert not isinstance(caught.value, CredentialsError)  # a 403, but a limit, not a refusal
    assert "rate limited until 2100-01-01T00:00:00Z" in str(caught.value)
    assert f"GET {github.url}/api/v3/orgs/acme/actions/runners" in str(caught.value)
    assert sleeps == []
    asked = len(github.calls)
    with pytest.raises(PlatformError, match="rate limited until"):
        gh.register("w-2", ["l"], None)
    assert len(github.calls) == asked


def test_no_answer_names_the_cause(github: FakeGitHub) -> None:
    gh = client(github)
    port = github.server_address[1]
    github.stop()
    with pytest.raises(PlatformError) as caught:
        gh.runners(max_age=0)
    assert f"failed: connection refused by 127.0.0.1:{port}; GitHub is not asked again " \
        "before " in str(caught.value)  # (the cause, and when it is asked again: outage.py)


def test_runner_group_by_name(github: FakeGitHub) -> None:
    gh = client(github)
    reg = gh.register("g-1", ["l"], "gpu")
    assert github.runners[reg.runner_id].group_id == 7
    with pytest.raises(InvalidRunnerSet, match="runnerGroup 'nope'"):
        gh.register("g-2", ["l"], "nope")


def test_bad_token_is_a_credentials_error_without_the_token(github: FakeGitHub) -> None:
    gh = client(github, token="ghp-wrong-and-secret")
    with pytest.raises(CredentialsError) as err:
        gh.register("x", ["l"], None)
    assert "401" in str(err.value) and "secret" not in str(err.value)


@pytest.mark.parametrize(("token", "problem"), [
    pytest.param("ghp-secret\nrest", "contains a newline", id="newline"),
    pytest.param("ghp-secret\u00e9", "is not ASCII", id="non-ascii"),
])
def test_a_token_that_cannot_be_a_header_is_a_credentials_error_and_never_sent(
        github: FakeGitHub, token: str, problem: str) -> None:
    """A credentials error (the Secret is read again next pass), not a platform error; the
    token is not quoted, as httpx's error did."""
    with pytest.raises(CredentialsError) as err:
        client(github, token=token).register("x", ["l"], None)
    assert f"the credential of its Authorization header {problem}" in str(err.value)
    assert "secret" not in str(err.value)
    assert github.runners == {} and github.calls == []


def test_github_app_credentials() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    server = FakeGitHub(app=("4242", public.decode())).start()
    try:
        gh = client(server, app_id="4242", installation_id="77", private_key=pem)
        gh.register("a-1", ["l"], None)
        gh.register("a-2", ["l"], None)
        assert server.count("POST", "access_tokens") == 1  # the token is reused
        wrong = client(server, app_id="1", installation_id="77", private_key=pem)
        with pytest.raises(CredentialsError, match="access_tokens answered 401"):
            wrong.register("a-3", ["l"], None)
    finally:
        server.stop()


def _app_key() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return pem, public.decode()


def test_an_app_secret_without_the_installation_id_looks_it_up() -> None:
    """The Secret `gitscale init --github-app-id` prints when it was not told the installation:
    no key github_app_installation_id, and the controller finds the installation itself."""
    pem, public = _app_key()
    server = FakeGitHub(app=("4242", public)).start()
    try:
        creds = credentials_from({"github_app_id": "4242", "github_app_private_key": pem},
                                 "Secret ci-runners/github-app")
        assert creds.installation_id is None
        client(server, app_id=creds.app_id or "", private_key=pem).register("a-1", ["l"], None)
        assert server.calls[:2] == [("GET", "/orgs/acme/installation"),
                                    ("POST", "/app/installations/77/access_tokens")]
    finally:
        server.stop()


def test_the_app_key_and_each_installation_token_are_held_for_masking_the_ids_are_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy, a library or a crash report that echoes the key or a token minted from it has
    it masked, in every message of the process. The App's and installation's ids are no
    secrets: held, they would mask any number equal to them (a runner id, a count)."""
    for name in (*SECRET_ENV, SECRET_FILE_ENV):
        monkeypatch.delenv(name, raising=False)
    pem, public = _app_key()
    server = FakeGitHub(app=("4242", public)).start()
    try:
        creds = credentials_from({"github_app_id": "4242", "github_app_private_key": pem,
                                  "github_app_installation_id": "77"}, "Secret ns/github-app")
        assert known_secrets() == {pem.strip()}
        client(server, app_id="4242", installation_id="77", private_key=pem).register(
            "a-1", ["l"], None)
    finally:
        server.stop()
    assert creds.app_id == "4242"
    held = known_secrets()  # the key, the token it bought, and the JWT that bought it
    assert {pem.strip(), "ghs-installation-77"} <= held and "4242" not in held
    assert all(s in (pem.strip(), "ghs-installation-77") or s.startswith("eyJ") for s in held)
    said = redact(f"runner 4242 of installation 77: ghs-installation-77\n{pem}")
    assert said.startswith("runner 4242 of installation 77: ***") and "PRIVATE" not in said


@pytest.mark.parametrize("installation", ["CHANGE-ME", "0x4d", "-77", "7 7", "٧٧"])
def test_an_installation_id_that_is_not_a_number_is_refused_naming_the_key(
        installation: str) -> None:
    """Not a GitHub 404 at the token exchange: the Secret and its key, before any request."""
    pem, _ = _app_key()
    with pytest.raises(CredentialsError) as caught:
        credentials_from({"github_app_id": "4242", "github_app_private_key": pem,
                          "github_app_installation_id": installation},
                         "Secret ci-runners/github-app")
    message = str(caught.value)
    assert message.startswith("Secret ci-runners/github-app: key github_app_installation_id "
                              f"is {installation!r}, not a number"), message
    assert "leave the key out" in message and "BEGIN" not in message


def _on_clock(github: FakeGitHub, now: list[float]) -> GitHub:
    """A client of the fake's org whose clock is ``now[0]``."""
    return GitHub(Scope(f"{github.url}/api/v3", "orgs/acme"), Credentials(token=TOKEN),
                  monotonic=lambda: now[0])


def test_an_unchanged_list_is_asked_again_with_its_etags(github: FakeGitHub) -> None:
    """Each page is asked for with its ETag: an unchanged one is a 304 (not counted by GitHub
    against the rate limit), and only the changed page comes back whole."""
    now = [0.0]
    gh = _on_clock(github, now)
    github.add_runners((f"r-{n:03d}" for n in range(150)), ["l"])
    gh.runners(max_age=0)
    github.set_state("r-120", online=True, busy=True)  # on the second page
    now[0] += 60
    listed = gh.runners(max_age=0)
    assert github.not_modified == 1 and listed[github.by_name("r-120").id].busy  # type: ignore[union-attr]


def test_a_list_of_many_pages_is_reused_longer(github: FakeGitHub) -> None:
    """P pages are reused P × 3 s at least, whatever the reader asks: 1,200 requests an hour."""
    now = [0.0]
    gh = _on_clock(github, now)
    github.add_runners((f"r-{n:04d}" for n in range(2000)), ["l"])
    gh.runners(max_age=15)
    asked = github.count("GET", "/actions/runners$")
    now[0] += 59
    gh.runners(max_age=15)
    assert github.count("GET", "/actions/runners$") == asked  # 20 pages: reused 60 s
    now[0] += 1
    gh.runners(max_age=15)
    assert github.count("GET", "/actions/runners$") == asked + 20
    gh.runners(max_age=0)  # 0: read now
    assert github.count("GET", "/actions/runners$") == asked + 40


def test_a_client_made_again_takes_over_the_list(github: FakeGitHub) -> None:
    """Credentials are read again every 5 minutes, and a new client made: it keeps the list
    (and its age), the ETags and the rate limit last stated, so no list is read for that."""
    now = [0.0]
    scope = Scope(f"{github.url}/api/v3", "orgs/acme")
    old = GitHub(scope, Credentials(token=TOKEN), monotonic=lambda: now[0])
    old.register("r-1", ["l"], None)
    old.runners(max_age=0)
    asked = len(github.calls)
    new = GitHub(scope, Credentials(token=TOKEN), monotonic=lambda: now[0])
    new.take_over(old)
    now[0] += 30
    assert [r.name for r in new.runners(max_age=60).values()] == ["r-1"]
    assert len(github.calls) == asked
    other = GitHub(Scope(f"{github.url}/api/v3", "orgs/other"), Credentials(token=TOKEN))
    other.take_over(old)  # another scope: nothing to take
    assert other.runners(max_age=60) == {} and len(github.calls) == asked + 1


def test_a_list_handed_out_never_changes_under_its_reader(github: FakeGitHub) -> None:
    """Passes of several sets share one list while other passes unregister runners: a pass
    iterating the list it got (``registered``) must never see it change size under it
    ("dictionary changed size during iteration" crashed the pass). An unregistered runner
    leaves the lists handed out later, not those already handed out."""
    now = [0.0]
    gh = _on_clock(github, now)
    ids = [gh.register(f"r-{n}", ["l"], None).runner_id for n in range(3)]
    held = gh.runners(max_age=60)
    names = iter(held)
    next(names)  # a pass in the middle of iterating it
    gh.unregister(ids[0])  # another pass
    assert sorted(held) == ids and len(list(names)) == 2
    now[0] += 20
    later, age = gh.listed(max_age=60)  # the same list, reused, without the runner
    assert sorted(later) == ids[1:] and age == 20.0
    with pytest.raises(TypeError):
        later[ids[0]] = later[ids[1]]  # type: ignore[index]  # read-only


def test_a_secrets_wrong_app_key_names_the_secret_and_its_key() -> None:
    _, public = _app_key()
    other, _ = _app_key()  # a key, but of another App
    server = FakeGitHub(app=("4242", public)).start()
    try:
        creds = credentials_from({"github_app_id": "4242", "github_app_private_key": other,
                                  "github_app_installation_id": "77"}, "Secret ci-runners/gh")
        gh = GitHub(Scope(f"{server.url}/api/v3", "orgs/acme"), creds)
        with pytest.raises(CredentialsError) as caught:
            gh.register("a-1", ["l"], None)
    finally:
        server.stop()
    assert ("Secret ci-runners/gh: key github_app_private_key is not a private key of GitHub "
            "App 4242") in str(caught.value)
    assert "PRIVATE" not in str(caught.value)


@pytest.mark.parametrize(("path", "permission"), [
    pytest.param("orgs/acme", "the organization permission Self-hosted runners: Read and write",
                 id="org"),
    pytest.param("repos/acme/app", "the repository permission Administration: Read and write",
                 id="repo"),
])
def test_a_permission_missing_is_named(github: FakeGitHub, path: str, permission: str) -> None:
    """GitHub's 403 "Resource not accessible by integration" names no permission in its
    message, only in X-Accepted-GitHub-Permissions: the error says which to grant."""
    wanted = "organization_self_hosted_runners=write" if path.startswith("orgs") \
        else "administration=write"
    github.outage(403, message="Resource not accessible by integration",
                  headers={"X-Accepted-GitHub-Permissions": wanted})
    with pytest.raises(CredentialsError) as caught:
        client(github, path).register("a-1", ["l"], None)
    message = str(caught.value)
    assert "answered 403: Resource not accessible by integration" in message
    assert f"the credentials lack {permission}; GitHub asked for {wanted}" in message, message
