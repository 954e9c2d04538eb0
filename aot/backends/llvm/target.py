"""Targets of the LLVM backend: a target preset -> TargetMachine, O3 pipeline, object file.

What a target *is* (triple, CPU, features, float ABI, OS) comes from the presets in targets/
(aot/targets/), so `--target rpi4` means the same to every part of aot. This module adds what
only object emission needs, by architecture: the ELF machine, pointer width, relocation model,
and how a package's build files recognise a C compiler that builds for the target (from
`$(CC) -dumpmachine`), so that `make` picks the matching object by itself.
"""

from __future__ import annotations

import functools
import platform
import struct
from dataclasses import dataclass

import llvmlite.binding as llvm

from aot.errors import AotError
from aot.targets import Target, host_preset_name, load_target, preset_names
from aot.targets.architectures import ARCHITECTURES, Architecture, architecture_of, host_architecture

EF_ARM_EABI_VER5 = 0x05000000
EF_ARM_ABI_FLOAT_HARD = 0x00000400
_ELF32_E_FLAGS = 36  # byte offset of e_flags in an ELF32 header
_ELF64_E_FLAGS = 48  # byte offset of e_flags in an ELF64 header
EF_RISCV_FLOAT_ABI_MASK, EF_RISCV_FLOAT_ABI_DOUBLE = 0x6, 0x4


# Host CPU features (LLVM's names) that code tuned for these CPUs may use beyond their
# architecture's baseline; used only to decide whether this machine can run an object.
_CPU_NEEDS = {
    "x86-64": (), "generic": (),
    "x86-64-v2": ("sse4.2", "popcnt"),
    "x86-64-v3": ("avx", "avx2", "fma", "bmi", "bmi2", "f16c", "lzcnt", "movbe"),
    "x86-64-v4": ("avx", "avx2", "fma", "bmi", "bmi2", "f16c", "lzcnt", "movbe", "avx512f", "avx512bw", "avx512cd",
                  "avx512dq", "avx512vl"),
    "cortex-a53": (), "cortex-a72": ("crc",),
    "cortex-a76": ("crc", "lse", "rdm", "dotprod", "fullfp16", "rcpc"),
}


def _architecture(arch: str) -> Architecture:
    found = architecture_of(arch)
    if found is None or not found.llvm_backend:
        supported = ", ".join(a.family for a in ARCHITECTURES if a.llvm_backend)
        raise AotError(f"the LLVM backend does not support architecture {arch!r} yet (supported: {supported}; "
                       "arm takes 32-bit ARM and Thumb)")
    return found


@dataclass(frozen=True)
class LlvmTarget:
    """A target preset as the LLVM backend uses it."""

    name: str            # the preset name, what --target and the Makefile's TARGET take
    triple: str          # normalised to 4 parts (what LLVM needs; names the object file)
    cpu: str
    features: str
    description: str
    reloc: str           # "pic" for Linux (objects also go into shared libraries), "static" bare metal
    machine: int
    pointer_bits: int
    hard_float_arm: bool      # AAPCS-VFP: floats passed in VFP registers
    unwind_tables: bool       # Linux: backtraces and profilers can walk through the model
    cc_machines: tuple[str, ...]  # `$(CC) -dumpmachine` patterns (make `%` wildcards) of its compilers
    cflags: tuple[str, ...]       # the preset's C flags, for the C parts (weights, runner)

    @property
    def arch(self) -> str:
        return self.triple.split("-", 1)[0]


