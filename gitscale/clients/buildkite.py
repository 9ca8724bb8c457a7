"""Buildkite's three APIs, on the one HTTP client (``http.py``).

- ``Metrics``: the agent metrics API, ``GET {apiUrl}/metrics/queue?name=QUEUE`` with
  ``Authorization: Token <agent token>`` — a queue's scheduled, running and waiting jobs, and
  the ``Buildkite-Agent-Metrics-Poll-Duration`` header (the demand source);
- ``Agents``: the REST API's ``GET /v2/organizations/{org}/agents`` with a bearer REST API
  token (scope ``read_agents``) — the *connected* agents, each with the ``job`` it runs, paged
  by ``Link: rel="next"`` (the controller);
- ``QueueJobs``: the GraphQL API (``POST https://graphql.buildkite.com/v1``) with a bearer API
  access token (GraphQL API access; read-only is enough) — the uuid and state of a queue's
  command jobs, ``organization.jobs(state:, type: [COMMAND], agentQueryRules: ["queue=Q"],
  cluster:|clustered: false, first:, after:)``, paged by ``pageInfo.hasNextPage/endCursor``
  (the demand source's job ids, opt-in).

Rate limits (429 with ``RateLimit-Reset``) and errors are the HTTP client's.

A GraphQL answer is checked here: an ``errors`` array (GraphQL answers most failures with HTTP
200), a null organization (an unknown slug, or one the token cannot see), a page of another
shape (more than the ``JOB_PAGE`` jobs asked for, a uuid longer than ``UUID_CHARS``), or
more than ``JOB_PAGES_MAX`` pages is an ``ApiError`` naming the URL and the organization,
never the token.

https://buildkite.com/docs/apis/agent-api/metrics, https://buildkite.com/docs/apis/rest-api/agents,
https://buildkite.com/docs/apis/graphql-api
"""
from __future__ import annotations

import base64
import time
from typing import Any, Callable, Sequence

from gitscale.clients.answers import DETAIL_CHARS, Answer
from gitscale.clients.errors import ApiError
from gitscale.clients.http import EtagCache, HttpClient
from gitscale.redact import redact

AGENT_PAGES_MAX = 50  # 5,000 connected agents: a bound on one listing
JOB_PAGE = 100  # jobs a GraphQL page asks for (agent-stack-k8s' default): ~100 points each
JOB_PAGES_MAX = 20  # 2,000 jobs of one queue: a bound on one pass's id query
UUID_CHARS = 64  # a job's uuid is 36 characters; a longer one is not Buildkite's
# ``cluster`` is the cluster's GraphQL ID; without one, only jobs outside every cluster
QUERY = """query GitscaleQueueJobs($slug: ID!, $rules: [String!], $states: [JobStates!],
 $first: Int, $after: String%s) {
  organization(slug: $slug) {
    jobs(state: $states, type: [COMMAND], agentQueryRules: $rules, first: $first,
     after: $after, %s) {
      edges { node { ... on JobTypeCommand { uuid state } } }
      pageInfo { hasNextPage endCursor }
    }
  }
}"""
# A token, or what gives the current one (asked before every request: a rotated token file
# is picked up). With ``refused``, a request refused (401/403) is sent once more when the
# token, read again, has changed.
Token = str | Callable[[], str]


def _value(token: Token) -> str:
    return token if isinstance(token, str) else token()


class Metrics:
    """The agent metrics API of one ``apiUrl`` (``https://agent.buildkite.com/v3``) and token."""

    def __init__(self, api_url: str, token: Token, *, cache: EtagCache | None = None,
                 timeout: float = 10.0, transport: Any = None,
                 refused: Callable[[int], Any] | None = None) -> None:
        self.api = api_url.rstrip("/")
        self.http = HttpClient(name=f"buildkite ({self.api})",
                               headers=lambda: {"Authorization": f"Token {_value(token)}"},
                               refused=refused, cache=cache, timeout=timeout,
                               transport=transport)

    def close(self) -> None:
        self.http.close()

    def save(self) -> None:
        self.http.save()

    def queue(self, name: str) -> Answer:
        """The queue's metrics: the JSON body and the headers (the poll duration)."""
        return self.http.get(f"{self.api}/metrics/queue", {"name": name})


