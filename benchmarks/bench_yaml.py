#!/usr/bin/env python3
"""Which YAML reader reads what, and how fast (issue 16: is yamlio/fast.py's libyaml event loop
still worth its code next to the line reader?).

    .venv/bin/python benchmarks/bench_yaml.py              # --sets 10000 --repeats 5

``read.load_documents`` tries, in order: JSON (``json``), the line reader
(``yamlio/block.py``: the usual block style), libyaml's events into plain data (the loop in
``yamlio/fast.py``), and PyYAML's strict C loader (after the depth and alias checks). Each
corpus below is read by every reader that takes it:

  manifests       --sets manifests of bench_reconcile.py's fixture (block style, comments, flow
                  collections on one line): what the line reader takes
  crlf            the same with CRLF line ends (declined by the line reader)
  block-scalar    the same with a `command: |` script in the container (declined)
  multiline-flow  gitscale.yaml of --sets sets, each policy a flow mapping over two lines
                  (declined)
  crd-shipped     gitscale's RunnerSet CRD (deploy/crds/), read by every pass that validates
  crd-arc         actions-runner-controller's RunnerDeployment CRD (fixtures/reference/crds/),
                  read when a repo commits it: a large file of long descriptions

Readers: ``block`` (the line reader), ``events`` (fast.py's loop), ``pyyaml`` (what
load_documents does when fast.py's loop declines: check_depth, check_aliases and the strict
C loader), ``pyyaml-bare`` (``yaml.load_all`` with ``CSafeLoader``, no checks). Each figure is
the best of --repeats reads of the whole corpus, the caches warm (each distinct line and plain
scalar is read once per process, as in a pass over many files); every reader's data is checked
equal to PyYAML's. Results: a table and benchmarks/results/yaml-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_reconcile as br  # noqa: E402 - the manifest fixture

PROJECT = HERE.parent

SCRIPT = """\
          command:
            - /bin/sh
            - -c
          args:
            - |
              set -eu
              ./config.sh --unattended --ephemeral
              exec ./run.sh
"""


def corpora(sets: int) -> dict[str, list[str]]:
    fx = br.Fixture(sets, 10, 1, 20261122)
    manifests = [fx.texts[name] for name in fx.names]
    scripted = [text.replace("          image: ", SCRIPT + "          image: ", 1)
                for text in manifests]
    config = fx.config_text().replace(", maxReplicas:", ",\n              maxReplicas:")
    crds = PROJECT / "fixtures" / "reference" / "crds"
    return {
        "manifests": manifests,
        "crlf": [text.replace("\n", "\r\n") for text in manifests],
        "block-scalar": scripted,
        "multiline-flow": [config],
        "crd-shipped": [(PROJECT / "deploy" / "crds" / "runnersets.gitscale.dev.yaml")
                        .read_text()] * 20,
        "crd-arc": [(crds / "actions.summerwind.dev_runnerdeployments.yaml").read_text()],
    }


def readers() -> dict[str, Callable[[str], Any]]:
    import yaml

    from gitscale.yamlio import block, fast, read

    def events(text: str) -> Any:
        # fast.load_all with the line reader declining: what a text it declines costs there
        real = block.load
        block.load = _declined  # type: ignore[assignment]
        try:
            return fast.load_all(text)
        finally:
            block.load = real  # type: ignore[assignment]

    def pyyaml(text: str) -> Any:
        real = fast.load_all
        fast.load_all = _unsupported  # type: ignore[assignment]
        try:
            return [d.data for d in read.load_documents(text, "bench")]
        finally:
            fast.load_all = real  # type: ignore[assignment]

    return {
        "block": lambda text: block.load(text, fast.scalar)[0],
        "events": events,
        "pyyaml": pyyaml,
        "pyyaml-bare": lambda text: list(yaml.load_all(text, Loader=yaml.CSafeLoader)),
    }


def _declined(*_: Any, **__: Any) -> Any:
    from gitscale.yamlio import block

    raise block.Deferred("declined (benchmark)")


def _unsupported(*_: Any, **__: Any) -> Any:
    from gitscale.yamlio import fast

    raise fast.Unsupported("off (benchmark)")


def path_taken(text: str) -> str:
    """Which reader ``load_documents`` uses for ``text``."""
    from gitscale.yamlio import block, fast

    if fast._json(text) is not None:
        return "json"
    try:
        block.load(text, fast.scalar)
        return "block"
    except block.Deferred:
        pass
    try:
        fast.load_all(text)
        return "events"
    except fast.Unsupported:
        return "pyyaml"


def timed(read: Callable[[str], Any], texts: list[str], repeats: int) -> tuple[float, Any]:
    best, data = float("inf"), None
    for _ in range(repeats):
        gc.collect()
        gc.disable()  # (a pass runs without the collector too: cache.gc_paused)
        started = time.perf_counter()
        data = [read(text) for text in texts]
        best = min(best, time.perf_counter() - started)
        gc.enable()
    return best, data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--results", type=Path, default=br.RESULTS)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"sets": args.sets, "repeats": args.repeats, "corpora": {}}
    all_readers = readers()
    print(f"{'corpus':<15} {'files':>6} {'MB':>6}  {'path':<8}" + "".join(
        f" {name:>12}" for name in all_readers) + "   events/pyyaml")
    for name, texts in corpora(args.sets).items():
        paths = sorted({path_taken(text) for text in texts})
        expected = timed(all_readers["pyyaml-bare"], texts, 1)[1]
        row: dict[str, float | None] = {}
        for reader, read in all_readers.items():
            try:
                seconds, data = timed(read, texts, args.repeats)
            except Exception:  # noqa: BLE001 - the reader declines this corpus
                row[reader] = None
                continue
            if data != expected:
                raise SystemExit(f"{reader} read {name} differently from PyYAML")
            row[reader] = seconds
        size = sum(len(t) for t in texts) / 1e6
        ratio = (row["pyyaml"] or 0) / row["events"] if row["events"] else None
        results["corpora"][name] = {"files": len(texts), "mb": size, "paths": paths,
                                    "seconds": row, "pyyaml_over_events": ratio}
        print(f"{name:<15} {len(texts):>6} {size:>6.1f}  {','.join(paths):<8}" + "".join(
            f" {'-' if s is None else f'{s:.3f}s':>12}" for s in row.values())
            + (f"   {ratio:.1f}x" if ratio else ""))
    out = args.results / f"yaml-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