def normalize_triple(triple: str) -> str:
    """arch-vendor-os-environment, as LLVM's Triple::normalize would spell it.

    LLVM reads a 3-part triple positionally: "thumbv7em-none-eabihf" becomes vendor "none", OS
    "eabihf" and *no* environment, so the backend silently falls back to the soft-float ABI.
    """
    parts = triple.split("-")
    if len(parts) == 4:
        return triple
    if len(parts) == 3 and parts[1] == "none":  # arch-none-env (bare metal, Rust/GCC style)
        return f"{parts[0]}-unknown-none-{parts[2]}"
    if len(parts) == 3 and parts[1] == "linux":  # arch-linux-env (GCC style)
        return f"{parts[0]}-unknown-linux-{parts[2]}"
    if len(parts) == 3:
        return f"{parts[0]}-{parts[1]}-{parts[2]}-unknown"
    raise AotError(f"target triple {triple!r}: expected arch-vendor-os[-environment]")


def from_preset(preset: Target) -> LlvmTarget:
    triple = normalize_triple(preset.triple)
    arch = _architecture(triple.split("-")[0])
    family = arch.family
    environment = triple.split("-")[3]
    features = preset.features
    hard = False
    if family == "arm":
        hard = preset.float_abi == "hard"
        if hard != environment.endswith("hf"):
            # LLVM takes the ARM float ABI from the triple's environment alone.
            raise AotError(f"target {preset.name}: float_abi {preset.float_abi!r} does not match the triple "
                           f"{preset.triple!r} (hard float needs an ...eabihf environment, and only it)")
        if preset.float_abi == "soft":
            features = ",".join(f for f in (features, "+soft-float") if f)
    if preset.os == "none":
        environments = ("eabi", "eabihf") if family == "arm" else ("elf",)
        machines = tuple(f"{cc_arch}-none-{env}" for cc_arch in arch.compiler_arches for env in environments)
    else:
        suffix = ("eabihf" if hard else "eabi") if family == "arm" else ""
        machines = tuple(f"{arch.compiler_arches[0]}-linux-{libc}{suffix}" for libc in ("gnu", "musl"))
    return LlvmTarget(
        name=preset.name, triple=triple, cpu=preset.cpu, features=features, description=preset.description,
        reloc="static" if preset.os == "none" else "pic", machine=arch.elf_machine, pointer_bits=arch.pointer_bits,
        hard_float_arm=hard, unwind_tables=preset.os != "none", cc_machines=machines,
        cflags=preset.cflags)


def get_target(name: str) -> LlvmTarget:
    """A preset name (see `aot targets`) or the path of a target .toml file."""
    return from_preset(load_target(name))


def host_target() -> LlvmTarget:
    """The preset that best fits the machine aot runs on (`aot targets`, e.g. x86_64-v4-vnni on an
    AVX-512 VNNI CPU): what `--backend llvm` builds without --target, as the C backend's package
    is built with -march=native and tiled for this CPU (a baseline SSE2 object wastes the tiles)."""
    host = host_architecture()
    if platform.system() == "Linux" and host is not None and host.llvm_backend and host.family in preset_names():
        return get_target(host_preset_name())
    raise AotError(f"--backend llvm: no default target for this {platform.system()} {platform.machine()} host; "
                   f"pass --target (one of: {', '.join(preset_names())}, or a .toml file)")


def runs_on_host(triple: str, cpu: str, features: str) -> bool:
    """Whether this process's machine can link and execute objects for that triple and CPU."""
    arch, _, os_name, _ = normalize_triple(triple).split("-")
    own = architecture_of(arch)
    if os_name != "linux" or platform.system() != "Linux" or own is None or own != host_architecture():
        return False
    if cpu in _CPU_NEEDS:
        needs = list(_CPU_NEEDS[cpu])
    elif cpu == llvm.get_host_cpu_name():
        needs = []
    else:
        return False  # tuned for a CPU we know nothing about: do not risk illegal instructions
    needs += [f[1:] for f in features.split(",") if f.startswith("+")]
    if not needs:
        return True
    try:
        host = llvm.get_host_cpu_features()
    except RuntimeError:
        return False
    return all(host.get(n, False) for n in needs)


