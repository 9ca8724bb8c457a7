"""The one HTTP client against real HTTP servers on loopback: pagination, ETags, rate limits,
failures, and a cause named for each way there can be no answer."""
from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import pytest

from gitscale.clients.errors import ApiError, RateLimited, Unreachable
from gitscale.clients.http import EtagCache, HttpClient, cache_file
from gitscale.files import default_cache_dir
from gitscale.timeutil import format_time

from tests.demand.conftest import BK_TOKEN, GH_TOKEN
from tests.controller.buildkite_fake import FakeBuildkite
from tests.demand.fake_github import FakeGitHub


def make_client(github: FakeGitHub, *, timeout: float = 5.0, retries: int = 2,
                sleeps: list[float] | None = None, max_wait: float = 0.0) -> HttpClient:
    """A client as the GitHub source builds one, its ETag cache in $GITSCALE_CACHE_DIR."""
    cache = EtagCache.load(cache_file(default_cache_dir(), github.url, "env=GH_TOKEN"))
    record = sleeps if sleeps is not None else []
    return HttpClient(name=f"github ({github.url})",
                      headers=lambda: {"Authorization": f"Bearer {os.environ['GH_TOKEN']}"},
                      cache=cache,
                      timeout=timeout, retries=retries, sleep=record.append, max_wait=max_wait)


def runs_url(github: FakeGitHub, repo: str = "acme/app") -> str:
    return f"{github.url}/repos/{repo}/actions/runs"


def add_runs(github: FakeGitHub, count: int, status: str = "queued",
             repo: str = "acme/app") -> None:
    if repo not in github.runs:
        github.add_repo(*repo.split("/"))
    for _ in range(count):
        github.add_run(repo, status, [(status, ["self-hosted"])])


def assert_clean_auth(github: FakeGitHub) -> None:
    """Every request carried the token as a Bearer header, and no URL carried it."""
    assert github.log
    for request in github.log:
        assert request.authorization == f"Bearer {GH_TOKEN}", request
        assert GH_TOKEN not in request.path


# -- pagination ---------------------------------------------------------------------------------
def test_link_pagination_is_followed_to_the_end(github: FakeGitHub) -> None:
    add_runs(github, 75)  # the server caps pages at 30: 30 + 30 + 15
    client = make_client(github)
    runs = client.paginate(runs_url(github), {"status": "queued", "per_page": 100},
                           "workflow_runs")
    assert len(runs) == 75 and len({r["id"] for r in runs}) == 75
    assert [r.query.get("page") for r in github.log] == [None, "2", "3"]
    assert all(r.query["per_page"] == "100" and r.query["status"] == "queued"
               for r in github.log)
    assert all(r.status == 200 for r in github.log)
    assert_clean_auth(github)


def test_per_page_is_honoured_below_the_cap(github: FakeGitHub) -> None:
    add_runs(github, 12)
    client = make_client(github)
    runs = client.paginate(runs_url(github), {"status": "queued", "per_page": 5},
                           "workflow_runs")
    assert len(runs) == 12
    assert [r.query.get("page") for r in github.log] == [None, "2", "3"]


def test_a_page_that_is_not_a_list_is_an_error_naming_the_url(github: FakeGitHub) -> None:
    add_runs(github, 1)
    client = make_client(github)
    with pytest.raises(ApiError) as caught:
        client.paginate(runs_url(github), {"status": "queued"}, "jobs")  # wrong key
    assert f"{runs_url(github)}?status=queued" in str(caught.value)
    assert "expected a list under 'jobs'" in str(caught.value)


# -- ETags --------------------------------------------------------------------------------------
def test_second_pass_revalidates_every_page_and_reuses_cached_bodies(github: FakeGitHub) -> None:
    add_runs(github, 70)
    add_runs(github, 3, "in_progress")
    first = make_client(github)
    queued = first.paginate(runs_url(github), {"status": "queued", "per_page": 100},
                            "workflow_runs")
    running = first.paginate(runs_url(github), {"status": "in_progress", "per_page": 100},
                             "workflow_runs")
    first.cache.save()
    first.close()
    files = list(default_cache_dir().glob("etags-*.json"))  # type: ignore[union-attr]
    assert len(files) == 1
    assert GH_TOKEN not in files[0].read_text()
    # keyed by the full URL: path and query, the page included
    keys = set(EtagCache.load(files[0]).entries)
    assert keys == {f"{github.url}{r.path}" for r in github.log}
    assert len(keys) == 4

    github.clear_log()
    second = make_client(github)  # a new process would load the same file
    assert second.paginate(runs_url(github), {"status": "queued", "per_page": 100},
                           "workflow_runs") == queued
    assert second.paginate(runs_url(github), {"status": "in_progress", "per_page": 100},
                           "workflow_runs") == running
    assert [r.status for r in github.log] == [304] * 4
    assert all(r.if_none_match for r in github.log)
    assert second.stats.not_modified == 4 and second.stats.requests == 4
    assert github.remaining == 5000 - 4  # 304s do not count against the limit
    assert_clean_auth(github)


