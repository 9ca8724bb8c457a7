"""A rejected delivery is logged: the first of each kind at once, then at most one line per
kind and interval, counting the others; never the body, a signature or the secret."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from gitscale.webhooks.delivery import Rejected, RejectionLog, parse, verify
from gitscale.timeutil import utcnow
from tests.helpers import REFERENCE

PAYLOADS = REFERENCE / "payloads"


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


BAD = Rejected(401, "bad signature")
MISSING = Rejected(401, "missing X-Hub-Signature-256")


def rejected(call: object) -> Rejected:
    with pytest.raises(Rejected) as info:
        call()  # type: ignore[operator]
    return info.value


def test_the_first_rejection_of_each_kind_is_logged_at_once() -> None:
    log = RejectionLog(every=60, clock=Clock())
    assert log.note(BAD, "d-1") == "rejected webhook delivery d-1: 401 bad signature"
    assert log.note(MISSING, "d-2") == \
        "rejected webhook delivery d-2: 401 missing X-Hub-Signature-256"
    assert log.note(rejected(lambda: parse(b"{not json", utcnow())), None) == (
        "rejected webhook delivery (no X-GitHub-Delivery): 400 not a workflow_job payload "
        "(the body is not JSON: Expecting property name enclosed in double quotes at line 1 "
        "column 2)")


def test_a_flood_is_one_line_per_kind_and_interval_with_a_count() -> None:
    clock = Clock()
    log = RejectionLog(every=60, clock=clock)
    assert log.note(BAD, "d-0") == "rejected webhook delivery d-0: 401 bad signature"
    lines = [log.note(BAD, f"d-{i}") for i in range(1, 1001)]
    assert lines == [None] * 1000
    # another kind has its own interval
    assert log.note(MISSING, "other") == ("rejected webhook delivery other: 401 missing "
                                          "X-Hub-Signature-256")
    clock.now += 59.9
    assert log.flush() == [] and log.note(BAD, "d-1001") is None
    clock.now += 0.1
    assert log.note(BAD, "d-1002") == (
        "rejected webhook delivery d-1002: 401 bad signature (and 1001 more like it in the "
        "last 60 s, not logged one by one)")
    assert log.note(BAD, "d-1003") is None


def test_flush_tells_a_flood_that_stopped() -> None:
    clock = Clock()
    log = RejectionLog(every=60, clock=clock)
    log.note(BAD, "d-0")
    for i in range(5):
        log.note(BAD, f"d-{i}")
    clock.now += 30
    assert log.flush() == []
    assert log.flush(everything=True) == [
        "rejected 5 more webhook deliveries: 401 bad signature (since 30 s ago)"]
    assert log.flush(everything=True) == []  # told once
    log.note(BAD, "d-6")
    clock.now += 60
    assert log.flush() == ["rejected 1 more webhook deliveries: 401 bad signature (since 60 s ago)"]


@pytest.mark.parametrize(("delivery", "shown"), [
    pytest.param("72d3162e-cc78-11e3-81ab-4c9367dc0958", "72d3162e-cc78-11e3-81ab-4c9367dc0958",
                 id="guid"),
    pytest.param("a b\tc<d>", "a?b?c?d?", id="cleaned"),
    pytest.param("x" * 500, "x" * 64 + "…", id="cut"),
    pytest.param("", "(no X-GitHub-Delivery)", id="empty"),
])
def test_the_delivery_id_is_cut_and_cleaned(delivery: str, shown: str) -> None:
    line = RejectionLog(clock=Clock()).note(BAD, delivery)
    assert line == f"rejected webhook delivery {shown}: 401 bad signature"


def test_no_line_holds_the_body_the_signature_or_the_secret() -> None:
    secret, body = b"s3cret-key", b'{"action": "queued", "marker": "\xff-body-marker"}'
    lines = [RejectionLog(clock=Clock()).note(rejected(call), f"d-{i}") for i, call in enumerate([
        lambda: verify(secret, body, "sha256=" + "ab" * 32),
        lambda: parse(body, utcnow()),
        lambda: parse(b'{"action": "body-marker"}', utcnow())], 1)]
    assert lines[1] == ("rejected webhook delivery d-2: 400 not a workflow_job payload "
                        "(the body is not JSON: not UTF-8 text)")  # a byte is not quoted
    assert lines[2] == ("rejected webhook delivery d-3: 400 not a workflow_job payload "
                        "(workflow_job is missing)")
    for line in lines:
        assert line is not None
        assert "marker" not in line and "abab" not in line and "s3cret" not in line


@pytest.mark.parametrize("job_id", [10 ** 400, 2 ** 63, 0, -1, True, "42", 4.5])
def test_a_job_id_outside_githubs_range_is_refused(job_id: object) -> None:
    """GitHub's job ids are int64: 10**400 was accepted and written to the reservations file."""
    body = json.dumps({"action": "queued", "workflow_job": {"id": job_id, "labels": []},
                       "repository": {"full_name": "o/r"}}).encode()
    refused = rejected(lambda: parse(body, utcnow()))
    assert refused.status == 400 and "workflow_job.id is not a job id" in str(refused)
    assert str(10 ** 400)[:30] not in str(refused)


