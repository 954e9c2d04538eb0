"""`aot targets`: the target presets, one line each (or as JSON)."""

from __future__ import annotations

import json

from aot.targets import list_targets
from aot.terminal import printable


def targets_command(as_json: bool) -> None:
    targets = list_targets()
    if as_json:
        print(json.dumps([t.to_json() for t in targets], sort_keys=True))
        return
    width = max(len(t.name) for t in targets)
    for t in targets:
        print(printable(f"{t.name:{width}}  {t.triple:32} {t.description}"))
