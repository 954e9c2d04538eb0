"""The machine's single-core fp32 peak, measured: independent FMA chains in the widest vector
registers of the host's preset (aot.targets.host_preset_name), built with -O2 -march=native.
`aot bench` reports achieved GFLOP/s against it; `python -m aot.host.peak` prints it."""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

from aot.host.build import host_cc
from aot.targets import host_preset_name, load_target

# Twelve independent accumulators as named locals (an array may be kept in memory), each updated
# by one fused multiply-add per iteration: enough chains to cover the FMA latency on two pipes.
# They start from different values: identical chains would be merged into one by the compiler.
_SOURCE = r"""
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <time.h>
typedef float v __attribute__((vector_size(BYTES)));
int main(void) {
    v x, y;
    for (int i = 0; i < (int)(BYTES / 4); ++i) { x[i] = 1.0f - 1e-7f * i; y[i] = 1e-7f; }
    v DECLARATIONS;
    double best = 1e30;
    for (int round = 0; round < ROUNDS; ++round) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long k = 0; k < ITERATIONS; ++k) { UPDATES }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (s < best) best = s;
    }
    v sum = SUM;
    printf("%.3f %g\n", 2.0 * CHAINS * (BYTES / 4) * (double)ITERATIONS / best / 1e9, (double)sum[0]);
    return 0;
}
"""
_CHAINS = 12
# Many short rounds, the best kept: a round that a context switch or another process's burst hits
# is simply not the best, where a few long rounds were each likely to be hit on a busy machine.
_ROUNDS, _ITERATIONS = 40, 2_000_000
_SOURCE = (_SOURCE.replace("DECLARATIONS", ", ".join(f"a{i} = y * {i + 1}.0f" for i in range(_CHAINS)))
           .replace("UPDATES", " ".join(f"a{i} = a{i} * x + y;" for i in range(_CHAINS)))
           .replace("SUM", " + ".join(f"a{i}" for i in range(_CHAINS))))


@functools.cache
def peak_gflops(cc: str | None = None, preset: str | None = None) -> float:
    """Best of 40 rounds of 2M iterations of 12 independent vector FMAs, in the registers of
    `preset` (default: the host's; one this machine runs, e.g. x86_64-v3's ymm on an AVX-512 CPU).
    Measured once per process: several benches in one process compare with the same figure."""
    bits = load_target(preset or host_preset_name()).vector_bits or 128
    cc = cc or host_cc()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "peak.c", Path(tmp) / "peak"
        src.write_text(_SOURCE)
        subprocess.run([cc, "-O2", "-march=native", "-ffp-contract=fast", "-std=c99", f"-DBYTES={bits // 8}",
                        f"-DCHAINS={_CHAINS}", f"-DROUNDS={_ROUNDS}", f"-DITERATIONS={_ITERATIONS}L",
                        str(src), "-o", str(exe)], check=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return float(out.split()[0])


if __name__ == "__main__":
    print(f"single-core fp32 peak ({host_preset_name()}): {peak_gflops():.1f} GFLOP/s")