def test_a_changed_page_is_fetched_again_and_the_cache_updated(github: FakeGitHub) -> None:
    add_runs(github, 2)
    client = make_client(github)
    url = runs_url(github)
    assert len(client.paginate(url, {"status": "queued"}, "workflow_runs")) == 2
    add_runs(github, 1)
    assert len(client.paginate(url, {"status": "queued"}, "workflow_runs")) == 3
    assert len(client.paginate(url, {"status": "queued"}, "workflow_runs")) == 3
    assert [r.status for r in github.log] == [200, 200, 304]


def test_a_304_page_follows_the_fresh_link_header(github: FakeGitHub) -> None:
    """Page 1 of an ascending list does not change when an item lands on a new page 2: its
    ETag stays, GitHub answers 304 with the new Link, and the client must follow it."""
    for i in range(30):
        github.add_repo("acme", f"r{i:02d}")
    client = make_client(github)
    url = f"{github.url}/orgs/acme/repos"
    assert len(client.paginate(url, {"per_page": 100}, "")) == 30
    github.add_repo("acme", "r30")
    repos = client.paginate(url, {"per_page": 100}, "")
    assert [r["full_name"] for r in repos][-1] == "acme/r30"
    assert [(r.status, r.query.get("page")) for r in github.log] == [
        (200, None), (304, None), (200, "2")]


