"""The capabilities record (aot/targets/capabilities.py): what each preset can do, what several
share, and that lowerings read it rather than an architecture's name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import aot.pipeline
from aot.targets import Int8Dot, capabilities, common_capabilities, load_target

REPO = Path(__file__).resolve().parent.parent

# preset -> (multiply by lane, lane multiply fused, compilers vectorise floats, int8 step, L2 per core)
EXPECTED = {
    "x86_64": (False, True, True, "portable", 512 << 10),
    "x86_64-v3": (False, True, True, "vpmaddwd", 512 << 10),
    "x86_64-v4": (False, True, True, "vpmaddwd", 1 << 20),
    "x86_64-v4-vnni": (False, True, True, "vpdpbusd", 1 << 20),
    "aarch64": (True, True, True, "neon", 512 << 10),
    "rpi4": (True, True, True, "neon", 512 << 10),
    "rpi5": (True, True, True, "sdot", 512 << 10),
    "rpi3": (True, False, False, "neon", 512 << 10),
    "rpi-zero2": (True, False, False, "neon", 512 << 10),
    "cortex-m4f": (False, False, True, "portable", 512 << 10),
    "cortex-m7": (False, False, True, "portable", 512 << 10),
}


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_each_preset_has_its_capabilities(preset: str) -> None:
    caps = capabilities(load_target(preset))
    found = (caps.multiply_by_lane, caps.lane_multiply_fused, caps.compilers_vectorise_floats, caps.int8_dot.kind,
             caps.l2_bytes)
    assert found == EXPECTED[preset]
    assert caps.vector_bits == load_target(preset).vector_bits


def test_several_targets_share_what_all_of_them_can_do() -> None:
    rpi3, rpi4, v3, m7 = (load_target(t) for t in ("rpi3", "rpi4", "x86_64-v3", "cortex-m7"))
    both_arm = common_capabilities([rpi3, rpi4])
    assert both_arm.int8_dot == Int8Dot("neon") and both_arm.vector_registers == 16
    assert both_arm.multiply_by_lane and not both_arm.lane_multiply_fused and not both_arm.compilers_vectorise_floats
    mixed = common_capabilities([rpi4, v3])
    assert mixed.int8_dot.kind == "auto" and not mixed.multiply_by_lane and mixed.vector_bits == 128
    assert common_capabilities([rpi4, m7]).int8_dot.kind == "portable"


def _user_target(tmp_path: Path, base: str, **changes: object) -> Path:
    text = Path(load_target(base).source).read_text()
    for key, value in changes.items():
        line = f"{key} = {value!r}".replace("'", '"')
        text, count = re.subn(rf"(?m)^{key} = .*$", line, text)
        if not count:
            text += line + "\n"
    path = tmp_path / f"{base}-custom.toml"
    path.write_text(text)
    return path


def test_a_target_is_known_by_its_capabilities_not_its_register_count(tmp_path: Path) -> None:
    """A 64-bit Arm target with 16 vector registers keeps 64-bit Arm's fused by-lane tiles; only an
    unfused lane multiply (32-bit NEON) takes the 4-row by-scalar shape."""
    narrow = load_target(_user_target(tmp_path, "rpi4", vector_registers=16))
    tiles = aot.pipeline.tiles_for([narrow])
    assert tiles.lane_broadcasts and not tiles.by_scalar and tiles.registers == 16
    assert aot.pipeline.tiles_for([load_target("rpi3")]).by_scalar


def test_a_target_file_may_give_its_l2_cache(tmp_path: Path) -> None:
    big = load_target(_user_target(tmp_path, "rpi4", l2_cache_bytes=2 << 20))
    assert capabilities(big).l2_bytes == 2 << 20 and aot.pipeline.tiles_for([big]).l2_bytes == 2 << 20
    assert big.to_json()["l2_cache_bytes"] == 2 << 20


# Architecture, ISA and instruction names a lowering must not test for: what a target can do is
# read from the capabilities record. Comments and docstrings may cite where a figure was measured.
ARCH_WORDS = re.compile(r"(?i)(x86|i[3-6]86|amd64|aarch64|arm64|armv\d|\barm\b|thumb|neon|\bsse|avx|vnni|sdot|"
                        r"vpdpbusd|vpmaddwd|cortex|riscv|rv64|rvv|rpi)")


def _names_and_strings(tree: ast.AST) -> list[tuple[int, str]]:
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            found.append((node.lineno, node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((node.lineno, node.name))
        elif isinstance(node, ast.arg):
            found.append((node.lineno, node.arg))
    return found


def test_no_lowering_names_an_architecture() -> None:
    offenders = []
    for folder in ("aot/ops", "aot/lowering"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for line, text in _names_and_strings(ast.parse(path.read_text())):
                if ARCH_WORDS.search(text):
                    offenders.append(f"{path.relative_to(REPO)}:{line}: {text[:60]!r}")
    assert not offenders, "\n".join(offenders)


def test_the_check_finds_an_architecture_in_code() -> None:
    code = 'def pick(ctx):\n    """On aarch64 (a docstring may say)."""\n    return ctx.arch == "armv7"\n'
    assert [text for _, text in _names_and_strings(ast.parse(code)) if ARCH_WORDS.search(text)] == ["armv7"]