@functools.cache
def _initialise_llvm() -> None:
    # The 32-bit Arm backend's default instruction scheduler hoists every load of a long unrolled
    # block above the multiply-adds that use them; with 16 NEON registers the loaded vectors are
    # then spilled and reloaded (MNIST on rpi3: 1.22 M guest instructions per inference, a third of
    # them stack traffic and its address arithmetic; 0.49 M in source order). The register tiles
    # already order their loads next to their uses. x86 and AArch64 code is byte-identical either
    # way. The option is process-wide, so it is set once for every target: a package's bytes must
    # not depend on what else the process compiled before.
    llvm.set_option("aot", "-pre-RA-sched=source")
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def target_machine(spec: LlvmTarget) -> llvm.TargetMachine:
    _initialise_llvm()
    try:
        target = llvm.Target.from_triple(spec.triple)
    except RuntimeError as e:
        raise AotError(f"target {spec.name}: LLVM cannot build for {spec.triple}: {e}") from None
    return target.create_target_machine(cpu=spec.cpu, features=spec.features, opt=3, reloc=spec.reloc,
                                        codemodel="default")


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    """LLVM's default O3 module pipeline (new pass manager), tuned like clang -O3."""
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = True
    options.loop_interleaving = True
    options.inlining_threshold = 250  # clang's -O3 threshold
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)


def emit_object(ir_text: str, spec: LlvmTarget, hidden: tuple[str, ...] = ()) -> bytes:
    """Parse, verify, optimise and compile an LLVM IR module into a relocatable ELF object.

    `hidden` names external symbols to reference with hidden visibility (defined elsewhere in the
    same library, so reached PC-relative instead of through the GOT).
    """
    machine = target_machine(spec)
    module = llvm.parse_assembly(ir_text)
    module.triple = spec.triple
    module.data_layout = str(machine.target_data)
    for name in hidden:
        module.get_global_variable(name).visibility = "hidden"
    module.verify()
    optimize(module, machine)
    module.verify()
    obj = bytearray(machine.emit_object(module))
    if spec.hard_float_arm:
        _mark_arm_hard_float(obj)
    if architecture_of(spec.arch) == architecture_of("riscv64"):
        _check_riscv_float_abi(obj, spec)
    return bytes(obj)


def _check_riscv_float_abi(obj: bytes | bytearray, spec: LlvmTarget) -> None:
    """LLVM takes the RISC-V float ABI from the features (+d: lp64d) and records it, with RVC, in
    e_flags, which the linkers compare with the C parts' objects: an LLVM that picked another ABI
    would pass floats in the wrong registers, so it is an error here rather than at link time."""
    (flags,) = struct.unpack_from("<I", obj, _ELF64_E_FLAGS)
    wanted = EF_RISCV_FLOAT_ABI_DOUBLE if "+d" in spec.features.split(",") else 0
    if flags & EF_RISCV_FLOAT_ABI_MASK != wanted:
        raise AotError(f"target {spec.name}: LLVM built a RISC-V object with e_flags {flags:#x}, not the "
                       f"{'lp64d' if wanted else 'lp64'} float ABI of the preset's features")


def _mark_arm_hard_float(obj: bytearray) -> None:
    """Set EF_ARM_ABI_FLOAT_HARD in the ELF header, as GNU as does for -mfloat-abi=hard.

    LLVM records the hard-float calling convention only in the Tag_ABI_VFP_args build attribute
    (which linkers check); loaders and tools such as readelf and file(1) read the header flag.
    """
    if obj[:4] != b"\x7fELF" or obj[4] != 1:
        raise AssertionError("expected an ELF32 object for an ARM target")
    (flags,) = struct.unpack_from("<I", obj, _ELF32_E_FLAGS)
    if flags & 0xFF000000 != EF_ARM_EABI_VER5:
        raise AssertionError(f"unexpected ARM EABI version in e_flags {flags:#x}")
    struct.pack_into("<I", obj, _ELF32_E_FLAGS, flags | EF_ARM_ABI_FLOAT_HARD)
