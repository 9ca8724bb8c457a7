"""What the docs quote by name is what the code has: the ``GITSCALE_*`` variables, the
``gitscale.dev/`` annotations and labels, the keys of gitscale.yaml, the labels (and label
values) of each metric, and the option defaults the command table and the prose state.

Each check is a scan of text, well under a second; each has a counterpart that shows it still
finds what it looks for (a pattern that stopped matching would pass everything). Options named
in the docs exist (tests/test_docs_examples.py), metric names exist (tests/test_metrics.py),
and every variable gitscale reads is in `--help` and the README (tests/commands/test_help.py):
these are the other direction, or what those leave out.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest

from gitscale.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "deploy").rglob("README.md"))]


def section(title: str, text: str | None = None) -> str:
    """The README's ``## title`` section, its subsections included."""
    text = README.read_text() if text is None else text
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


# --- GITSCALE_* variables -------------------------------------------------------------------

def code_text() -> str:
    """Everything that reads (or, for the CI files init writes, sets) a variable: the package,
    the scripts and the tests (GITSCALE_TEST_IMAGE and the like are the suite's)."""
    paths = [*ROOT.joinpath("gitscale").rglob("*.py"), *ROOT.joinpath("scripts").iterdir(),
             *ROOT.joinpath("tests").rglob("*.py"), ROOT / "Dockerfile"]
    return "\n".join(p.read_text(errors="replace") for p in paths
                     if p.is_file() and p != Path(__file__))


VARIABLE = re.compile(r"\bGITSCALE_[A-Z0-9_]*[A-Z0-9]\b")


def variables_unknown(pages: dict[str, str], code: str) -> list[tuple[str, str]]:
    known = set(VARIABLE.findall(code))
    return sorted({(page, name) for page, text in pages.items()
                   for name in VARIABLE.findall(text) if name not in known})


def test_every_gitscale_variable_the_docs_name_is_one_the_code_knows() -> None:
    """A variable renamed in the code and not in the docs is one a user sets for nothing."""
    pages = {str(p.relative_to(ROOT)): p.read_text() for p in PAGES}
    named = {n for text in pages.values() for n in re.findall(r"\bGITSCALE_[A-Z0-9_]+", text)}
    assert {"GITSCALE_GIT_TOKEN", "GITSCALE_CACHE_DIR", "GITSCALE_LOG_FORMAT"} <= named
    assert variables_unknown(pages, code_text()) == []


def test_the_variable_check_catches_a_name_no_code_has() -> None:
    code = 'os.environ.get("GITSCALE_GIT_TOKEN")'
    assert variables_unknown({"p": "`GITSCALE_GIT_TOKENS` and GITSCALE_GIT_TOKEN"}, code) == [
        ("p", "GITSCALE_GIT_TOKENS")]


# --- gitscale.dev/ annotations and labels ---------------------------------------------------

API_GROUP = "gitscale.dev/v1alpha1"


def dev_names(text: str) -> set[str]:
    return {n for n in re.findall(r"\bgitscale\.dev/[a-z][a-z0-9-]*[a-z0-9]\b", text)
            if n != API_GROUP}


def test_every_gitscale_dev_name_in_the_docs_is_in_the_code_and_back() -> None:
    """Annotations and labels are an interface: a user sets `gitscale.dev/paused`, a selector
    reads `gitscale.dev/runnerset`. The docs quote each one the code writes or reads, and no
    other."""
    code = "\n".join(p.read_text() for p in ROOT.joinpath("gitscale").rglob("*.py"))
    in_code = {n.strip('"') for n in re.findall(r'"gitscale\.dev/[a-z][a-z0-9-]*"', code)}
    in_docs = set().union(*(dev_names(p.read_text()) for p in PAGES))
    assert {"gitscale.dev/paused", "gitscale.dev/runnerset"} <= in_code & in_docs
    assert in_docs - in_code == set(), "quoted in the docs, in no code"
    assert in_code - in_docs == set(), "in the code, in no page"


