"""Command-line wiring only: options → a command function → an exit code."""
from __future__ import annotations

import gc
import math
import sys
from typing import Any, Callable

import click

from gitscale import __version__
from gitscale.commands import EXIT_ERROR, EXIT_INTERRUPTED, RepoOptions, begun, collector_off
from gitscale.config import DEFAULT_CONFIG
from gitscale.errors import GitscaleError

# Each command imports its module when it runs (`--version` none, `--help` only the help text
# of commands/helptext.py): a pass pays for what it uses, not for every command's dependencies
# (tests/test_cli_imports.py).

# What --branch means to each command.
# In a checkout (--repo's default, .) the branch is the one checked out: --branch may only
# repeat it. Only a URL or a bare repository is read at its default branch.
_DEFAULT = ("(default: a URL's or bare repo's default branch; in a checkout, the one checked "
            "out, which --branch may only repeat).")
BRANCH_READ = f"Branch to read {_DEFAULT}"
BRANCH_WRITE = f"Branch to read and commit to {_DEFAULT}"
BRANCH_HISTORY = f"Branch whose scaling commits to read {_DEFAULT}"


def a_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A file option given as "" (``--demand "$DEMAND"`` with the variable unset) is a
    mistake to say, not the option left out: the sources would be read instead of the file."""
    if value == "":
        from gitscale.errors import InputError

        raise InputError(f"--{param.name}", "is empty: give a file's path, or leave the "
                         "option out")
    return value


# What an option given as "" should have been, by the option's name.
_GIVEN = {"repo": "give the config repo (a checkout, a bare repo or a URL)",
          "branch": "give a branch's name"}


def given(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--repo`` and ``--branch`` given as "" (``--branch "$BRANCH"`` with the variable
    unset): an error, as for a file option (``a_path``), not the option left out — which
    committed to the remote's default branch, or worked on the current directory."""
    if value == "":
        from gitscale.errors import InputError

        raise InputError(f"--{param.name}", f"is empty: {_GIVEN[str(param.name)]}, or leave "
                         "the option out")
    return value


# Options several commands take, alike.
DEMAND = click.option("--demand", type=str, callback=a_path,
                      help="Demand file replacing every source; - reads standard input "
                           "(a pipe, as <(…), is read once too).")
EVERY = click.option("--every", default=None, metavar="DURATION",
                     help="How often this runs (a cron's period, e.g. 5m): a forecast's cushion "
                          "must serve until the next run. Default 1m.")
NO_PUSH = click.option("--no-push", "no_push", is_flag=True,
                       help="Commit in the checkout, do not push.")


