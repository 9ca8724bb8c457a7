"""Pick each set's source and read demand once per pass."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gitscale.config import Config, RunnerSetConfig, safe_repo_path
from gitscale.demand import DemandReading
from gitscale.demand.file import FileSource
from gitscale.errors import DemandError


def read_demand(root: Path, config: Config, demand_file: Path | None) -> DemandReading:
    """``--demand FILE`` replaces every source; otherwise each set's own source is asked.

    A broken source affects only its sets: they get an error and stay untouched.
    """
    if demand_file is not None:
        return FileSource(demand_file, str(demand_file), strict=True).read(config.sets)
    reading = DemandReading()
    by_file: dict[str, list[RunnerSetConfig]] = defaultdict(list)
    for runner_set in config.sets:
        if runner_set.source.kind == "file":
            by_file[str(runner_set.source.settings)].append(runner_set)
        else:
            reading.errors[runner_set.name] = (
                f"the {runner_set.source.kind} source is not available in this version of "
                "gitscale; use a file source or --demand")
    for rel, sets in by_file.items():
        try:
            path = safe_repo_path(root, rel, config.path, DemandError)
            reading.merge(FileSource(path, rel).read(sets))
        except DemandError as exc:
            for runner_set in sets:
                reading.errors[runner_set.name] = str(exc)
    return reading