def test_the_dev_name_check_tells_a_name_from_the_api_group() -> None:
    assert dev_names("`gitscale.dev/v1alpha1` `gitscale.dev/paused: \"true\"` "
                     "gitscale.dev/runners.") == {"gitscale.dev/paused", "gitscale.dev/runners"}


# --- gitscale.yaml's keys -------------------------------------------------------------------

def schema_keys(schema: Any, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The path of every key the schema allows, through lists and alternatives."""
    found: set[tuple[str, ...]] = set()
    if not isinstance(schema, dict):
        return found
    for key, sub in (schema.get("properties") or {}).items():
        found.add((*path, key))
        found |= schema_keys(sub, (*path, key))
    for sub in (schema.get("items"), schema.get("additionalProperties")):
        found |= schema_keys(sub, path)
    for sub in [*schema.get("oneOf", []), *schema.get("anyOf", []), *schema.get("allOf", [])]:
        found |= schema_keys(sub, path)
    return found


def unnamed_keys(text: str) -> list[str]:
    from gitscale.config.schemas import CONFIG

    return sorted(".".join(path) for path in schema_keys(CONFIG)
                  if not re.search(rf"(?<![\w-]){re.escape(path[-1])}(?=:|`)", text))


def test_every_key_of_gitscale_yaml_is_named_where_the_config_file_is_described() -> None:
    """A key the schema accepts and the README's "The config file" (with "Scaling semantics",
    where the forecast lives) never names is a setting nobody finds; `source.github.concurrency`
    was one."""
    from gitscale.config.schemas import CONFIG

    text = section("The config file") + section("Scaling semantics")
    assert len(schema_keys(CONFIG)) > 50
    assert unnamed_keys(text) == []


def test_the_key_check_wants_the_key_as_yaml_or_code() -> None:
    assert "runnerSets.source.github.concurrency" in unnamed_keys("the concurrency of polls")
    assert "runnerSets.source.github.concurrency" not in unnamed_keys("concurrency: 8")


# --- metrics: labels and label values -------------------------------------------------------

def metric_rows() -> dict[str, tuple[str, str]]:
    """``name → (labels cell, what cell)`` of the README's metric table (a counter as
    ``_total``)."""
    rows = re.findall(r"^\| `(gitscale_\w+)` \| \w+ \|([^|]*)\| (.*) \|$",
                      section("Metrics"), re.MULTILINE)
    return {name.removesuffix("_total"): (labels.strip(), what) for name, labels, what in rows}


def label_names(cell: str) -> list[str]:
    """`set`, `reason` → [set, reason]; `result` (`ok`, `error`) → [result]."""
    return re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", cell))


def label_values(cell: str) -> dict[str, set[str]]:
    """The values a labels cell lists in parentheses after a label."""
    return {label: set(re.findall(r"`([\w-]+)`", values))
            for label, values in re.findall(r"`(\w+)` \(([^)]*)\)", cell)}


def registered() -> dict[str, list[str]]:
    """``name → label names`` of every metric the loop and the controller register."""
    from prometheus_client.metrics import MetricWrapperBase

    from gitscale.controller.metrics import ControllerMetrics
    from gitscale.metrics import LoopMetrics, SetGauges

    found = {name: ["set"] for name, _ in SetGauges.FAMILIES}
    for metrics in (LoopMetrics(webhooks=True), ControllerMetrics()):
        for value in vars(metrics).values():
            if isinstance(value, MetricWrapperBase):
                found[value._name] = list(value._labelnames)
    return found


def test_the_metric_table_gives_each_metric_its_labels() -> None:
    rows, metrics = metric_rows(), registered()
    assert set(rows) == set(metrics)  # (tests/test_metrics.py: the names alone)
    wrong = {name: (label_names(rows[name][0]), labels) for name, labels in metrics.items()
             if label_names(rows[name][0]) != labels}
    assert wrong == {}


def test_the_metric_table_lists_each_labels_values() -> None:
    """The values a query filters on: `result="partial"`, `state="busy"`, `reason="drain"`."""
    from gitscale.config.notify_targets import Kind
    from gitscale.controller.metrics import RUNNER_STATES
    from gitscale.core.model import Reason
    from gitscale.metrics import DELIVERY_RESULTS, ERROR_KINDS, PASS_RESULTS

    rows = metric_rows()
    assert label_values(rows["gitscale_passes"][0]) == {"result": set(PASS_RESULTS)}
    assert label_values(rows["gitscale_notifications"][0]) == {
        "engine": set(Kind.__args__), "result": {"sent", "failed"}}
    assert label_values(rows["gitscale_controller_runners"][0]) == {"state": set(RUNNER_STATES)}

    def quoted(name: str) -> set[str]:
        return set(re.findall(r"`([\w-]+)`", rows[name][1]))

    not_written = {Reason.UNCHANGED, Reason.DEMAND_UNKNOWN, Reason.PAUSED}
    assert quoted("gitscale_set_writes") == {r.value for r in Reason if r not in not_written}
    assert quoted("gitscale_errors") - {"serve"} == set(ERROR_KINDS)  # ("a poll of `serve`")
    assert quoted("gitscale_webhook_deliveries") == set(DELIVERY_RESULTS)


def test_the_label_parsers_read_the_tables_cells() -> None:
    cell = "`engine` (`flux`, `argocd`), `result` (`sent`, `failed`)"
    assert label_names(cell) == ["engine", "result"]
    assert label_values(cell) == {"engine": {"flux", "argocd"}, "result": {"sent", "failed"}}
    assert label_names("") == []


# --- option defaults ------------------------------------------------------------------------

def defaults_stated(text: str) -> list[tuple[str, str, str, bool]]:
    """(command or "", option, value, whether the option must have a default) of each default
    the text states: a command table's `cmd [--opt VALUE]` (a literal value, not a placeholder
    in capitals, not a choice), "`--opt` (default `VALUE`)" or "`--opt`, default `VALUE`" in
    prose, and an option table's `| `--opt …` | `VALUE` |` (init's: a value there may also be
    one init works out, `CHANGE-ME` or `https://github.com`, which no option's default says)."""
    found = []
    for command, rest in re.findall(r"^\| `(\w+) ([^`]*)` \|", text, re.MULTILINE):
        found += [(command, option, value, True) for option, value in re.findall(
            r"\[(--[a-z-]+) ([a-z0-9.][^\s\]\\]*)(?=[\s\]])", rest)]
    found += [("", option, value, True) for option, value in re.findall(
        r"`(--[a-z-]+)`,? \(?default `([^`]+)`", text)]
    found += [("", option, value, False) for option, value in re.findall(
        r"^\| `(--[a-z-]+)[^`]*`[^|]*\| `([^`]+)`(?:;| \|)", text, re.MULTILINE)]
    return found