def test_the_largest_job_id_is_taken() -> None:
    body = json.dumps({"action": "queued", "workflow_job": {"id": 2 ** 63 - 1, "labels": []},
                       "repository": {"full_name": "o/r"}}).encode()
    event = parse(body, utcnow())
    assert event is not None and event.job == 2 ** 63 - 1


@pytest.mark.parametrize(("body", "detail"), [
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "JSON nested too deep", id="nested-list"),
    pytest.param(b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "JSON nested too deep",
                 id="nested-object"),
    pytest.param(b'{"action": "queued", "workflow_job": {"id": 1, "labels": [null, {"a": 1}]},'
                 b' "repository": {"full_name": "o/r"}}',
                 "workflow_job.labels is not a list of strings", id="labels-not-strings"),
])
def test_a_payload_that_is_not_a_job_is_a_400_not_a_crash(body: bytes, detail: str) -> None:
    """Nesting deeper than the parser goes was a RecursionError: a 500 and a traceback."""
    refused = rejected(lambda: parse(body, utcnow()))
    assert refused.status == 400 and str(refused) == f"not a workflow_job payload ({detail})"


def payload(**changes: object) -> bytes:
    """A queued job's payload with ``changes`` (``workflow_job__labels=...``: a job field;
    ``None``… as the value; ``ABSENT``: the key left out)."""
    body: dict[str, object] = {"action": "queued", "workflow_job": {
        "id": 7, "status": "queued", "labels": ["self-hosted", "linux"]},
        "repository": {"full_name": "o/r"}}
    for key, value in changes.items():
        where, _, name = key.rpartition("__")
        target = body[where] if where else body
        assert isinstance(target, dict)
        if value is ABSENT:
            del target[name]
        else:
            target[name] = value
    return json.dumps(body).encode()


ABSENT = object()


@pytest.mark.parametrize(("body", "detail"), [
    pytest.param(payload(workflow_job__labels=None), "workflow_job.labels is not a list of "
                 "strings", id="labels-null"),
    pytest.param(payload(workflow_job__labels=ABSENT), "workflow_job.labels is missing",
                 id="labels-missing"),
    pytest.param(payload(workflow_job__labels=""), "workflow_job.labels is not a list of "
                 "strings", id="labels-empty-string"),
    pytest.param(payload(workflow_job__labels={}), "workflow_job.labels is not a list of "
                 "strings", id="labels-object"),
    pytest.param(payload(workflow_job__labels="linux"), "workflow_job.labels is not a list of "
                 "strings", id="labels-string"),
    pytest.param(payload(workflow_job=None), "workflow_job is not an object", id="job-null"),
    pytest.param(payload(workflow_job=ABSENT), "workflow_job is missing", id="job-missing"),
    pytest.param(payload(workflow_job__id=ABSENT), "workflow_job.id is missing",
                 id="id-missing"),
    pytest.param(payload().replace(b'"id": 7', b'"id": ' + b"9" * 5000), "workflow_job.id is not a job id: "
                 "an integer from 1 to 9223372036854775807", id="id-5000-digits"),
    pytest.param(payload(repository=ABSENT), "repository is missing", id="repository-missing"),
    pytest.param(payload(repository=[]), "repository is not an object", id="repository-list"),
    pytest.param(payload(repository={"full_name": 5}), "repository.full_name is not a string",
                 id="full-name-number"),
    pytest.param(payload(action=ABSENT), "action is missing", id="action-missing"),
    pytest.param(payload(action=["queued"]), "action is not a string", id="action-list"),
    pytest.param(b"[1, 2]", "the body is not a JSON object", id="a-list"),
    pytest.param(b"null", "the body is not a JSON object", id="null"),
    pytest.param(b'{"action": "\\q"}', "the body is not JSON: Invalid \\escape at line 1 "
                 "column 13", id="bad-escape"),
])
def test_a_malformed_payload_is_said_in_the_payloads_terms(body: bytes, detail: str) -> None:
    """A job without a list of labels was taken as one without labels, which every set
    matches: a runner reserved for it (the polling source refuses such a job). And the 400
    showed Python's internals: `(TypeError: 'NoneType' object is not subscriptable)`,
    `(KeyError: 'workflow_job')`, `(ValueError: Exceeds the limit (4300 digits)…`."""
    refused = rejected(lambda: parse(body, utcnow()))
    assert (refused.status, str(refused)) == (400, f"not a workflow_job payload ({detail})")
    for internal in ("Error", "object is not", "'", "limit"):
        assert internal not in detail.replace("\\escape", "")


def test_empty_labels_are_a_list_and_taken() -> None:
    event = parse(payload(workflow_job__labels=[]), utcnow())
    assert event is not None and event.labels == ()


@pytest.mark.parametrize("name", sorted(p.name for p in PAYLOADS.glob("*.payload.json")))
def test_githubs_payloads_are_all_accepted(name: str) -> None:
    """GitHub's own examples (fixtures/reference/payloads) keep parsing as what they are."""
    raw = (PAYLOADS / name).read_bytes()
    event = parse(raw, utcnow())
    job = json.loads(raw)["workflow_job"]
    assert event is not None and event.job == job["id"]
    assert event.labels == tuple(job["labels"]) and event.repo == json.loads(raw)[
        "repository"]["full_name"]
