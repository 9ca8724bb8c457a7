"""Validation by kubeconform when it is on PATH (strict), given the schemas of our CRDs; what it
reports read back as problems, each at its object and, by the JSON pointer it quotes, its line.
A kubeconform that hangs or cannot run is a problem to show, never a crash; one that hung is
ended with everything it started (its process group: a wrapper script's children too), and
``Validation`` runs it no more in that pass (``Hung``)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from gitscale.manifest.crd_schemas import SchemaValidator
from gitscale.manifest.problem import Problem


def kubeconform_path() -> str | None:
    return shutil.which("kubeconform")


KUBECONFORM_TIMEOUT = 120  # seconds for one manifest (it answers in milliseconds)
_POINTER = re.compile(r"'(/[^']*)'")


class Hung(Exception):
    """kubeconform gave no answer within ``KUBECONFORM_TIMEOUT`` and was ended."""

    def __init__(self, binary: str) -> None:
        super().__init__(f"{binary} gave no answer within {KUBECONFORM_TIMEOUT} s")


def _end(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc``'s process group (a wrapper script's children hold its pipes too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # already gone
        pass
    proc.wait()


def run_kubeconform(binary: str, text: str, validator: SchemaValidator) -> list[Problem]:
    """Validate one manifest with kubeconform (strict), giving it schemas for our CRDs.
    Raises ``Hung`` when it gives no answer in time."""
    with tempfile.TemporaryDirectory(prefix="gitscale-schemas-") as schemas:
        for (api_version, kind), schema in validator.schemas.items():
            group, version = api_version.split("/")
            target = Path(schemas) / group / f"{kind.lower()}_{version}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(schema))
        template = schemas + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
        try:
            proc = subprocess.Popen(
                [binary, "-strict", "-output", "json", "-schema-location", "default",
                 "-schema-location", template, "-"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, errors="replace", start_new_session=True)
        except OSError as exc:  # not a program this machine runs
            return [Problem("kubeconform", f"{binary} cannot be run: "
                            f"{exc.strerror or type(exc).__name__}")]
        with proc:
            try:
                stdout, stderr = proc.communicate(text, timeout=KUBECONFORM_TIMEOUT)
            except subprocess.TimeoutExpired:  # (a kubeconform on PATH that hangs)
                _end(proc)
                raise Hung(binary) from None
    try:
        report = json.loads(stdout or "{}")
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict):  # not kubeconform's JSON report
        return [Problem("kubeconform", (stderr or stdout).strip()[:500]
                        or f"exit {proc.returncode}")]
    problems = []
    resources = report.get("resources")
    for item in resources if isinstance(resources, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("status") in ("statusInvalid", "statusError"):
            name = f"{item.get('kind', '?')}/{item.get('name', '?')}"
            message = str(item.get("msg", "invalid"))
            # kubeconform's messages quote the JSON pointer of the value: its line in the file
            pointer = _POINTER.search(message)
            at = tuple(int(p) if p.isdigit() else p.replace("~1", "/").replace("~0", "~")
                       for p in pointer[1].split("/")[1:]) if pointer else ()
            problems.append(Problem(name, message, at, None,
                                    (str(item.get("kind")), str(item.get("name")))))
    if not problems and proc.returncode != 0:
        problems.append(Problem("kubeconform", (stderr or "failed").strip()[:500]))
    return problems
