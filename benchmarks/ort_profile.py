"""onnxruntime's own time per node (one thread, all graph optimisations), to set against
benchmarks/profile_kernels.sh. Its profiler adds about a microsecond per node.

    python -m benchmarks.ort_profile MODEL.onnx [RUNS] [TOP]
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import sys

import numpy as np

from aot.commands.bench import onnxruntime_session


def profiled_events(model: str, runs: int) -> list[dict]:
    """onnxruntime's profiler events for `runs` runs of the model on random inputs (one thread,
    all graph optimisations)."""
    session = onnxruntime_session(model, threads=1, profile=True)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
             for i in session.get_inputs()}
    for _ in range(runs):
        session.run(None, feeds)
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    return events


def main(argv: list[str]) -> int:
    model, runs, top = argv[0], int(argv[1]) if len(argv) > 1 else 50, int(argv[2]) if len(argv) > 2 else 25
    events = profiled_events(model, runs)
    times: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[(e["name"][: -len("_kernel_time")], e["args"].get("op_name", ""))].append(e["dur"])
    medians = sorted(((statistics.median(v), k) for k, v in times.items()), reverse=True)
    total = sum(m for m, _ in medians)
    print(f"total {total:.1f} us per run (node medians)")
    for us, (name, op) in medians[:top]:
        print(f"{us:9.1f} us {100 * us / total:5.1f}% {op:20s} {name[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
