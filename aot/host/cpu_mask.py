"""Hiding some of this CPU's vector features from the code of this process, so that a library
that picks its kernels from CPUID (onnxruntime's MLAS does, once, when it is loaded) runs the
kernels it would run on a smaller CPU: `aot bench --target x86_64-v3 --onnxruntime-isa target`
then compares AVX2 code with onnxruntime's AVX2 kernels on an AVX-512 machine, as a user of an
AVX2 machine would see them.

Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, x86 CPUs with the `cpuid_fault` flag) makes
each CPUID instruction of this thread, and of the threads it starts, raise SIGSEGV; a handler in
a small C library answers it with the real leaf minus the hidden bits and steps over the
instruction. Other SIGSEGVs go to the handler that was there before.
"""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

from aot.errors import AotError
from aot.host.build import host_cc
from aot.targets import Target


@dataclass(frozen=True)
class HiddenBits:
    """Bits cleared from CPUID leaf 7's answers (subleaf 0: EBX, ECX, EDX; subleaf 1: EAX) and
    from leaf 1's ECX."""
    leaf1_ecx: int = 0
    leaf7_ebx: int = 0
    leaf7_ecx: int = 0
    leaf7_edx: int = 0
    leaf7_1_eax: int = 0

    def masks(self) -> tuple[int, ...]:
        """The five masks in field order: aot_hide_cpu_features's arguments, and a command line's."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def __or__(self, other: HiddenBits) -> HiddenBits:
        return HiddenBits(*(a | b for a, b in zip(self.masks(), other.masks())))

    def any(self) -> bool:
        return any(self.masks())


def _bits(*positions: int) -> int:
    return sum(1 << p for p in positions)


# Intel SDM vol. 2A, CPUID. AVX-512: F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31 (EBX);
# VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14 (ECX); 4VNNIW 2, 4FMAPS 3, VP2INTERSECT 8,
# AMX-BF16 22, FP16 23, AMX-TILE 24, AMX-INT8 25 (EDX); BF16 5 (leaf 7.1 EAX).
AVX512 = HiddenBits(leaf7_ebx=_bits(16, 17, 21, 26, 27, 28, 30, 31), leaf7_ecx=_bits(1, 6, 11, 12, 14),
                    leaf7_edx=_bits(2, 3, 8, 22, 23, 24, 25), leaf7_1_eax=_bits(5))
# AVX-VNNI (leaf 7.1 EAX bit 4) and AVX512-VNNI: int8 dot products that x86-64-v3 and v4 lack.
VNNI = HiddenBits(leaf7_ecx=_bits(11), leaf7_1_eax=_bits(4))
# FMA 12, AVX 28, F16C 29 (leaf 1 ECX); AVX2 5 (leaf 7 EBX): what the SSE-only x86-64 lacks.
AVX = HiddenBits(leaf1_ecx=_bits(12, 28, 29), leaf7_ebx=_bits(5))


def hidden_for(target: Target) -> HiddenBits:
    """The features of this machine that `target`'s code cannot use (x86 only; none elsewhere)."""
    if target.arch != "x86_64":
        return HiddenBits()
    hidden = HiddenBits()
    if target.vector_bits < 512:
        hidden = hidden | AVX512
    if target.vector_bits < 256:
        hidden = hidden | AVX
    if target.int8_dot != "vpdpbusd":
        hidden = hidden | VNNI
    return hidden


_SOURCE = r"""
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static struct sigaction previous;
static unsigned hide_leaf1_ecx, hide_leaf7_ebx, hide_leaf7_ecx, hide_leaf7_edx, hide_leaf7_1_eax;

/* CPUID with faulting off for the moment: the handler runs on the thread that faulted. */
static void real_cpuid(unsigned leaf, unsigned subleaf, unsigned r[4]) {
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    greg_t *regs = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
    unsigned r[4], leaf, subleaf;
    (void)sig;
    /* A faulting CPUID is a general-protection fault, reported as SI_KERNEL. */
    if (info->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
        sigaction(SIGSEGV, &previous, NULL);  /* the instruction faults again, into that handler */
        return;
    }
    leaf = (unsigned)regs[REG_RAX];
    subleaf = (unsigned)regs[REG_RCX];
    real_cpuid(leaf, subleaf, r);
    if (leaf == 1) r[2] &= ~hide_leaf1_ecx;
    if (leaf == 7 && subleaf == 0) {
        r[1] &= ~hide_leaf7_ebx;
        r[2] &= ~hide_leaf7_ecx;
        r[3] &= ~hide_leaf7_edx;
    }
    if (leaf == 7 && subleaf == 1) r[0] &= ~hide_leaf7_1_eax;
    regs[REG_RAX] = r[0];
    regs[REG_RBX] = r[1];
    regs[REG_RCX] = r[2];
    regs[REG_RDX] = r[3];
    regs[REG_RIP] += 2;
}

/* 0, or -1 with errno set (ENODEV: this CPU or kernel has no CPUID faulting). */
int aot_hide_cpu_features(unsigned leaf1_ecx, unsigned leaf7_ebx, unsigned leaf7_ecx, unsigned leaf7_edx,
                          unsigned leaf7_1_eax) {
    struct sigaction action;
    hide_leaf1_ecx = leaf1_ecx;
    hide_leaf7_ebx = leaf7_ebx;
    hide_leaf7_ecx = leaf7_ecx;
    hide_leaf7_edx = leaf7_edx;
    hide_leaf7_1_eax = leaf7_1_eax;
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1) != 0) return -1;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &previous) != 0) return -1;
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        sigaction(SIGSEGV, &previous, NULL);
        return -1;
    }
    return 0;
}
"""

# The handler's library, loaded for the life of the process once installed, and what it hides.
_installed: list[tuple[ctypes.CDLL, HiddenBits]] = []


def hide_cpu_features(hidden: HiddenBits) -> None:
    """From now on CPUID, in this thread and the threads it starts, does not report `hidden`.
    Code that has already read CPUID (a library loaded before this call) keeps what it chose.
    Once per process: a later call asking for the same is a no-op, for other bits an error."""
    if not hidden.any():
        return
    if _installed:
        if _installed[0][1] != hidden:
            raise AotError("this process already hides other CPU features from onnxruntime: run the other "
                           "--onnxruntime-isa comparison in a process of its own")
        return
    if platform.machine() not in ("x86_64", "AMD64") or not sys.platform.startswith("linux"):
        raise AotError("hiding CPU features from onnxruntime needs Linux on x86-64 (CPUID faulting)")
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "cpu_mask.c", Path(tmp) / "cpu_mask.so"
        src.write_text(_SOURCE)
        subprocess.run([host_cc(), "-O2", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
        library = ctypes.CDLL(str(lib), use_errno=True)
    function = library.aot_hide_cpu_features
    function.argtypes = [ctypes.c_uint] * 5
    if function(*hidden.masks()) != 0:
        raise AotError("this machine cannot hide CPU features from onnxruntime: no CPUID faulting "
                       f"(arch_prctl ARCH_SET_CPUID: errno {ctypes.get_errno()}; the CPU needs the cpuid_fault flag)")
    _installed.append((library, hidden))
