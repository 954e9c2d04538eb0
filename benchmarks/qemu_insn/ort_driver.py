"""Runs inside the aarch64 sysroot's python3.11 under qemu (benchmarks/arm_ort.py): one onnxruntime
session like `aot bench`'s (CPU provider, one intra-op and one inter-op thread, all graph
optimisations), one first inference, then N more.

    python3.11 ort_driver.py SITE_PACKAGES MODEL.onnx FEEDS.npz N

Only the inferences differ between runs with different N, so a count difference over the
difference in N is the count of one inference (Python's and onnxruntime's per-call overhead
included: about 40 K instructions, measured on a one-node Relu model). The garbage collector is
off around the loop: a collection that happens in one run and not in the other would not be an
inference's cost.
"""

import gc
import sys

site, model, feeds_path, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, site)

import numpy as np  # noqa: E402 - from the sysroot's site folder added just above
import onnxruntime as ort  # noqa: E402

options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
options.log_severity_level = 3
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
with np.load(feeds_path) as data:
    feeds = {name: data[name] for name in data.files}
session.run(None, feeds)
gc.collect()
gc.disable()
for _ in range(repeat):
    session.run(None, feeds)
gc.enable()
