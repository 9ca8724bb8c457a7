"""The ids of a Buildkite queue's jobs, beside the metrics API's counts (``jobIds:``, opt-in).

The metrics API gives counts only, and the scaler cannot tell from counts which jobs arrived and
which completed since its last write: under saturation every change then costs a commit
(README, "Scaling semantics"). With ``jobIds`` the source also asks Buildkite's GraphQL API for
the uuids of the queue's command jobs (``QueueJobs`` in ``gitscale.clients.buildkite``) and
gives each set the ids of the jobs its counts count: ``SCHEDULED`` for the scheduled ones,
``ASSIGNED``/``ACCEPTED``/``RUNNING`` and the two states a job still holds its agent in
(``CANCELING``, ``TIMING_OUT``) for the running ones, and ``WAITING`` when the set counts
waiting jobs (``countWaiting: true``). The counts stay the metrics API's.

Ids are used only when they are safe to use. Fewer ids than jobs counted would make a later
pass take arrivals for jobs it already gave a runner (and skip a write that waiting jobs need),
so then, and whenever the ids cannot be read (no answer, a refusal, a rate limit, a GraphQL
``errors`` answer, a page of another shape, more pages than the bound, a metrics answer
without the organization's slug), the pass decides on the counts alone for those sets, as the
source does without ``jobIds``, and says so on stderr (naming the source, never the token).
The one exception to saying so: fewer ids than jobs counted on a pass right after one whose
ids matched is a job that came or went between the two reads, which a busy queue in a loop
sees now and then; it is said when it happens on two passes in a row (a wrong cluster, a
token that cannot see the pipelines: every pass), or on a run's only pass.
Counts alone are never a guess: they err towards writing (any change may be a new job), and
failing the reading instead would leave the sets untouched, so a GraphQL outage would stop a
queue from scaling up at all. More ids than counted (a job the metrics API does not count as
running) only make writes likelier. A ``jobIds.token`` that cannot be read is a configuration
error, as an unreadable agent token is: the sets' reading fails (exit 1).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable


from gitscale.clients.buildkite import QueueJobs
from gitscale.clients.errors import ApiError
from gitscale.config.load import RunnerSetConfig
from gitscale.config.sources import BuildkiteJobIds
from gitscale.core.model import Demand
from gitscale.demand import warner
from gitscale.demand.refused import is_refusal, refusal

SCHEDULED = ("SCHEDULED",)
RUNNING = ("ASSIGNED", "ACCEPTED", "RUNNING", "CANCELING", "TIMING_OUT")
WAITING = ("WAITING",)
# A setup has three Buildkite tokens (agent, REST, GraphQL): say which one was refused, and what
# it must be (an agent token given here is the likely mistake).
REFUSED = ("the GraphQL API takes an API access token with GraphQL API access (Personal "
           "Settings > API Access Tokens), not an agent token, and refuses a revoked one; its "
           "user must see the queue's pipelines")


def counted_states(count_waiting: bool) -> tuple[str, ...]:
    """The job states whose jobs a set's counts count."""
    return SCHEDULED + RUNNING + (WAITING if count_waiting else ())


def organization_of(body: Any) -> str | None:
    """The organization's slug the metrics answer names (``organization.slug``)."""
    organization = body.get("organization") if isinstance(body, dict) else None
    slug = organization.get("slug") if isinstance(organization, dict) else None
    return slug if isinstance(slug, str) and slug else None


def with_ids(demand: Demand, jobs: dict[str, str], count_waiting: bool) -> Demand | str:
    """``demand`` with the ids of ``jobs`` (uuid → state) it counts, or why they cannot be
    used: fewer than the jobs it counts."""
    wanted = counted_states(count_waiting)
    ids = frozenset(uuid for uuid, state in jobs.items() if state in wanted)
    if len(ids) < demand.assigned:
        return (f"the GraphQL API lists {len(ids)} job(s) in {', '.join(wanted)}, the metrics "
                f"API counts {demand.assigned} (a job that came between the two reads, or "
                "jobs the query does not see: is jobIds.cluster the queue's cluster?)")
    return replace(demand, jobs=ids)


class JobIdReader:
    """One queue's job ids, added to the demands its metrics gave. Kept across passes by a
    loop (``Sources``), so that it knows whether the last pass's ids matched its counts."""

    def __init__(self, client: QueueJobs, settings: BuildkiteJobIds, queue: str,
                 report: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.settings = settings
        self.queue = queue
        self.report = report or warner(None)
        self.matched: set[str] = set()  # the sets whose ids matched their counts last pass

    def save(self) -> None:
        """(Kept by ``Sources`` beside its client, which saves and closes itself.)"""

    def close(self) -> None:
        """(See ``save``.)"""

    def add(self, body: Any, sets: list[RunnerSetConfig], demands: dict[str, Demand]) -> None:
        """Give each of ``sets`` (their demands from the metrics ``body``) its jobs' ids, or
        leave it counts-only and say why."""
        names = [s.name for s in sets if s.name in demands]
        if not names:
            return
        organization = organization_of(body)
        if organization is None:
            self._fallback(names, "the metrics answer names no organization.slug to ask the "
                                  "GraphQL API about")
            return
        waiting = any(s.source.settings.count_waiting for s in sets)
        try:
            jobs = self.client.jobs(organization, self.queue, counted_states(waiting),
                                    self.settings.cluster)
        except ApiError as exc:
            self._fallback(names, str(refusal(
                "Buildkite", "jobIds.token", self.settings.token, exc, self.client.http.name,
                REFUSED, article="")) if is_refusal(exc) else str(exc))
            return
        for runner_set in sets:
            if runner_set.name not in demands:
                continue
            found = with_ids(demands[runner_set.name], jobs,
                             runner_set.source.settings.count_waiting)
            if isinstance(found, str):
                if runner_set.name not in self.matched:  # (else a race: said if it repeats)
                    self._fallback([runner_set.name], found)
                self.matched.discard(runner_set.name)
            else:
                demands[runner_set.name] = found
                self.matched.add(runner_set.name)

    def _fallback(self, names: list[str], why: str) -> None:
        self.report(f"buildkite: queue {self.queue} (jobIds): job ids not used this pass, "
                    f"set(s) {', '.join(names)} decided on the metrics API's counts alone: "
                    f"{why}")