def repo_options(branch: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--repo, --branch (``branch``: what the command does with it) and --config."""

    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        func = click.option("--config", default=DEFAULT_CONFIG, show_default=True,
                            callback=a_path,
                            help="Config file, relative to the repo root.")(func)
        func = click.option("--branch", default=None, callback=given, help=branch)(func)
        func = click.option("--repo", default=".", show_default=True, callback=given,
                            help="Config repo: a checkout path, a bare repo path or a URL.")(func)
        return func

    return add


class Command(click.Command):
    """A command whose help ends with its examples and the environment variables it reads
    (``commands/helptext.py``, imported only to show a help page)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from gitscale.commands.helptext import epilog

        self.epilog = epilog(self.name)
        super().format_epilog(ctx, formatter)


class Group(click.Group):
    """`gitscale --help`: every command's examples, every variable."""

    command_class = Command

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from gitscale.commands.helptext import epilog

        self.epilog = epilog()
        super().format_epilog(ctx, formatter)


class Finite(click.FloatRange):
    """A float range that refuses nan (no comparison fails for it, so FloatRange lets it
    through: a shutdown timeout of nan seconds)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return number


def _opts(kw: dict[str, Any]) -> RepoOptions:
    return RepoOptions(kw.pop("repo"), kw.pop("branch"), kw.pop("config"))


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gitscale")
def cli() -> None:
    """Scale self-hosted CI runners on Kubernetes through reviewable git commits."""


@cli.command()
@repo_options(BRANCH_READ)
@DEMAND
@click.option("--now", help="Pin the clock (RFC 3339), e.g. to ask what 9:00 would do; a "
                            "last scale-up after it still holds a scale-down (not clock skew).")
@EVERY
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="A line per set and a diff per file, or JSON for scripts (README: "
                   "\"plan --output json\").")
@click.option("--set", "only", multiple=True, metavar="NAME",
              help="Show only this set (repeat for more); the exit code is that of the sets "
                   "shown.")
def plan(**kw: Any) -> int:
    """Show what the next pass would change. Exit 0 none, 2 pending, 1 error."""
    # git clones while the command's modules are imported
    with begun(kw["repo"], kw["branch"]) as started:
        with collector_off():
            from gitscale.commands.plan import run_plan
            from gitscale.plan.cache import gc_paused

        with gc_paused():  # a one-shot pass: what it loads lives to its end (ONE_SHOT_GC)
            return run_plan(_opts(kw), begun=started, **kw)


@cli.command()
@repo_options(BRANCH_WRITE)
@DEMAND
@click.option("--now", help="Pin the clock (RFC 3339); commits are dated with it too. A last "
                            "scale-up after it still holds a scale-down (not clock skew).")
@EVERY
@NO_PUSH
def reconcile(no_push: bool, **kw: Any) -> int:
    """Plan, edit, validate, commit and push one pass."""
    # git clones while the modules are imported
    with begun(kw["repo"], kw["branch"], push=not no_push) as started:
        with collector_off():
            from gitscale.commands.reconcile import run_reconcile
            from gitscale.plan.cache import gc_paused

        with gc_paused():  # (ONE_SHOT_GC)
            return run_reconcile(_opts(kw), push=not no_push, begun=started, **kw)


@cli.command("run")
@repo_options(BRANCH_WRITE)
@click.option("--interval", default="30s", show_default=True, help="Time between passes.")
@DEMAND
@click.option("--max-passes", type=click.IntRange(1), default=None,
              help="Stop after this many passes (default: until SIGTERM).")
@click.option("--metrics-listen", default=None, metavar="HOST:PORT",
              help="Serve Prometheus metrics at http://HOST:PORT/metrics (default: off).")
@click.option("--shutdown-timeout", default="20s", show_default=True,
              help="On SIGTERM, how long the pass in progress may take: git's pushes and "
                   "fetches still running then are stopped and the pass is left to the next "
                   "start. Keep it below the pod's terminationGracePeriodSeconds.")
def run_command(**kw: Any) -> int:
    """Reconcile in a loop: one pass per interval, until SIGTERM."""
    from gitscale.commands.run import run_loop

    return run_loop(_opts(kw), **kw)


@cli.command()
@repo_options(BRANCH_WRITE)
@click.option("--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT.")
@click.option("--path", default="/webhook", show_default=True, help="Webhook URL path.")
@click.option("--window", default="10s", show_default=True,
              help="Events in one window land as one commit.")
@click.option("--reservation", default="10m", show_default=True,
              help="How long a queued job's reservation lasts once it has capacity.")
@click.option("--secret-env", default="GITHUB_WEBHOOK_SECRET", show_default=True,
              help="Environment variable holding the webhook secret (or, when it is not "
                   "set, NAME_FILE: a file holding it, read again when it changes).")
@click.option("--secret-file", default=None,
              help="File holding the webhook secret instead (not with --secret-env).")
@click.option("--state-file", default=".gitscale/reservations.yaml", show_default=True,
              help="Reservations file in the config repo (directly under .gitscale/).")
@click.option("--resync", default="5m", show_default=True,
              help="How often to correct the served sets' reservations from GitHub's API "
                   "(lost webhooks); 0 turns it off. With no served set that takes webhooks "
                   "there is none to run.")
@click.option("--hold", default=None, show_default="5m; 0 with --resync 0",
              help="How long a change to the reservations alone (no RunnerSet changed: a job "
                   "started, a completion the scale-down delay holds, jobs queued or completed "
                   "at the max, expiries, a resync's correction) may wait to land with the next "
                   "scaling commit; 0 commits each such change at once.")
@click.option("--metrics-listen", default=None, metavar="HOST:PORT",
              help="Serve Prometheus metrics at http://HOST:PORT/metrics instead of at "
                   "/metrics on --listen's port.")
@click.option("--set", "sets", multiple=True, metavar="NAME",
              help="Serve only this runner set (repeatable); the other sets with a github "
                   "source are left to `run`/`reconcile`. Default: every set with a github "
                   "source.")
@click.option("--shutdown-timeout", default="20s", show_default=True,
              help="On SIGTERM, how long the batch in flight and the last batch may take; what "
                   "has not landed by then is named in the log, and the resync at the next "
                   "start recovers it. Keep it below the pod's terminationGracePeriodSeconds.")
def serve(**kw: Any) -> int:
    """Receive workflow_job webhooks; land reservations and scaling as one commit per window."""
    from gitscale.commands.serve import run_serve

    source = click.get_current_context().get_parameter_source("secret_env")
    given = source not in (click.core.ParameterSource.DEFAULT,
                           click.core.ParameterSource.DEFAULT_MAP)
    return run_serve(_opts(kw), **kw, secret_env_given=given)


@cli.command()
@repo_options(BRANCH_HISTORY)
@click.option("--set", "only", help="Only this runner set.")
@click.option("--since", help="Only commits at or after this time (RFC 3339).")
@click.option("--until", help="Only commits at or before this time (RFC 3339).")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="A table, or JSON (times in UTC) for scripts.")
@click.option("--chart", callback=a_path,
              help="Also draw replicas and demand over time into this .svg or .png "
              "(needs gitscale[charts]).")
@click.option("--tz", default="utc", show_default=True,
              help="Times of the table and the chart: utc, local or a zone like Europe/Berlin.")
def history(**kw: Any) -> int:
    """The scaling commits: time, commit, set, old→new, patch, demand, reason."""
    from gitscale.commands.history import run_history

    return run_history(_opts(kw), **kw)


@cli.command()
@click.option("--repo", default=None, callback=given,
              help="Config repo whose gitscale.yaml gives the sets and policies: a checkout "
                   "or folder, a bare repo path or a URL (default: . when it has one, else "
                   "one set on the default preset).")
@click.option("--branch", default=None, callback=given,
              help="Branch whose scaling commits --from-history reads, and whose gitscale.yaml "
                   "a URL or bare repo gives (default: the remote's default branch).")
@click.option("--config", default=DEFAULT_CONFIG, show_default=True,
              help="Config file, relative to the repo root.")
@click.option("--trace", type=str, callback=a_path, help="CSV of jobs: arrival,duration[,set].")
@click.option("--synthetic", type=click.Choice(["steady", "spiky", "burst", "weekly"]),
              help="A seeded synthetic trace of this shape (weekly: 15 days of a weekday "
                   "09:00 burst, for a forecast policy).")
@click.option("--from-history", is_flag=True,
              help="Jobs rebuilt from the repo's Gitscale-Set trailers.")
@click.option("--seed", default=1, show_default=True, type=int,
              help="Seed of the synthetic trace: the same seed, the same jobs.")
@click.option("--hours", default=None, type=float,
              help="Length of a synthetic trace (default 4; weekly: 360, 15 days).")
@click.option("--report-from", default=None,
              help="Count outcomes from this point on: a duration into the trace (14d: day "
                   "15) or an RFC 3339 time. Earlier jobs still run (a forecast learns from "
                   "them) but are not reported.")
@click.option("--since", help="With --from-history: commits after this time (RFC 3339).")
@click.option("--until", help="With --from-history: commits up to this time (RFC 3339).")
@click.option("--set", "only", multiple=True, help="Only this runner set (repeatable).")
@click.option("--policy", multiple=True,
              help="A preset name or an inline policy {buffer: 2, ...} to try instead of "
                   "gitscale.yaml's (repeatable: compared side by side).")
@click.option("--interval", default="10s", show_default=True, help="Time between passes.")
@click.option("--sync-delay", default="10s", show_default=True,
              help="Commit → applied in the cluster (a GitOps engine notified on push).")
@click.option("--sync-poll", default=None,
              help="Instead: the GitOps engine polls every DURATION (Argo CD's default: 3m).")
@click.option("--pod-start", default="45s", show_default=True,
              help="Pod creation → runner ready.")
@click.option("--cold-cache", is_flag=True,
              help="Model a CLI run whose state cache is not kept between runs: the decision "
                   "does not know the last write's job ids.")
@click.option("--scaler-clock-offset", default=0.0, show_default=True, type=float,
              metavar="SECONDS",
              help="gitscale's clock minus the cluster's (negative: behind), as the "
                   "controller compares an effectiveTime with a runner's finishedAt.")
@click.option("--baselines/--no-baselines", default=True, show_default=True,
              help="Also run actions-runner-controller's listener and HRA, and pod-per-job.")
@click.option("--serve", is_flag=True,
              help="Also run each policy in webhook mode (`gitscale serve`): capacity "
                   "reservations from workflow_job events, one commit per --window.")
@click.option("--window", default="10s", show_default=True,
              help="With --serve: serve's --window (its events land as one commit).")
@click.option("--reservation", default="10m", show_default=True,
              help="With --serve: serve's --reservation (how long a queued job's reservation "
                   "lasts once it has capacity).")
@click.option("--resync", default="5m", show_default=True,
              help="With --serve: serve's --resync (GitHub's list of jobs corrects the "
                   "reservations); 0 turns it off.")
@click.option("--hold", default=None, show_default="5m; 0 with --resync 0",
              help="With --serve: serve's --hold (how long a change to the reservations alone "
                   "waits for a scaling commit); 0 commits each such change at once.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="A table per strategy, or JSON (format_version 1) for scripts.")
@click.option("--chart", callback=a_path,
              help="Also write a chart (SVG or PNG) of runners and jobs over time.")
def simulate(**kw: Any) -> int:
    """Replay a job trace through the policy and the controller; compare with baselines."""
    from gitscale.commands.simulate import simulate_command

    return simulate_command(**kw)


@cli.command()
@repo_options(BRANCH_WRITE)
@click.argument("name")
@click.option("--resume", is_flag=True, help="Undo a drain: let the loop scale the set again.")
@click.option("--now", help="Pin the clock (RFC 3339).")
@NO_PUSH
def drain(name: str, no_push: bool, **kw: Any) -> int:
    """Write replicas 0 and patch ID 0 for NAME, and hold it there."""
    from gitscale.commands.drain import run_drain

    return run_drain(_opts(kw), name, push=not no_push, **kw)


@cli.command()
@repo_options(BRANCH_READ)
def validate(**kw: Any) -> int:
    """Validate every managed manifest (kubeconform if on PATH, else in-process)."""
    from gitscale.commands.validate import run_validate

    return run_validate(_opts(kw))


@cli.command()
@click.option("--kubeconfig", default=None, help="Kubeconfig file (default: in-cluster config, "
              "then $KUBECONFIG / ~/.kube/config).")
@click.option("--namespace", default=None, help="Only watch this namespace (default: all).")
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1, 256),
              help="Pod creations in flight at once.")
@click.option("--health-port", default=8081, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the /healthz, /readyz and /metrics (Prometheus) endpoints (0: off).")
@click.option("--shutdown-timeout", default=20.0, show_default=True,
              type=Finite(0, 3600),
              help="Seconds to finish the passes in flight on SIGTERM; creations not started "
                   "by then are left to the next start.")
@click.option("--leftover-grace", default=60.0, type=Finite(0, 86400), hidden=True,
              help="Seconds a GitHub registration must stay without a pod before it is removed.")
@click.option("--leader-elect", is_flag=True,
              help="Act only while holding a coordination.k8s.io Lease (run 2 replicas; "
                   "without it, run one, with strategy: Recreate).")
@click.option("--leader-election-namespace", default=None,
              help="Namespace of the Lease (default: the controller's own).")
@click.option("--leader-election-id", default="gitscale-controller", show_default=True,
              help="Name of the Lease: give each controller sharing a namespace its own.")
@click.option("--lease-duration", default=15, show_default=True, type=click.IntRange(1, 3600),
              help="Seconds a replica waits after the leader's last renewal to take over.")
@click.option("--renew-deadline", default=10.0, show_default=True,
              type=Finite(0, 3600, min_open=True),
              help="Seconds a leader unable to renew keeps acting (< lease duration).")
@click.option("--retry-period", default=2.0, show_default=True,
              type=Finite(0, 3600, min_open=True),
              help="Seconds between attempts to take or renew the Lease.")
@click.option("--repo", hidden=True, default=None)
def controller(**kw: Any) -> int:
    """Turn each RunnerSet into ephemeral runner pods (runs in the cluster).

    It takes no --repo: it reads RunnerSets from the cluster, where Argo CD or Flux applies
    them from the config repo, and never reads or writes the repo itself."""
    from gitscale.commands.controller import controller_command

    return controller_command(**kw)


@cli.command()
@click.argument("directory", required=False)
@click.option("--repo", default=None, metavar="DIR", callback=given,
              help="The config repo to create (same as DIRECTORY; default: .). A new folder "
                   "gets a new repo; in an existing checkout the scaffold is committed there.")
@click.option("--gitops", type=click.Choice(["argocd", "flux"]), required=True,
              help="Which GitOps tool applies the repo.")
@click.option("--repo-url", default=None,
              help="The https:// URL the config repo will be pushed to (the GitOps source, "
                   "the scaler's --repo). Without it: CHANGE-ME.")
@click.option("--config", default=DEFAULT_CONFIG, show_default=True,
              help="Path of the config file to write, relative to the repo root; the "
                   "scheduler init writes passes it on as --config.")
@click.option("--branch", default=None, callback=given,
              help="Branch of the new repo: the one Argo CD or Flux follows and gitscale "
                   "commits to [default: main]. In an existing checkout: its checked-out "
                   "branch (--branch may only repeat it).")
@click.option("--run-in", type=click.Choice(["github-actions", "gitlab", "cluster"]),
              default=None,
              help="Where gitscale itself runs; init writes only that scheduler: "
                   ".github/workflows/gitscale.yml, .gitlab-ci.yml, or deploy/scaler/ (a "
                   "CronJob or Deployment you apply) [default: by --repo-url's host: "
                   "github-actions on GitHub, gitlab on a GitLab host, cluster elsewhere; "
                   "github-actions without --repo-url].")
@click.option("--notify-url", default=None, metavar="URL",
              help="Where gitscale reaches Argo CD's server or Flux's webhook-receiver to ask "
                   "for a sync after each push (https://HOST, no path) [default: the "
                   "in-cluster Service with --run-in cluster, else CHANGE-ME].")
@click.option("--public-repo", is_flag=True, default=False,
              help="Argo CD / Flux read the config repo without a credential (a public "
                   "repo): no repository Secret.")
@click.option("--path", default="clusters/prod", show_default=True,
              help="Folder of the cluster's manifests inside the repo (what the GitOps tool "
                   "applies).")
@click.option("--namespace", default="ci-runners", show_default=True,
              help="Namespace of the RunnerSets and runner pods (the controller's Role too).")
@click.option("--cluster", default=None, metavar="NAME_OR_URL",
              help="Argo CD only: the destination cluster, by name or server URL "
                   "[default: the cluster Argo CD runs in].")
@click.option("--platform", type=click.Choice(["github", "buildkite"]), default=None,
              help="The example set's CI system [default: github; buildkite with a "
                   "--buildkite-* option].")
@click.option("--github-org", default=None, metavar="ORG",
              help="The GitHub organization: the source's org and the RunnerSet's configURL. "
                   "Without it: CHANGE-ME.")
@click.option("--github-url", default=None, metavar="URL",
              help="GitHub Enterprise Server (or *.ghe.com): the server's address, "
                   "https://HOST [default: https://github.com].")
@click.option("--github-app-id", default=None, metavar="ID",
              help="Poll with a GitHub App instead of a token: its id.")
@click.option("--github-app-installation-id", default=None, metavar="ID",
              help="The GitHub App's installation id; needs --github-app-id [default: looked "
                   "up on the org].")
@click.option("--buildkite-org", default=None, metavar="SLUG",
              help="The Buildkite organization (the controller's agents API). Without it: "
                   "CHANGE-ME.")
@click.option("--buildkite-queue", default=None, metavar="QUEUE",
              help="The Buildkite queue [default: default].")
def init(**kw: Any) -> int:
    """Scaffold a config repo: gitscale.yaml, a RunnerSet, the CRD, the controller, GitOps.

    What it is not told and cannot know is written as CHANGE-ME; init lists each such line
    with what belongs there, and `gitscale validate` refuses the repo until none is left.
    """
    from gitscale.commands.init import init_command

    return init_command(**kw)


@cli.command()
@click.option("--repo", default=None, metavar="PATH", callback=given,
              help="Instead of printing it, write the CRD into this checkout of the config "
                   "repo (over the file that holds it, else deploy/crds/) and commit it.")
def crd(repo: str | None) -> int:
    """Print the RunnerSet CustomResourceDefinition, or update the config repo's copy."""
    from gitscale.commands.crd import run_crd

    return run_crd(repo)


@cli.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False),
              help="Where to build the demo: DIR/config and its remote DIR/remote.git "
                   "(default: a new temporary directory).")
