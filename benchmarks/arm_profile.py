"""Where a Raspberry Pi package's guest instructions go, counted under qemu-user: per function
(each kernel is one) and per instruction mnemonic, from the blocks our TCG plugin saw executed.

    python -m benchmarks.arm_profile MODEL.onnx [--target rpi3] [--backend c|llvm] [--runs 10] [--top 15]
                                     [--hot-blocks N]
    python -m benchmarks.arm_profile --package DIR --target rpi4 ...   # a package compiled with
        `aot compile --target rpi4 -o DIR` and perhaps edited by hand (an experiment's C), made here

The package is built as benchmarks/arm.py builds it (static runner, the preset's flags); the
runner does `--runs` inferences, and the plugin (benchmarks/qemu_insn/insn_count.c, `blocks=`)
writes each executed block's address, length and executions. objdump's disassembly of the runner
turns that into a count per instruction, summed per symbol and per mnemonic. Start-up and file
I/O are included (they land in libc's functions, not in the model's).
"""

from __future__ import annotations

import argparse
import bisect
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arm import TARGETS, build_package, made_package
from benchmarks.arm_apt import ArmBenchError
from benchmarks.arm_qemu import QEMU_CPU, TARGET_CPU, build_plugin

OBJDUMP = {"rpi4": "aarch64-linux-gnu-objdump", "rpi3": "arm-linux-gnueabihf-objdump",
           "rpi5": "aarch64-linux-gnu-objdump"}
_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{2,8} ?)+\s+(\S+)")


@dataclass
class Disassembly:
    """Each instruction's address (sorted), mnemonic and enclosing symbol."""

    addresses: list[int] = field(default_factory=list)
    mnemonics: list[str] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def disassemble(objdump: str, binary: Path) -> Disassembly:
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(binary)], capture_output=True, text=True,
                          check=True).stdout
    d = Disassembly()
    symbol = "?"
    for line in text.splitlines():
        if line.endswith(">:"):
            symbol = line.split("<", 1)[1][:-2]
            continue
        parts = line.split("\t")
        if len(parts) < 2 or ":" not in parts[0]:
            continue
        try:
            address = int(parts[0].strip().rstrip(":"), 16)
        except ValueError:
            continue
        d.addresses.append(address)
        d.mnemonics.append(parts[1].strip().split(" ")[0] if parts[1].strip() else "?")
        d.symbols.append(symbol)
        d.lines.append(" ".join(parts[1:]).strip())
    return d


def block_profile(qemu: str, plugin: Path, command: list[str],
                  cpu: tuple[str, ...] | None = None) -> list[tuple[int, int, int]]:
    with tempfile.TemporaryDirectory(prefix="aot-arm-profile-") as tmp:
        out, blocks = Path(tmp) / "counts.txt", Path(tmp) / "blocks.txt"
        plugin_args = f"{plugin},out={out},blocks={blocks}"
        result = subprocess.run([qemu, *(QEMU_CPU[qemu] if cpu is None else cpu), "-plugin", plugin_args, *command],
                                capture_output=True, text=True)
        if result.returncode != 0 or not blocks.is_file():
            raise ArmBenchError(f"{qemu} {command[0]}: {(result.stderr.strip().splitlines() or ['failed'])[-1]}")
        rows = []
        for line in blocks.read_text().splitlines():
            vaddr, insns, executions = line.split()
            rows.append((int(vaddr, 16), int(insns), int(executions)))
    return rows


def attribute(d: Disassembly, blocks: list[tuple[int, int, int]]) -> tuple[Counter[str], dict[str, Counter[str]]]:
    """Executions per symbol, and per mnemonic within each symbol."""
    per_symbol: Counter[str] = Counter()
    per_mnemonic: dict[str, Counter[str]] = defaultdict(Counter)
    for vaddr, insns, executions in blocks:
        # Thumb blocks start at an odd address in some qemu versions; the instruction is at the even one.
        start = bisect.bisect_left(d.addresses, vaddr & ~1)
        for i in range(start, min(start + insns, len(d.addresses))):
            per_symbol[d.symbols[i]] += executions
            per_mnemonic[d.symbols[i]][d.mnemonics[i]] += executions
    return per_symbol, per_mnemonic


def print_hot_blocks(d: Disassembly, blocks: list[tuple[int, int, int]], count: int, runs: int) -> None:
    """The blocks that executed the most instructions, disassembled: where a kernel's inner loop is."""
    hottest = sorted(blocks, key=lambda b: b[1] * b[2], reverse=True)[:count]
    for vaddr, insns, executions in hottest:
        start = bisect.bisect_left(d.addresses, vaddr & ~1)
        symbol = d.symbols[start] if start < len(d.addresses) else "?"
        print(f"\nblock {vaddr:#x} in {symbol}: {insns} instructions x {executions / runs:.0f} per inference")
        for i in range(start, min(start + insns, len(d.addresses))):
            print(f"    {d.addresses[i]:8x}  {d.lines[i]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, nargs="?")
    parser.add_argument("--package", type=Path, help="profile this compiled package's folder, not MODEL's")
    parser.add_argument("--target", default="rpi3", choices=sorted(TARGETS))
    parser.add_argument("--backend", default="c", choices=("c", "llvm"))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--mnemonics", type=int, default=8, help="mnemonics shown per function")
    parser.add_argument("--hot-blocks", type=int, default=0, help="also disassemble the N hottest blocks")
    args = parser.parse_args(argv)
    if (args.model is None) == (args.package is None):
        parser.error("give MODEL or --package DIR")
    try:
        plugin = build_plugin()
        assert plugin is not None
        with tempfile.TemporaryDirectory(prefix="aot-arm-profile-build-") as tmp:
            package = (made_package(args.package.resolve(), args.target) if args.package
                       else build_package(args.model.resolve(), args.target, args.backend, Path(tmp)))
            command = [str(package.runner), "-r", str(args.runs), "-w", "0", "-o", tmp, *map(str, package.inputs)]
            blocks = block_profile(TARGETS[args.target][0], plugin, command, TARGET_CPU.get(args.target))
            disassembly = disassemble(OBJDUMP[args.target], package.runner)
            per_symbol, per_mnemonic = attribute(disassembly, blocks)
    except (ArmBenchError, subprocess.CalledProcessError) as e:
        print(f"arm_profile: error: {e}", file=sys.stderr)
        return 2
    total = sum(per_symbol.values())
    name = args.package.name if args.package else f"{args.model.name} {args.target} {args.backend}"
    print(f"{name}: {total / args.runs / 1e6:.3f} M instructions per "
          f"inference (start-up included, over {args.runs} runs)\n")
    for symbol, n in per_symbol.most_common(args.top):
        top = ", ".join(f"{m} {100 * c / n:.0f}%" for m, c in per_mnemonic[symbol].most_common(args.mnemonics))
        print(f"{100 * n / total:5.1f}%  {n / args.runs / 1e6:8.3f} M  {symbol}\n         {top}")
    print_hot_blocks(disassembly, blocks, args.hot_blocks, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
