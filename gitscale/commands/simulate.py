"""`gitscale simulate`: what a policy would have cost, before going live.

Demand comes from a CSV trace, a seeded synthetic shape or the config repo's own history; each
set's policy from gitscale.yaml (or ``--policy``, repeatable, to compare several). Every policy
runs through the decision that `reconcile` runs and the controller's own rules; the baselines
and the oracle run on the same trace.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import click

from gitscale.commands import EXIT_OK, RepoOptions, option_time
from gitscale.config.load import load_config, load_preset
from gitscale.config.policies import build_policy
from gitscale.errors import ConfigError
from gitscale.core.policy import Policy
from gitscale.errors import InputError
from gitscale.simulate import trace as traces
from gitscale.simulate.report import Metrics, as_json, as_text, metrics
from gitscale.progress import Progress
from gitscale.simulate.harness import Outcome, Settings
from gitscale.simulate.strategies import BASELINES, run_all
from gitscale.timeutil import parse_duration, parse_time
from gitscale.config.schemas import check_schema
from gitscale.yamlio.read import load_single
from gitscale.webhooks.hold import default_hold

DEFAULT_SET = "default"
# seconds: the least `serve` takes (its MIN_WINDOW, MIN_RESERVATION, MIN_RESYNC)
MIN_WINDOW, MIN_RESERVATION, MIN_RESYNC = 1.0, 60.0, 10.0
MAX_HOURS = 24 * 28  # four weeks of synthetic jobs (a forecast's lookback, and a week more)
MAX_CLOCK_OFFSET = 3600.0  # seconds: --scaler-clock-offset beyond an hour is not skew to model


def simulate_command(*, repo: str | None, branch: str | None, config: str,
                     **options: Any) -> int:
    """`gitscale simulate` as its options come: without --repo it reads . when that has a
    gitscale.yaml (``repo_given`` False), else one set on the default preset."""
    return run_simulate(RepoOptions(repo or ".", branch, config), repo_given=repo is not None,
                        **options)


def run_simulate(opts: RepoOptions, *, trace: str | None, synthetic: str | None,
                 from_history: bool, seed: int, hours: float | None, since: str | None,
                 only: tuple[str, ...], policy: tuple[str, ...], interval: str,
                 sync_delay: str, sync_poll: str | None, pod_start: str, cold_cache: bool,
                 baselines: bool,
                 output: str, chart: str | None, repo_given: bool,
                 report_from: str | None = None, serve: bool = False, window: str = "10s",
                 reservation: str = "10m", resync: str = "5m", hold: str | None = None,
                 until: str | None = None, scaler_clock_offset: float = 0.0) -> int:
    if sum((trace is not None, synthetic is not None, from_history)) != 1:
        raise InputError("simulate", "give one of --trace FILE, --synthetic SHAPE or "
                         "--from-history")
    resync_s = 0.0 if resync.strip() == "0" or _seconds("--resync", resync) == 0 \
        else _seconds("--resync", resync, minimum=MIN_RESYNC)
    hold = hold if hold is not None else default_hold(bool(resync_s))  # serve's default
    settings = Settings(
        interval=_seconds("--interval", interval, minimum=1),
        sync_delay=_seconds("--sync-delay", sync_delay),
        sync_poll=_seconds("--sync-poll", sync_poll, minimum=1) if sync_poll else None,
        pod_start=_seconds("--pod-start", pod_start),
        job_memory=not cold_cache,
        window=_seconds("--window", window, minimum=MIN_WINDOW),
        reservation=_seconds("--reservation", reservation, minimum=MIN_RESERVATION),
        resync=resync_s,
        hold=0.0 if hold.strip() == "0" else _seconds("--hold", hold),
        scaler_clock_offset=_offset(scaler_clock_offset),
    )
    root = Path(opts.repo).expanduser()
    with ExitStack() as stack:
        if repo_given and _not_a_folder(opts.repo):
            # a URL or a bare repo: its gitscale.yaml and policies/ come from a clone
            from gitscale.repo.opening import open_workspace

            root = stack.enter_context(open_workspace(opts.repo, opts.branch,
                                                      writes=False)).root
        set_policies, total = _set_policies(opts, root, repo_given or from_history)
        tried = [(text, _policy(root, text)) for text in policy]
    configured = list(set_policies)
    if only:
        unknown = [name for name in only if name not in set_policies]
        if unknown:
            raise InputError("--set", f"unknown runner set {unknown[0]!r} (known: "
                             f"{', '.join(set_policies)})")
        set_policies = {name: set_policies[name] for name in only}

    if trace is not None:
        # Rows of a configured set that --set leaves out are skipped, not refused as unknown.
        job_trace = traces.only(traces.load_csv(Path(trace), next(iter(set_policies)),
                                                configured), set(set_policies), trace)
    elif synthetic is not None:
        if hours is None:
            hours = traces.WEEKLY_HOURS if synthetic == "weekly" else 4.0
        if not 0 < hours <= MAX_HOURS:
            raise InputError("--hours", f"{hours:g} is not between 0 and {MAX_HOURS}")
        job_trace = traces.synthetic(synthetic, seed=seed, hours=hours, sets=list(set_policies))
    else:
        job_trace = _from_history(opts, since, until, set(set_policies))
    if report_from is not None:
        settings = replace(settings, report_from=_report_from(report_from, job_trace))
    settings = replace(settings, max_total_replicas=total)
    used = set(job_trace.sets)
    candidates = _candidates(tried, {n: p for n, p in set_policies.items() if n in used})
    runs = len(candidates) * (2 if serve else 1) + (BASELINES if baselines else 0)
    with Progress("simulating", runs, show=output == "text") as bar:
        outcomes = run_all(job_trace, candidates, settings, baselines=baselines,
                           done=lambda name: bar.advance(), serve=serve)
    rows = metrics(outcomes, job_trace, settings.report_from)
    if chart:
        _chart(outcomes, rows, job_trace, Path(chart))
    click.echo(as_json(rows, job_trace, settings) if output == "json"
               else as_text(rows, job_trace, settings))
    return EXIT_OK


def _report_from(text: str, trace: traces.Trace) -> float:
    """``--report-from``: a duration into the trace, or a time within it."""
    try:
        if text.strip()[:1].isdigit() and "T" in text:
            seconds = (parse_time(text) - trace.start).total_seconds()
        else:
            seconds = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise InputError("--report-from", str(exc)) from None
    if not 0 <= seconds < trace.hours * 3600:
        raise InputError("--report-from", f"{text!r} is not within the trace (it starts "
                         f"{trace.start.isoformat()} and lasts {trace.hours:g} h)")
    return seconds


def _offset(seconds: float) -> float:
    """``--scaler-clock-offset``: seconds, either way, within ``MAX_CLOCK_OFFSET``."""
    if not math.isfinite(seconds) or abs(seconds) > MAX_CLOCK_OFFSET:
        raise InputError("--scaler-clock-offset", f"{seconds:g} is not a number of seconds "
                         f"between -{MAX_CLOCK_OFFSET:g} and {MAX_CLOCK_OFFSET:g}")
    return seconds


def _seconds(option: str, text: str, minimum: float = 0) -> float:
    try:
        value = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise InputError(option, str(exc)) from None
    if value < minimum:
        raise InputError(option, f"must be at least {minimum:g}s")
    return value


def _set_policies(opts: RepoOptions, root: Path,
                  required: bool) -> tuple[dict[str, Policy], int | None]:
    """Each set's policy from gitscale.yaml, and its ``limits.maxTotalReplicas``; without a
    config repo, one set on the default, and no limit."""
    if not required and not (root / opts.config).is_file():
        return {DEFAULT_SET: load_preset(root, "default", "--policy", None)}, None
    config = load_config(root, opts.config)
    return {s.name: s.policy for s in config.sets}, config.max_total_replicas


def _not_a_folder(repo: str) -> bool:
    """A URL or a bare repo path: nothing to read gitscale.yaml from without a clone."""
    from gitscale.repo import git
    from gitscale.repo.clone import is_url

    path = Path(repo).expanduser()
    return is_url(repo) or (path.is_dir() and git.is_bare(path))


def _candidates(given: Sequence[tuple[str, Policy]],
                set_policies: dict[str, Policy]) -> list[tuple[str, dict[str, Policy]]]:
    """The policies to compare: each set's own, or each ``--policy`` applied to every set."""
    if not given:
        return [("gitscale.yaml" if len(set_policies) > 1 or DEFAULT_SET not in set_policies
                 else "preset default", set_policies)]
    return [(text, {name: one for name in set_policies}) for text, one in given]