class Agents:
    """The REST API's agents of one organization, with one API token."""

    def __init__(self, api_url: str, organization: str, token: str, *, timeout: float = 15.0,
                 retries: int = 0, max_wait: float = 0.0, transport: Any = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = f"{api_url.rstrip('/')}/v2/organizations/{organization}/agents"
        self.http = HttpClient(name=f"buildkite ({api_url.rstrip('/')})",
                               headers=lambda: {"Authorization": f"Bearer {token}"},
                               timeout=timeout, retries=retries, max_wait=max_wait,
                               transport=transport, sleep=sleep)

    def close(self) -> None:
        self.http.close()

    def connected(self) -> list[Any]:
        """Every connected agent (Buildkite lists no other), as its JSON object."""
        return self.http.paginate(self.url, {"per_page": 100}, "", limit=AGENT_PAGES_MAX)


class QueueJobs:
    """A queue's command jobs from the GraphQL API of one URL and API access token."""

    def __init__(self, url: str, token: Token, *, timeout: float = 10.0,
                 transport: Any = None, refused: Callable[[int], Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.http = HttpClient(name=f"buildkite GraphQL ({self.url})",
                               headers=lambda: {"Authorization": f"Bearer {_value(token)}"},
                               refused=refused, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def save(self) -> None:
        """Nothing to keep (a POST is not cached)."""

    def jobs(self, organization: str, queue: str, states: Sequence[str],
             cluster: str | None = None) -> dict[str, str]:
        """uuid → state of every command job of ``queue`` in ``states``, every page read."""
        variables: dict[str, Any] = {"slug": organization, "rules": [f"queue={queue}"],
                                     "states": list(states), "first": JOB_PAGE, "after": None}
        if cluster is None:
            query = QUERY % ("", "clustered: false")
        else:
            query = QUERY % (", $cluster: ID", "cluster: $cluster")
            variables["cluster"] = base64.b64encode(f"Cluster---{cluster}".encode()).decode()
        where = f"POST {self.url} (organization {organization}, queue {queue})"
        found: dict[str, str] = {}
        for _ in range(JOB_PAGES_MAX):
            body = self.http.request("POST", self.url,
                                     json={"query": query, "variables": variables}).body
            connection = self._connection(body, where)
            edges = connection.get("edges")
            if not isinstance(edges, list):
                raise self._fail(f"{where}: jobs.edges is not a list")
            if len(edges) > JOB_PAGE:  # more than asked for: not a page the bound bounds
                raise self._fail(f"{where}: a page of {len(edges):,} jobs; asked for "
                                 f"{JOB_PAGE}")
            for edge in edges:
                node = edge.get("node") if isinstance(edge, dict) else None
                uuid = node.get("uuid") if isinstance(node, dict) else None
                state = node.get("state") if isinstance(node, dict) else None
                if not isinstance(uuid, str) or not uuid or not isinstance(state, str):
                    raise self._fail(f"{where}: a job without a uuid and a state")
                if len(uuid) > UUID_CHARS:
                    raise self._fail(f"{where}: a job uuid of {len(uuid):,} characters "
                                     f"(Buildkite's have 36)")
                found[uuid] = state
            page = connection.get("pageInfo")
            if not isinstance(page, dict) or not isinstance(page.get("hasNextPage"), bool):
                raise self._fail(f"{where}: no pageInfo.hasNextPage")
            if not page["hasNextPage"]:
                return found
            if not isinstance(page.get("endCursor"), str):
                raise self._fail(f"{where}: a next page without an endCursor")
            variables["after"] = page["endCursor"]
        raise self._fail(f"{where}: more than {JOB_PAGES_MAX} pages of {JOB_PAGE} jobs")

    def _connection(self, body: Any, where: str) -> dict[str, Any]:
        """``data.organization.jobs`` of an answer, or why it has none."""
        if not isinstance(body, dict):
            raise self._fail(f"{where}: the answer is not a GraphQL response object")
        errors = body.get("errors")
        if errors:
            first = errors[0] if isinstance(errors, list) and errors else errors
            said = first.get("message") if isinstance(first, dict) else None
            # masked before it is cut: a secret cut in half would not be found
            text = redact(str(said)[:20 * DETAIL_CHARS], self.http.credentials())[
                :DETAIL_CHARS] if said else "(no message)"
            count = len(errors) if isinstance(errors, list) else 1
            raise self._fail(f"{where}: the answer has {count} GraphQL error(s): {text}")
        data = body.get("data")
        organization = data.get("organization") if isinstance(data, dict) else None
        if organization is None and isinstance(data, dict) and "organization" in data:
            raise self._fail(f"{where}: no such organization, or the token cannot see it")
        jobs = organization.get("jobs") if isinstance(organization, dict) else None
        if not isinstance(jobs, dict):
            raise self._fail(f"{where}: the answer has no data.organization.jobs object")
        return jobs

    def _fail(self, message: str) -> ApiError:
        return ApiError(redact(f"{self.http.name}: {message}", self.http.credentials()),
                        method="POST", url=self.url, status=200)