def option_defaults() -> dict[tuple[str, str], str]:
    """(command, option) → the default `--help` shows (a computed one: its show_default)."""
    found = {}
    for name, command in cli.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            default = param.show_default if isinstance(param.show_default, str) \
                else param.default
            if default is not None and not callable(default):
                for option in param.opts:
                    found[(name, option)] = str(default)
    return found


def test_every_default_the_docs_state_is_the_options() -> None:
    defaults = option_defaults()
    stated = [(str(p.relative_to(ROOT)), *found) for p in PAGES
              for found in defaults_stated(p.read_text())]
    assert len(stated) >= 6
    wrong = []
    for page, command, option, value, required in stated:
        actual = {d for (c, o), d in defaults.items() if o == option and command in ("", c)}
        if not actual and not required:
            continue
        if not any(d == value or d.split(";")[0] == value for d in actual):
            wrong.append((page, command, option, value, sorted(actual)))
    assert wrong == []


def test_the_default_check_reads_the_table_and_the_prose() -> None:
    text = ("| `run [--interval 30s] [--demand F] [--output text\\|json]` | … |\n"
            "`--leader-election-id` (default `gitscale-controller`), `--path`, default `x`\n"
            "| `--namespace NS` | `ci-runners` | the RunnerSet |\n"
            "| `--path DIR`, `--branch B` | `clusters/prod`; in a checkout its branch | … |\n"
            "| `--run-in a\\|b` | by `--repo-url`'s host | … |\n")
    assert defaults_stated(text) == [("run", "--interval", "30s", True),
                                     ("", "--leader-election-id", "gitscale-controller", True),
                                     ("", "--path", "x", True),
                                     ("", "--namespace", "ci-runners", False),
                                     ("", "--path", "clusters/prod", False)]