def _policy(root: Path, text: str) -> Policy:
    source = f"--policy {text!r}"
    if not text.lstrip().startswith("{"):
        return load_preset(root, text.strip(), source, None)
    document = load_single(text, source, ConfigError)
    if not isinstance(document.data, dict):
        raise ConfigError(source, "expected a mapping such as {buffer: 2, maxReplicas: 50}")
    check_schema(document, "POLICY", source, ConfigError)
    return build_policy(document.data, document, [], source)


def _from_history(opts: RepoOptions, since: str | None, until: str | None,
                  sets: set[str]) -> traces.Trace:
    from gitscale.record.history import oldest_first, read_history
    from gitscale.repo.opening import open_workspace

    start, end = option_time("--since", since), option_time("--until", until)
    if start and end and start > end:
        raise InputError("--since", f"{since} is after --until {until}")
    with open_workspace(opts.repo, opts.branch, history=True, writes=False) as ws:
        entries = read_history(ws.git)
    # oldest first: from_observations sorts by time, and commits of one second must keep
    # the order they were made in
    observed = [traces.Observation(parse_time(e.time), e.set, e.queued, e.running)
                for e in oldest_first(entries) if e.queued is not None and e.running is not None
                and e.set in sets]
    # (--until: a commit made with a clock years ahead would make the span too long)
    observed = [o for o in observed if (start is None or o.time >= start)
                and (end is None or o.time <= end)]
    return traces.from_observations(observed, "history")


def _chart(outcomes: Sequence[Outcome], rows: Sequence[Metrics], trace: traces.Trace,
           path: Path) -> None:
    from gitscale.simulate.chart import write_chart

    write_chart(outcomes, rows, trace, path)