@click.option("--repo", default=None, metavar="PATH", type=click.Path(file_okay=False),
              help="Build the demo's config repo at PATH instead (its bare remote beside it, "
                   "at PATH.remote.git), to keep using it with --repo PATH afterwards.")
def demo(directory: str | None, repo: str | None) -> int:
    """Build a local config repo and a bare remote, then run plan, reconcile and history."""
    from gitscale.commands.demo import run_demo

    return run_demo(directory, repo)


def main(argv: list[str] | None = None) -> int:
    gc.freeze()  # what is imported by now lives for the whole run: keep it out of collections
    try:
        result = cli.main(args=argv, prog_name="gitscale", standalone_mode=False)
    except GitscaleError as exc:
        from gitscale.logline import last_words
        from gitscale.redact import redact

        last_words(f"error: {redact(str(exc))}")
        return exc.exit_code
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click's word for Ctrl-C
            click.echo("interrupted", err=True)
            return EXIT_INTERRUPTED
        click.echo("aborted", err=True)
        return EXIT_ERROR
    except click.ClickException as exc:
        import io

        from gitscale.redact import redact

        said = io.StringIO()  # click quotes the value it refused: a token pasted there, too
        exc.show(file=said)
        click.echo(redact(said.getvalue()), err=True, nl=False)
        return EXIT_ERROR  # not click's 2: plan uses 2 for "changes pending"
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except Exception:  # noqa: BLE001 - the last line of defence: a bug (gitscale/crash.py)
        from gitscale import crash  # imported here: only a crash needs its traceback module
        from gitscale.logline import last_words

        path = crash.write_report()
        if path is None:  # nowhere to write it (a read-only root filesystem): the log keeps it
            last_words("gitscale crashed: this is a bug, please report it with this report (no "
                       f"file could be written for it):\n{crash.report()}")
        else:
            last_words(f"gitscale crashed: this is a bug, please report it with {path}")
        return crash.EXIT_CRASH
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