@pytest.mark.parametrize(("command", "option", "value"), [("serve", "--hold", "5m"),
                                                          ("run", "--interval", "30s")])
def test_the_default_check_knows_a_computed_default(command: str, option: str,
                                                    value: str) -> None:
    assert option_defaults()[(command, option)].split(";")[0] == value


# --- the repository's paths ------------------------------------------------------------------

# Paths the docs quote that are not this repository's files, by design: what `init` writes
# into a config repo, what the benchmarks write, kubectl's `deploy/NAME` of a Deployment, and
# CONTRIBUTING's worked GitLab example.
NOT_HERE = ("deploy/scaler/", "benchmarks/results/", "policies/NAME.yaml", "deploy/gitscale-")
REPO_PATH = re.compile(r"`((?:gitscale|tests|benchmarks|deploy|scripts|fixtures|policies|docs"
                       r"|requirements)/[\w./*-]*)`")


def missing_paths(text: str) -> list[str]:
    found = []
    for path in REPO_PATH.findall(text):
        path = path.rstrip(".")
        if path.startswith(NOT_HERE) or "gitlab" in path:
            continue
        if not (any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
            found.append(path)
    return found


def test_every_path_of_the_repository_the_docs_quote_exists() -> None:
    """A module moved or a file renamed leaves a page sending its reader to nothing."""
    pages = [*PAGES, ROOT / "benchmarks" / "README.md"]
    quoted = [path for page in pages for path in REPO_PATH.findall(page.read_text())]
    assert len(quoted) > 100
    missing = {str(page.relative_to(ROOT)): missing_paths(page.read_text()) for page in pages}
    assert {page: paths for page, paths in missing.items() if paths} == {}


def test_the_path_check_catches_a_moved_module() -> None:
    assert missing_paths("`gitscale/metrics.py`, `gitscale/metric.py`, `deploy/scaler/x.yaml`, "
                         "`tests/*/conftest.py`, `tests/nothing/*.py`") == [
        "gitscale/metric.py", "tests/nothing/*.py"]


# --- options in code blocks -----------------------------------------------------------------

def options_in_blocks(text: str, commands: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(command, option) of every `gitscale COMMAND … --option` in a fenced or indented code
    block (a `\\` continuation joined to its line; a pipe, `;`, `&` or `#` ends the command).
    tests/test_docs_examples.py checks the options of code spans; these are the lines a
    reader pastes."""
    blocks = [m.group(2) for m in re.finditer(r"^( *)```[\w-]*\n(.*?)^\1```$", text,
                                              re.MULTILINE | re.DOTALL)]
    blocks += ["\n".join(re.findall(r"^    (\S.*)$", text, re.MULTILINE))]
    found = []
    for block in blocks:
        for match in re.finditer(r"\bgitscale\s+([a-z]+)\b([^|;&#\n]*)",
                                 re.sub(r"\\\n\s*", " ", block)):
            if match.group(1) in commands:
                found += [(match.group(1), option) for option in
                          re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", match.group(2))]
    return found


def test_every_option_a_code_block_gives_a_command_is_one_of_its_options() -> None:
    from tests.test_docs_examples import command_options

    commands = command_options()
    named = [(str(page.relative_to(ROOT)), *found) for page in PAGES
             for found in options_in_blocks(page.read_text(), commands)]
    assert len(named) > 40
    assert [n for n in named if n[2] not in commands[n[1]] | {"--help"}] == []


def test_the_block_check_reads_continuations_and_stops_at_a_pipe() -> None:
    commands = {"plan": {"--set"}, "serve": {"--window"}}
    text = ("```sh\ngitscale plan --set a \\\n    --sets b | grep --count x\n```\n\n"
            "    gitscale serve --windows 5s\n")
    assert options_in_blocks(text, commands) == [("plan", "--set"), ("plan", "--sets"),
                                                 ("serve", "--windows")]


# --- the benchmarks' options ----------------------------------------------------------------

BENCHMARKS = ROOT / "benchmarks"


def benchmark_options_unknown(text: str) -> list[tuple[str, str]]:
    """(script, option) of every `benchmarks/SCRIPT.py … --option` (or `SCRIPT.py --option`)
    the text gives that the script does not define as a string (its argparse)."""
    found = []
    for script, rest in re.findall(r"\b((?:bench_\w+|outcomes)\.py)\b([^`|;&#\n]*)",
                                   re.sub(r"\\\n\s*", " ", text)):
        path = BENCHMARKS / script
        source = path.read_text() if path.exists() else ""
        found += [(script, option) for option in
                  re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest)
                  if f'"{option}"' not in source and f"'{option}'" not in source]
    return found


def test_every_option_the_docs_give_a_benchmark_is_the_scripts() -> None:
    """The README's figures say how they were measured; a renamed flag makes that
    unrepeatable."""
    pages = [*PAGES, BENCHMARKS / "README.md"]
    named = [p for page in pages
             for p in re.findall(r"\b(?:bench_\w+|outcomes)\.py --", page.read_text())]
    assert len(named) > 10
    assert {str(page.relative_to(ROOT)): unknown for page in pages
            if (unknown := benchmark_options_unknown(page.read_text()))} == {}


def test_the_benchmark_check_catches_an_option_the_script_lacks() -> None:
    assert benchmark_options_unknown(
        "`.venv/bin/python benchmarks/bench_reconcile.py --sets 200 --setz 3`, "
        "`bench_nothing.py --x`") == [("bench_reconcile.py", "--setz"), ("bench_nothing.py", "--x")]


# --- the README's table of variables --------------------------------------------------------

def variable_rows(text: str) -> list[tuple[list[str], set[str]]]:
    """(variables, commands) of each row of the README's **Help.** table whose "read by" cell
    names commands (`plan`, `serve`'s resync); rows that say it in words are left out."""
    from gitscale.commands.helptext import COMMANDS

    table = text[text.index("**Help.**"):text.index("**Shell completion**")]
    rows = []
    for first, read_by in re.findall(r"^\| (`[^|]+) \| ([^|]+) \|", table, re.MULTILINE):
        commands = {c for c in re.findall(r"`(\w+)`", read_by) if c in COMMANDS}
        if commands:
            rows.append((re.findall(r"`([A-Z][A-Z0-9_]*)`", first), commands))
    return rows


def test_the_readme_says_which_commands_read_each_variable_as_help_does() -> None:
    """`gitscale COMMAND --help` lists the variables the command reads
    (commands/helptext.py); the README's table says the same per variable."""
    from gitscale.commands.helptext import COMMANDS

    rows = variable_rows(README.read_text())
    assert len(rows) >= 5
    wrong = [(names, read_by, helps) for names, read_by in rows
             if read_by != (helps := {c for c, (_, reads) in COMMANDS.items()
                                      if any(n in reads for n in names)})]
    assert wrong == []


def test_the_variable_rows_are_read_with_their_commands() -> None:
    text = ("**Help.**\n| variable | read by | what |\n|---|---|---|\n"
            "| `GITHUB_TOKEN`, `BUILDKITE_AGENT_TOKEN` | `plan`, `serve`'s resync | a token |\n"
            "| `GITSCALE_AUTHOR` | commands that commit | … |\n**Shell completion**")
    assert variable_rows(text) == [(["GITHUB_TOKEN", "BUILDKITE_AGENT_TOKEN"], {"plan", "serve"})]
