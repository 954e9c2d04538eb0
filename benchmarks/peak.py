"""The machine's single-core fp32 peak, measured: independent FMA chains in the widest vector
registers of the host's preset (aot.targets.host_preset_name), built with -O2 -march=native."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from aot.targets import host_preset_name, load_target

_SOURCE = r"""
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <time.h>
typedef float v __attribute__((vector_size(BYTES)));
int main(void) {
    v x, y, a[CHAINS];
    for (int i = 0; i < (int)(BYTES / 4); ++i) { x[i] = 1.0f - 1e-7f * i; y[i] = 1e-7f; }
    for (int c = 0; c < CHAINS; ++c) a[c] = y;
    double best = 1e30;
    for (int round = 0; round < 7; ++round) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long k = 0; k < 20000000L; ++k) {
#pragma GCC unroll 32
            for (int c = 0; c < CHAINS; ++c) a[c] = a[c] * x + y;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (s < best) best = s;
    }
    v sum = a[0];
    for (int c = 1; c < CHAINS; ++c) sum += a[c];
    printf("%.3f %g\n", 2.0 * CHAINS * (BYTES / 4) * 20000000.0 / best / 1e9, (double)sum[0]);
    return 0;
}
"""


def peak_gflops(cc: str = "cc") -> float:
    """Best of 7 rounds of 20M iterations of 12 independent vector FMAs (enough to cover the FMA
    latency on two pipes)."""
    bits = load_target(host_preset_name()).vector_bits or 128
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "peak.c", Path(tmp) / "peak"
        src.write_text(_SOURCE)
        subprocess.run([cc, "-O2", "-march=native", "-ffp-contract=fast", "-std=c99", f"-DBYTES={bits // 8}",
                        "-DCHAINS=12", str(src), "-o", str(exe)], check=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return float(out.split()[0])


if __name__ == "__main__":
    print(f"single-core fp32 peak ({host_preset_name()}): {peak_gflops():.1f} GFLOP/s")
