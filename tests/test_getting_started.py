"""docs/getting-started.md says what gitscale really writes and prints, so it cannot drift.

Every ``gitscale init`` line of the guide's ```sh blocks runs, as written, in a folder of its
own: each is a *variant* (its printed steps, its files, what ``validate`` says of it). Then,
each ```sh block is true of one variant: every config-repo path it names is a file or folder
that variant wrote, every ``kubectl create secret`` (namespace, name, keys) is one that variant
prints, and every other setup line (``kubectl apply``, ``gh secret set``, ``git remote add``…)
is one it prints. Every ```text block is what one command printed, or (a ``NAME`` header)
``kubectl get runnersets``'s columns from the CRD. A path in the prose is written by some
variant, or is a file of this repo. Every ``gitscale CMD --option`` is an option of CMD, and
the guide's check commands (``plan --demand``, ``validate``, ``history``) run on a variant
that leaves nothing to edit.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from gitscale.cli import main
from tests.helpers import git
from tests.test_docs_examples import ROOT, command_options, fenced_blocks

GUIDE = ROOT / "docs" / "getting-started.md"
CRD = ROOT / "deploy" / "crds" / "runnersets.gitscale.dev.yaml"
# lines of an sh block that read the cluster or run gitscale: not steps init prints
NOT_PRINTED = re.compile(r"(cd |git pull|gitscale |flux get |kubectl (-n \S+ )?(get|describe|"
                         r"logs|wait)\b)")
PATH_LIKE = re.compile(r"[\w.-]+(/[\w.-]+)*/?")
FILE_SUFFIXES = (".yaml", ".yml", ".md", ".py")


def logical_lines(text: str) -> list[str]:
    """Shell lines with their ``\\`` continuations joined, whitespace collapsed, comments
    (whole lines, and ``  # …`` after a command) and blank lines dropped."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.split("  #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = " ".join((pending + line).split())
        pending = ""
        if line:
            out.append(line)
    return out


def secrets(lines: list[str]) -> set[tuple[str, str, frozenset[str]]]:
    """(namespace, name, keys) of each ``kubectl -n NS create secret generic NAME …``."""
    found = set()
    for line in lines:
        if not re.match(r"kubectl -n \S+ create secret generic ", line):
            continue
        words = shlex.split(line)
        keys = frozenset(w.split("=", 2)[1] for w in words[6:]
                         if w.startswith(("--from-file=", "--from-literal=")))
        found.add((words[2], words[6], keys))
    return found


def path_words(text: str) -> list[str]:
    """The words of ``text`` that name a relative path: ``clusters/prod/``, ``gitscale.yaml``;
    not ``./a-token`` (a file the reader writes), an absolute path, a URL, an API group
    (``gitscale.dev/v1alpha1``) or a flag."""
    found = []
    for word in text.split():
        if word.startswith(("-", "./")) or not PATH_LIKE.fullmatch(word):
            continue
        first = word.split("/")[0]
        if "/" in word and "." in first and not first.startswith("."):
            continue  # a domain: ghcr.io/…, gitscale.dev/…
        if "/" in word or word.endswith(FILE_SUFFIXES):
            found.append(word)
    return found


def prose(text: str) -> str:
    """The page's code spans outside fenced blocks and outside links' text (a link's target
    is checked by test_docs_examples), one per line."""
    text = re.sub(r"^```.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", "", text)
    return "\n".join(re.findall(r"`([^`]+)`", text))


@dataclass(frozen=True)
class Variant:
    command: str
    root: Path
    printed: list[str]  # init's stdout and stderr, line by line
    validated: list[str]  # `gitscale validate`'s
    paths: frozenset[str]  # every file it committed, and every folder above one

    @property
    def steps(self) -> list[str]:
        return logical_lines("\n".join(self.printed))

    def has(self, path: str) -> bool:
        return path.rstrip("/") in self.paths


def call(argv: list[str]) -> tuple[int, list[str]]:
    """gitscale in-process, as `main` runs it; its stdout and stderr lines."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(argv)
    return code, out.getvalue().splitlines()


def gitscale_lines(text: str) -> list[str]:
    """The ``gitscale …`` commands of the sh blocks, and of the text blocks' ``$`` lines."""
    lines = [line for block in fenced_blocks(text, "sh") for line in logical_lines(block)]
    lines += [line[2:] for block in fenced_blocks(text, "text")
              for line in block.splitlines() if line.startswith("$ ")]
    return [line for line in lines if line.startswith("gitscale ")]


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> list[Variant]:
    found = []
    inits = [line for line in gitscale_lines(GUIDE.read_text())
             if line.startswith("gitscale init ")]
    for n, line in enumerate(inits):
        where = tmp_path_factory.mktemp(f"variant{n}")
        argv = shlex.split(line)[1:]
        assert not argv[1].startswith("-"), f"{line}: the folder first, as README shows it"
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(where)  # the guide's relative folder, as a reader runs it
            patch.setenv("GITSCALE_CACHE_DIR", str(where / ".cache"))
            code, printed = call(argv)
            assert code == 0, (line, printed)
            root = where / argv[1]
            _, validated = call(["validate", "--repo", str(root)])
        files = git(root, "ls-files").splitlines()
        paths = {str(Path(*Path(f).parts[:i])) for f in files
                 for i in range(1, len(Path(f).parts) + 1)}
        found.append(Variant(line, root, printed, validated, frozenset(paths)))
    return found


Claim = tuple[str, Callable[[Variant], bool]]


def true_of_one(blocks: list[str], claims: Callable[[str], list[Claim]],
                variants: list[Variant]) -> list[str]:
    """Each block whose claims no one variant satisfies all of, with what fails where."""
    wrong = []
    for block in blocks:
        made = claims(block)
        if made and not any(all(holds(v) for _, holds in made) for v in variants):
            nowhere = [what for what, holds in made if not any(holds(v) for v in variants)]
            wrong.append(f"no variant {', '.join(nowhere)}" if nowhere else
                         f"no single variant {', '.join(what for what, _ in made)}")
    return wrong


def path_claims(block: str) -> list[Claim]:
    return [(f"writes {word}", lambda v, w=word: v.has(w))
            for line in logical_lines(block) for word in path_words(line)]


def secret_claims(block: str) -> list[Claim]:
    return [(f"prints the Secret {secret}", lambda v, s=secret: s in secrets(v.steps))
            for secret in secrets(logical_lines(block))]


def step_claims(block: str) -> list[Claim]:
    return [(f"prints {line!r}", lambda v, s=line: any(s in step for step in v.steps))
            for line in logical_lines(block) if not NOT_PRINTED.match(line)]


def output_claims(block: str) -> list[Claim]:
    lines = [line.rstrip() for line in block.splitlines()
             if line.strip() and not line.startswith("$ ") and line.strip() != "…"]
    if not lines or lines[0].startswith("NAME "):
        return []  # a kubectl table: test_the_runnerset_table_shows_the_crds_columns
    return [(f"prints {line!r}", lambda v, s=line: s in v.printed or s in v.validated)
            for line in lines]


def test_the_guide_runs_each_init_it_shows(variants: list[Variant]) -> None:
    """Both platforms, both GitOps tools, the three places the scaler runs."""
    text = " ".join(v.command for v in variants)
    assert len(variants) >= 4
    for option in ["--gitops argocd", "--gitops flux", "--platform buildkite"]:
        assert option in text, option
    for scheduler in [".github/workflows/gitscale.yml", ".gitlab-ci.yml",
                      "deploy/scaler/cronjob.yaml"]:  # by --run-in or by the repo's host
        assert any(v.has(scheduler) for v in variants), scheduler


def test_every_path_a_block_names_is_written_by_one_variant(variants: list[Variant]) -> None:
    blocks = fenced_blocks(GUIDE.read_text(), "sh")
    assert sum(len(path_claims(b)) for b in blocks) >= 4  # the check finds them
    assert (wrong := true_of_one(blocks, path_claims, variants)) == [], "\n".join(wrong)


def test_every_path_the_prose_names_exists(variants: list[Variant]) -> None:
    """A path under a folder init writes is written by some variant; any other (a page of
    gitscale's docs) is a file of this repo."""
    scaffold = {p.split("/")[0] for v in variants for p in v.paths}
    words = path_words(prose(GUIDE.read_text()))
    assert len(words) >= 10
    wrong = [w for w in words
             if not (any(v.has(w) for v in variants) if w.split("/")[0] in scaffold
                     else (ROOT / w).exists())]
    assert wrong == []


def test_every_secret_the_guide_creates_is_one_init_prints(variants: list[Variant]) -> None:
    blocks = fenced_blocks(GUIDE.read_text(), "sh")
    assert sum(len(secret_claims(b)) for b in blocks) >= 6
    assert (wrong := true_of_one(blocks, secret_claims, variants)) == [], "\n".join(wrong)


def test_every_setup_line_of_the_guide_is_one_init_prints(variants: list[Variant]) -> None:
    """`kubectl apply`, `gh secret set`, `git remote add`… as init prints them, so a reader
    may paste the guide's or init's lines alike."""
    blocks = fenced_blocks(GUIDE.read_text(), "sh")
    assert sum(len(step_claims(b)) for b in blocks) >= 15
    assert (wrong := true_of_one(blocks, step_claims, variants)) == [], "\n".join(wrong)


def test_every_printed_line_the_guide_shows_is_printed(variants: list[Variant]) -> None:
    blocks = fenced_blocks(GUIDE.read_text(), "text")
    assert sum(len(output_claims(b)) for b in blocks) >= 3
    assert (wrong := true_of_one(blocks, output_claims, variants)) == [], "\n".join(wrong)


def transcripts(text: str) -> list[tuple[list[str], list[str]]]:
    """(argv, the lines shown) of each ```text block that starts with ``$ gitscale …``."""
    found = []
    for block in fenced_blocks(text, "text"):
        first, *shown = block.rstrip("\n").splitlines()
        if first.startswith("$ gitscale "):
            found.append((shlex.split(first[2:])[1:], shown))
    return found


def test_a_transcript_shows_all_that_its_command_prints(variants: list[Variant]) -> None:
    """A ``$ gitscale validate --repo .`` block is what a reader sees, every line: its summary
    line, on stdout after the errors, was left out once. Run from each variant's folder."""
    shown = transcripts(GUIDE.read_text())
    assert shown
    wrong = []
    for argv, lines in shown:
        outputs = []
        for variant in variants:
            with pytest.MonkeyPatch.context() as patch:
                patch.chdir(variant.root)
                patch.setenv("GITSCALE_CACHE_DIR", "")  # no cache outside tmp
                # the guide's transcript is the in-process check's (as on a machine without
                # kubeconform): the same whether or not this one has it on PATH
                patch.setattr("gitscale.manifest.validate.kubeconform_path", lambda: None)
                outputs.append(call(argv)[1])
        if lines not in outputs:
            wrong.append((argv, lines, outputs))
    assert wrong == []


def test_the_runnerset_table_shows_the_crds_columns() -> None:
    (crd,) = [d for d in yaml.safe_load_all(CRD.read_text()) if d]
    (version,) = crd["spec"]["versions"]
    columns = ["NAME", *(c["name"].upper() for c in version["additionalPrinterColumns"])]
    tables = [b.splitlines() for b in fenced_blocks(GUIDE.read_text(), "text")
              if b.startswith("NAME ")]
    assert tables
    for table in tables:
        assert table[0].split() == columns
        assert all(len(row.split()) == len(columns) for row in table[1:])


def test_every_gitscale_option_of_the_guide_is_real() -> None:
    commands = command_options()
    lines = gitscale_lines(GUIDE.read_text())
    assert len(lines) >= 7
    wrong = []
    for line in lines:
        command, *words = shlex.split(line)[1:]
        if command not in commands:
            wrong.append(f"{line}: no command {command}")
            continue
        wrong += [f"{line}: {w}" for w in words
                  if w.startswith("-") and w.split("=")[0] not in commands[command] | {"--help"}]
    assert wrong == []


def check_commands(text: str) -> Iterator[list[str]]:
    """The guide's commands that need no source's token: `plan --demand`, `validate`,
    `history`."""
    for line in gitscale_lines(text):
        argv = shlex.split(line)[1:]
        if argv[0] in ("validate", "history") or (argv[0] == "plan" and "--demand" in argv):
            yield argv


def test_the_check_commands_run_on_a_scaffold_with_nothing_to_edit(
        variants: list[Variant], monkeypatch: pytest.MonkeyPatch) -> None:
    (complete, *_) = [v for v in variants if "edits left: none (no CHANGE-ME anywhere)." in
                      v.printed]
    monkeypatch.chdir(complete.root)  # step 2: every later command runs from the folder
    ran = []
    for argv in check_commands(GUIDE.read_text()):
        code, out = call(argv)
        assert code in ((0, 2) if argv[0] == "plan" else (0,)), (argv, out)
        ran.append(argv[0])
    assert {"plan", "validate", "history"} <= set(ran)


# the checks themselves: each catches what it is for

def test_the_path_words_are_paths_and_nothing_else() -> None:
    assert path_words("kubectl apply -f clusters/prod/x.yaml -k deploy/scaler/ gitscale.yaml "
                      "< ./token /dev/stdin https://a.b/c ghcr.io/a/b gitscale.dev/v1alpha1 "
                      "--from-file=k=./f spec.replicas .github/workflows/g.yml") == [
        "clusters/prod/x.yaml", "deploy/scaler/", "gitscale.yaml", ".github/workflows/g.yml"]


def test_the_block_checks_catch_a_claim_no_variant_makes(variants: list[Variant]) -> None:
    argocd = "kubectl apply -f argocd/application.yaml\n"
    flux = "kubectl apply -f flux/gitscale.yaml\n"
    assert true_of_one([argocd], path_claims, variants) == []
    assert true_of_one([flux], path_claims, variants) == []
    assert true_of_one([argocd + flux], path_claims, variants) != []  # no variant has both
    assert true_of_one(["kubectl apply -f clusters/prod/nope.yaml\n"], path_claims,
                       variants) != []
    typo = ("kubectl -n ci-runners create secret generic github-app \\\n"
            "  --from-file=github-token=./github-controller-token\n")
    assert true_of_one([typo], secret_claims, variants) != []
    assert true_of_one([typo.replace("github-token=", "github_token=")], secret_claims,
                       variants) == []
    assert true_of_one(["gh secret set GITHUB_TOKEN < ./github-source-token\n"], step_claims,
                       variants) != []  # GitHub refuses secret names starting GITHUB_
    assert true_of_one(["edits left: none\n"], output_claims, variants) != []
