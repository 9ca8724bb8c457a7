"""Writing YAML for people: every file gitscale generates (``init``'s scaffold, the CRD, the
reservations file) goes through ``dump``.

PyYAML's dumper writes an anchor and an alias (``&id001`` / ``*id001``) for every object that
appears twice in the data, e.g. one probe dict shared by a readiness and a liveness probe. That is
valid YAML, but readers trip on it, some tools refuse it (kustomize's and Argo CD's diffs show
the alias, not the value) and an edit to the anchored copy silently changes the other. Here a
shared object is written out in full each time it appears.
"""
from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _dumper() -> Any:
    import yaml

    # PyYAML's own SafeDumper, as yaml.safe_dump: the same bytes, only without aliases
    class NoAliasDumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return NoAliasDumper


def dump(data: Any, **options: Any) -> str:
    """``data`` as block-style YAML, keys in their order, no anchors or aliases. ``options``
    are PyYAML's (``width``, ``default_flow_style``, ``default_style``)."""
    import yaml

    options.setdefault("sort_keys", False)
    text: str = yaml.dump(data, Dumper=_dumper(), **options)
    return text