def test_a_corrupt_cache_file_is_only_a_slower_pass(github: FakeGitHub) -> None:
    add_runs(github, 1)
    path = cache_file(default_cache_dir(), github.url, "env=GH_TOKEN")
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"http://x": ["W/\\"1\\""')  # cut short
    client = make_client(github)
    assert len(client.paginate(runs_url(github), {"status": "queued"}, "workflow_runs")) == 1
    assert [r.status for r in github.log] == [200]


def test_the_cache_file_is_readable_by_its_owner_only(github: FakeGitHub) -> None:
    """It holds private repos' run lists (names, branches, commit titles, actors)."""
    add_runs(github, 1)
    client = make_client(github)
    client.paginate(runs_url(github), {"status": "queued"}, "workflow_runs")
    client.cache.save()
    path = cache_file(default_cache_dir(), github.url, "env=GH_TOKEN")
    assert path is not None and path.is_file()
    assert os.stat(path).st_mode & 0o077 == 0


# -- rate limits --------------------------------------------------------------------------------
def test_403_with_no_remaining_requests_is_rate_limited_until_the_reset(
        github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.reset = int(time.time()) + 1800
    github.fail("ratelimit")
    client = make_client(github)
    with pytest.raises(RateLimited) as caught:
        client.paginate(runs_url(github), {"status": "queued"}, "workflow_runs")
    reset = datetime.fromtimestamp(github.reset, timezone.utc)
    assert caught.value.until == reset
    assert f"until {format_time(reset)}" in str(caught.value)
    assert "answered 403" in str(caught.value) and runs_url(github) in str(caught.value)
    assert len(github.log) == 1  # a rate limit is not retried
    assert GH_TOKEN not in str(caught.value)


def test_429_with_retry_after_is_rate_limited_for_that_long(github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.fail("secondary", retry_after=120)
    client = make_client(github)
    before = datetime.now(timezone.utc)
    with pytest.raises(RateLimited) as caught:
        client.get(runs_url(github), {"status": "queued"})
    until = caught.value.until
    assert until is not None
    assert before + timedelta(seconds=119) <= until <= before + timedelta(seconds=122)
    assert f"until {format_time(until)}" in str(caught.value)
    assert "answered 429" in str(caught.value)
    assert len(github.log) == 1


def test_a_plain_403_is_a_permission_error_not_a_rate_limit(github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.fail("forbidden")
    client = make_client(github)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert not isinstance(caught.value, RateLimited)
    assert "answered 403: Resource not accessible by integration" in str(caught.value)
    assert len(github.log) == 1


def test_bad_credentials_name_the_url_not_the_token(github: FakeGitHub,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    add_runs(github, 1)
    monkeypatch.setenv("GH_TOKEN", "ghp_WrongTokenWrongTokenWrongToken")
    client = make_client(github)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert "answered 401: Bad credentials" in str(caught.value)
    assert runs_url(github) in str(caught.value)
    assert "WrongToken" not in str(caught.value)
    assert len(github.log) == 1  # a 4xx is not retried


# -- server failures ----------------------------------------------------------------------------
def test_5xx_is_retried_with_backoff_then_an_error(github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.fail("error", status=502)
    sleeps: list[float] = []
    client = make_client(github, sleeps=sleeps)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert [r.status for r in github.log] == [502, 502, 502]
    assert sleeps == [0.2, 0.4]
    assert str(caught.value) == (f"github ({github.url}): GET {runs_url(github)}?status=queued "
                                 "answered 502 (after 3 tries)")


def test_a_5xx_then_a_good_answer_is_a_good_answer(github: FakeGitHub) -> None:
    add_runs(github, 2)
    github.fail("error", status=503, times=1)
    client = make_client(github)
    body = client.get(runs_url(github), {"status": "queued"}).body
    assert body["total_count"] == 2
    assert [r.status for r in github.log] == [503, 200]
    assert client.stats.retries == 1


def test_an_html_error_page_with_a_5xx_is_retried_then_an_error(github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.fail("error", status=503, html=True)
    client = make_client(github)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert f"GET {runs_url(github)}?status=queued answered 503" in str(caught.value)
    assert "<html" not in str(caught.value)


def test_an_html_page_instead_of_json_is_a_clear_error(github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.fail("html")
    client = make_client(github)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    message = str(caught.value)
    assert f"GET {runs_url(github)}?status=queued returned an HTML page" in message
    assert "status 200" in message and "<html" not in message


def test_truncated_json_is_a_clear_error(github: FakeGitHub) -> None:
    add_runs(github, 3)
    github.fail("truncated")
    client = make_client(github)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert f"GET {runs_url(github)}?status=queued returned invalid or truncated JSON" \
        in str(caught.value)
    assert runs_url(github) not in client.cache.entries  # nothing half-read is cached


def test_a_connection_cut_mid_body_is_retried_then_an_error(github: FakeGitHub) -> None:
    add_runs(github, 3)
    github.fail("cut")
    client = make_client(github, retries=1)
    with pytest.raises(ApiError) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert f"GET {runs_url(github)}?status=queued failed: " in str(caught.value)
    assert "(after 2 tries)" in str(caught.value)


def test_a_slow_server_times_out(github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.fail("slow", delay=1.5)
    client = make_client(github, timeout=0.3, retries=1)
    started = time.monotonic()
    with pytest.raises(Unreachable) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert time.monotonic() - started < 1.5
    host = github.url.removeprefix("http://")
    assert str(caught.value) == (f"github ({github.url}): GET {runs_url(github)}?status=queued "
                                 f"failed: timed out: no answer within 0.3s from {host} "
                                 "(after 2 tries)")


def test_a_slow_answer_within_the_timeout_is_fine(github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.fail("slow", delay=0.2, times=1)
    client = make_client(github, timeout=2.0)
    body = client.get(runs_url(github), {"status": "queued"}).body
    assert body["total_count"] == 1


@pytest.mark.parametrize("status,retry_after,seconds", [
    (403, None, 60),    # a secondary limit without retry-after: at least a minute (GitHub docs)
    (429, None, 60),
    (403, "30", 30),
])
def test_secondary_limits_without_a_reset_wait_as_github_says(
        status: int, retry_after: str | None, seconds: int, github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.reset = int(time.time()) + 3000  # not for secondary limits: requests remain
    github.fail("secondary", status=status, retry_after=retry_after)
    client = make_client(github)
    before = datetime.now(timezone.utc)
    with pytest.raises(RateLimited) as caught:
        client.get(runs_url(github), {"status": "queued"})
    until = caught.value.until
    assert until is not None
    assert before + timedelta(seconds=seconds - 1) <= until <= before + timedelta(seconds=seconds + 2)
    assert f"until {format_time(until)}" in str(caught.value)


def test_retry_after_as_an_http_date(github: FakeGitHub) -> None:
    add_runs(github, 1)
    github.fail("secondary", retry_after="Wed, 21 Oct 2065 07:28:00 GMT")
    client = make_client(github)
    with pytest.raises(RateLimited) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert caught.value.until == datetime(2065, 10, 21, 7, 28, tzinfo=timezone.utc)
    assert "until 2065-10-21T07:28:00Z" in str(caught.value)


@pytest.mark.parametrize("retry_after", ["1" + "0" * 20, "9" * 5000])
def test_an_absurd_retry_after_is_a_rate_limit_not_a_crash(github: FakeGitHub,
                                                           retry_after: str) -> None:
    add_runs(github, 1)
    github.fail("secondary", retry_after=retry_after)
    client = make_client(github)
    with pytest.raises(RateLimited) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert caught.value.until is not None  # past what a date can hold: the one-minute default


# -- the cache stays the size of what is polled --------------------------------------------------
def test_entries_unused_for_a_day_are_dropped_and_quiet_passes_write_nothing(
        github: FakeGitHub) -> None:
    add_runs(github, 2)
    client = make_client(github)
    client.get(runs_url(github), {"status": "queued"})
    client.cache.entries["http://gone/old-run/jobs"] = ('W/"1"', {"jobs": []})
    client.cache.used["http://gone/old-run/jobs"] = time.time() - 2 * 86_400
    client.cache.save()
    path = client.cache.path
    assert path is not None
    saved = EtagCache.load(path)
    assert list(saved.entries) == [f"{runs_url(github)}?status=queued"]

    before = path.stat().st_mtime_ns
    quiet = make_client(github)
    quiet.get(runs_url(github), {"status": "queued"})
    assert github.log[-1].status == 304
    quiet.cache.save()
    assert path.stat().st_mtime_ns == before  # nothing new to say: not rewritten


# -- a 304 without a Link header ------------------------------------------------------------------
def test_a_304_without_link_still_reads_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy (or a server) that leaves Link off its 304s: the cached page's links are used,
    so the pages after the first are still read (they were silently dropped)."""
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    with FakeGitHub(token=GH_TOKEN, link_on_304=False) as github:
        add_runs(github, 75)  # 30 + 30 + 15
        for attempt in range(3):  # cold, then twice warm from the cache file
            client = make_client(github)
            github.clear_log()
            runs = client.paginate(runs_url(github), {"status": "queued"}, "workflow_runs")
            assert len(runs) == 75, attempt
            assert [r.query.get("page") for r in github.log] == [None, "2", "3"]
            assert [r.status for r in github.log] == [200] * 3 if attempt == 0 else [304] * 3
            client.cache.save()
            client.close()


def test_a_cache_saved_without_links_revalidates_with_a_plain_get(github: FakeGitHub) -> None:
    """An entry from a cache file that did not keep links cannot trust a 304: no If-None-Match
    is sent for it, and the answer (with its Link) is cached for the next pass."""
    add_runs(github, 45)
    client = make_client(github)
    client.paginate(runs_url(github), {"status": "queued"}, "workflow_runs")
    client.cache.save()
    path = client.cache.path
    assert path is not None
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({k: v[:3] for k, v in raw.items()}))  # the old format
    github.clear_log()
    client = make_client(github)
    assert len(client.paginate(runs_url(github), {"status": "queued"}, "workflow_runs")) == 45
    assert [r.status for r in github.log] == [200, 200]
    github.clear_log()
    assert len(client.paginate(runs_url(github), {"status": "queued"}, "workflow_runs")) == 45
    assert [r.status for r in github.log] == [304, 304]


# -- a limit short enough is waited for; a longer one is reported, and nothing more is sent ----
def test_a_short_limit_is_waited_for_then_the_request_made_again(github: FakeGitHub) -> None:
    add_runs(github, 2)
    github.fail("secondary", retry_after=3, times=1)
    sleeps: list[float] = []
    client = make_client(github, sleeps=sleeps, max_wait=10)
    assert client.get(runs_url(github), {"status": "queued"}).body["total_count"] == 2
    assert [r.status for r in github.log] == [429, 200]
    assert len(sleeps) == 1 and 2 <= sleeps[0] <= 3


def test_a_limit_longer_than_the_wait_is_reported_and_nothing_more_is_sent(
        github: FakeGitHub) -> None:
    add_runs(github, 2)
    github.reset = int(time.time()) + 1800
    github.fail("ratelimit", times=1)
    sleeps: list[float] = []
    client = make_client(github, sleeps=sleeps, max_wait=10)
    with pytest.raises(RateLimited) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert sleeps == []
    reset = datetime.fromtimestamp(github.reset, timezone.utc)
    assert str(caught.value) == (
        f"github ({github.url}): rate limited until {format_time(reset)} (GET "
        f"{runs_url(github)}?status=queued answered 403); no request is sent before then")
    with pytest.raises(RateLimited):  # the limit has not lifted: the API is not asked again
        client.paginate(f"{github.url}/orgs/acme/repos", {"per_page": 100}, "")
    assert len(github.log) == 1


@pytest.mark.parametrize("fault,options", [
    # GitHub's clock 30 s behind this host's: the reset it names is past here, not there
    pytest.param("ratelimit", {}, id="x-ratelimit-reset-already-past-here"),
    pytest.param("secondary", {"retry_after": 0}, id="retry-after-0"),
    pytest.param("secondary", {"retry_after": "Wed, 21 Oct 2015 07:28:00 GMT"},
                 id="retry-after-a-past-date"),
])
@pytest.mark.parametrize("max_wait", [0.0, 10.0])
def test_a_limit_whose_stated_end_is_past_is_not_asked_again_at_once(
        github: FakeGitHub, fault: str, options: dict[str, object], max_wait: float) -> None:
    """The API refuses, yet the end it states has passed by this host's clock: that end says
    nothing, and the request is not sent again at once (it was, in a loop without end, for as
    long as the API refused: GitHub may ban a client that keeps asking while limited). It is
    waited for as a limit that states nothing: a minute (GitHub's docs)."""
    add_runs(github, 1)
    github.reset = int(time.time()) - 30
    github.fail(fault, times=20, **options)
    sleeps: list[float] = []
    client = make_client(github, sleeps=sleeps, max_wait=max_wait)
    before = datetime.now(timezone.utc)
    with pytest.raises(RateLimited) as caught:
        client.get(runs_url(github), {"status": "queued"})
    assert len(github.log) == 1 and sleeps == []
    until = caught.value.until
    assert until is not None
    assert before + timedelta(seconds=59) <= until <= before + timedelta(seconds=62)
    with pytest.raises(RateLimited):  # nothing more is sent before then
        client.get(runs_url(github), {"status": "queued"})
    assert len(github.log) == 1


def test_a_limit_that_has_lifted_lets_requests_through_again(github: FakeGitHub) -> None:
    add_runs(github, 1)
    client = make_client(github)
    github.fail("secondary", retry_after=1, times=1)
    with pytest.raises(RateLimited):
        client.get(runs_url(github), {"status": "queued"})
    time.sleep(1.1)
    assert client.get(runs_url(github), {"status": "queued"}).body["total_count"] == 1
    assert [r.status for r in github.log] == [429, 200]


def test_buildkites_limit_lifts_after_ratelimit_reset_seconds() -> None:
    """Buildkite's REST API: 429, ``RateLimit-Remaining: 0`` and ``RateLimit-Reset`` in
    seconds from now (not an epoch, as GitHub's ``x-ratelimit-reset`` is)."""
    buildkite = FakeBuildkite(BK_TOKEN).start()
    buildkite.limited_for = 42
    client = HttpClient(name="buildkite", headers=lambda: {"Authorization": f"Bearer {BK_TOKEN}"})
    before = datetime.now(timezone.utc)
    try:
        with pytest.raises(RateLimited) as caught:
            client.get(f"{buildkite.url}/v2/organizations/acme/agents")
    finally:
        buildkite.stop()
    until = caught.value.until
    assert until is not None
    assert before + timedelta(seconds=41) <= until <= before + timedelta(seconds=44)
    assert "answered 429" in str(caught.value) and BK_TOKEN not in str(caught.value)


# -- which methods are retried ---------------------------------------------------------------------
def test_a_delete_is_retried_on_a_5xx_and_a_post_is_not(github: FakeGitHub) -> None:
    github.fail("error", status=502)
    sleeps: list[float] = []
    client = make_client(github, sleeps=sleeps)
    with pytest.raises(ApiError) as post:
        client.request("POST", f"{github.url}/app/installations/1/access_tokens")
    assert post.value.status == 502 and "(after" not in str(post.value)
    with pytest.raises(ApiError) as delete:
        client.request("DELETE", f"{github.url}/orgs/acme/actions/runners/5")
    assert str(delete.value).endswith("answered 502 (after 3 tries)")
    assert len(sleeps) == 2
