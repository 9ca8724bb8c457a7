"""`gitscale validate`: every manifest gitscale manages, against its schema; and neither they nor
gitscale.yaml may still hold a ``CHANGE-ME`` that `gitscale init` could not fill in."""
from __future__ import annotations

import click

from gitscale.commands import EXIT_ERROR, EXIT_OK, RepoOptions
from gitscale.config.load import RunnerSetConfig, load_config
from gitscale.plan.manifest_files import read_manifest
from gitscale.manifest.target import NoSuchObject, Target, object_key, read_target
from gitscale.manifest.validate import Validation
from gitscale.repo.workspace import open_workspace
from gitscale.yamlio.placeholders import placeholder_problems


def run_validate(opts: RepoOptions) -> int:
    problems: list[str] = []
    checked = skipped = 0
    with open_workspace(opts.repo, opts.branch) as ws:
        config = load_config(ws.root, opts.config)
        # values `gitscale init` could not fill in: the config is not finished
        problems += placeholder_problems(config.path, config.text)
        validation = Validation(ws.root, lambda: ws.git.out("ls-files").splitlines())
        files: dict[str, list[tuple[RunnerSetConfig, Target]]] = {}
        texts: dict[str, str] = {}
        for runner_set in config.sets:
            text = read_manifest(ws.root, runner_set, config)
            texts[runner_set.manifest] = text
            try:
                target = read_target(runner_set.manifest, text, runner_set.object)
            except NoSuchObject as exc:
                raise config.blame(runner_set.name, object_key(runner_set.object),
                                   f"{exc.detail} in {runner_set.manifest}") from None
            files.setdefault(runner_set.manifest, []).append((runner_set, target))
        for path, sets in files.items():
            problems += placeholder_problems(path, texts[path])
            result = validation.check(path, texts[path], [target.obj for _, target in sets])
            problems += result.problems
            for runner_set, target in sets:
                if any(target.obj is o for o in result.unchecked):
                    skipped += 1
                    click.echo(f"skipped {runner_set.name}: no schema for "
                               f"{target.obj.get('apiVersion')} {target.kind} "
                               "(install kubeconform to check built-in kinds)")
                else:
                    checked += 1
    for problem in problems:
        click.echo(f"invalid: {problem}", err=True)
    click.echo(f"{checked} checked with {validation.how}, {skipped} skipped, "
               f"{len(problems)} problems")
    return EXIT_ERROR if problems else EXIT_OK
