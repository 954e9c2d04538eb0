"""Hostile target files, odd names and terminals: a board file cannot write outside -o or run a
command through the package's Makefile or CMake files, every bad field gets one line naming the
file and the field, I/O fields named like C/C++ keywords or standard macros still give a package
that C, C++ and GNU-mode programs can use, and names reach the terminal without control codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aot.codegen.build_text import cmake_comment, cmake_quoted, make_comment, make_value
from aot.codegen.c_names import UniqueNames
from aot.codegen.reserved_names import _NAMES, is_reserved_public, needs_prefix
from aot.terminal import printable
from tests.test_cli import EXAMPLE, REPO, aot, assert_user_error

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PRESET = tomllib.loads((REPO / "targets" / "x86_64.toml").read_text())
MARKER = "MARKER"  # what the injected commands would create (relative: in the folder make runs in)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)  # JSON strings, numbers and arrays are TOML too


def board_file(folder: Path, name: str = "board", **changes: object) -> Path:
    """The x86_64 preset as a user's board file, with some fields changed."""
    fields = {**PRESET, **changes}
    path = folder / f"{name}.toml"
    path.write_text("".join(f"{key} = {_toml_value(value)}\n" for key, value in fields.items()))
    return path


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


INJECTION = f"$(shell touch {MARKER})"
BAD_FIELDS = {
    # field: (value, --backend)
    "triple_dotdot": ("triple", "x86_64-x/../../../ESCAPED-linux-gnu", "llvm"),
    "triple_slash": ("triple", "x86_64-unknown-linux/gnu", "llvm"),
    "triple_two_parts": ("triple", "x86_64-linux", "c"),
    "description_newline_make": ("description", f"x\n_ := {INJECTION}", "c"),
    "description_newline_rule": ("description", f"x\nall:\n\ttouch {MARKER}", "c"),
    "description_dollar": ("description", f"board {INJECTION}", "c"),
    "description_backtick": ("description", f"board `touch {MARKER}`", "c"),
    "description_backslash": ("description", "board \\", "c"),
    "description_escape": ("description", "board \x1b[2J", "c"),
    "description_table": ("description", {"a": 1}, "c"),
    "cflags_blank": ("cflags", [f"-O2 {INJECTION}"], "c"),
    "cflags_semicolon": ("cflags", [f"-march=x86-64;touch {MARKER}"], "c"),
    "cflags_backtick": ("cflags", [f"-DX=`touch {MARKER}`"], "c"),
    "cflags_hash": ("cflags", ["-DX=#"], "c"),
    "cflags_newline": ("cflags", ["-O2\n_ := $(shell touch MARKER)"], "c"),
    "cflags_output": ("cflags", ["-o/tmp/escaped.o"], "c"),
    "cflags_plugin": ("cflags", ["-fplugin=/tmp/evil.so"], "c"),
    "cflags_linker": ("cflags", ["-Wl,-o,/tmp/escaped"], "c"),
    "cflags_specs": ("cflags", ["-specs=/tmp/evil.specs"], "c"),
    "cflags_not_a_flag": ("cflags", ["evil.c"], "c"),
    "cflags_number": ("cflags", [1], "c"),
    "cflags_string": ("cflags", "-O2", "c"),
    "gcc_prefix_blank": ("gcc_prefix", f"x86_64-linux-gnu- {INJECTION}", "c"),
    "gcc_prefix_semicolon": ("gcc_prefix", "x;touch MARKER;", "c"),
    "zig_target_newline": ("zig_target", "x86_64-linux-gnu\nall:", "c"),
    "gcc_prefix_path": ("gcc_prefix", "/tmp/evil/", "c"),
    "qemu_backtick": ("qemu", f"qemu-x86_64`touch {MARKER}`", "c"),
    "qemu_other_program": ("qemu", "rm", "c"),
    "qemu_path": ("qemu", "/tmp/qemu-evil", "c"),
    "cpu_newline": ("cpu", "x86-64\n", "llvm"),
    "cpu_dotdot": ("cpu", "../x", "llvm"),
    "features_semicolon": ("features", "+avx2;touch", "llvm"),
    "alignment_true": ("alignment", True, "c"),
    "alignment_2_62": ("alignment", 2**62, "c"),
    "alignment_zero": ("alignment", 0, "c"),
    "alignment_three": ("alignment", 3, "c"),
    "alignment_8192": ("alignment", 8192, "c"),
    "alignment_string": ("alignment", "64", "c"),
    "alignment_float": ("alignment", 64.0, "c"),
    "vector_bits_true": ("vector_bits", True, "c"),
    "vector_registers_false": ("vector_registers", False, "c"),
    "os_other": ("os", "windows", "c"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
def test_bad_target_field_is_one_error_naming_file_and_field(tmp_path: Path, case: str) -> None:
    field, value, backend = BAD_FIELDS[case]
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    board = board_file(work, **{field: value})
    before = tree(tmp_path)
    result = aot("compile", str(EXAMPLE), "--target", str(board), "--backend", backend, "-o", str(work / "pkg"),
                 cwd=work)
    assert_user_error(result, str(board), repr(field))
    assert tree(tmp_path) == before, "something was written"


def test_verify_with_an_injecting_description_runs_nothing(tmp_path: Path) -> None:
    """The measured exploit: this description ran `touch` during `aot verify --target board.toml`."""
    board = board_file(tmp_path, description=f"x\n_ := $(shell touch {tmp_path / MARKER})")
    result = aot("verify", str(EXAMPLE), "--target", str(board), cwd=tmp_path)
    assert_user_error(result, str(board), "'description'")
    assert tree(tmp_path) == ["board.toml"]


def test_target_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    board = board_file(tmp_path)
    board.write_bytes(board.read_bytes().replace(b"baseline", b"base\xff\xfeline"))
    result = aot("compile", str(EXAMPLE), "--target", str(board), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, str(board), "not UTF-8")
    assert not (tmp_path / "pkg").exists()


def test_odd_but_valid_target_gives_a_package_whose_make_and_cmake_run_nothing(tmp_path: Path) -> None:
    """Characters that a target may hold and that mean something to make, CMake or a shell
    (`#`, quotes, `;`, `%`, `:=`, parentheses, rich markup) stay text; the package builds with
    make and with CMake and its toolchain file, and no injected command runs."""
    for tool in ("make", "cc", "cmake"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed")
    board = board_file(tmp_path, name=f"{INJECTION} [bold]odd",
                       description=f"Board \"X\" #1; 'rev' (2) 100% := {{y}} [bold] — touch {MARKER}",
                       cflags=["-march=x86-64", "-DAOT_BOARD_REV=2", "-DAOT_BOARD=rev:2,b+c"],
                       gcc_prefix="", zig_target="x86_64-linux-gnu")
    pkg = tmp_path / "pkg"
    result = aot("compile", str(EXAMPLE), "--target", str(board), "-o", str(pkg))
    assert result.returncode == 0, result.stderr
    makefile = (pkg / "Makefile").read_text()
    assert "$(shell" not in makefile.replace(f"# Compiled for target {INJECTION}", "")
    subprocess.run(["make", "-s", "-C", str(pkg), "CC=cc"], check=True, capture_output=True, cwd=tmp_path)
    assert (pkg / "libtiny_cnn.a").is_file() and (pkg / "tiny_cnn_runner").is_file()
    build = tmp_path / "build"
    for cmd in (["cmake", "-S", str(pkg), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={pkg / 'toolchain.cmake'}",
                 f"-DCMAKE_C_COMPILER={shutil.which('cc')}"], ["cmake", "--build", str(build)]):
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.rglob(MARKER)), "an injected command ran"


def test_build_files_stay_inert_even_for_fields_validation_would_refuse(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: with the field checks switched off, hostile text in every target field
    that reaches the Makefile and the CMake files still runs nothing when make reads the Makefile
    (`make -n` expands $(shell) in assignments) or CMake reads the toolchain file."""
    import aot
    import aot.targets.presets

    marker = tmp_path / MARKER
    injected = f"\n_ := $(shell touch {marker})\nexecute_process(COMMAND touch {marker})\n"
    board = board_file(tmp_path, description=f"x{injected}#[[", triple=f"x86_64-unknown-linux-gnu{injected}",
                       cflags=[f"-O2 $(shell touch {marker}) \" ${{X}}) execute_process(COMMAND touch {marker}) #"],
                       gcc_prefix=f"x-$(shell touch {marker})\") execute_process(COMMAND touch {marker}) #",
                       zig_target=f"z{injected}")
    monkeypatch.setattr(aot.targets.presets, "field_problem", lambda key, value: None)
    pkg = aot.compile(EXAMPLE, target=str(board)).write(tmp_path / "pkg")
    monkeypatch.undo()
    makefile = (pkg / "Makefile").read_text()
    assert "\n_ := $(shell" not in makefile and "\nexecute_process" not in (pkg / "toolchain.cmake").read_text()
    if shutil.which("make"):
        subprocess.run(["make", "-n", "-C", str(pkg)], capture_output=True, cwd=tmp_path)
    if shutil.which("cmake"):
        subprocess.run(["cmake", "-P", str(pkg / "toolchain.cmake")], capture_output=True, cwd=tmp_path)
    assert not marker.exists(), "an injected command ran"


def test_build_file_filters_keep_hostile_text_inert() -> None:
    """Defence in depth: even text validation would refuse stays one comment line / one value."""
    hostile = "a\nall:\r\n\ttouch X $(shell touch X) ${X} $ENV{HOME} \"q\" #c \x1b[2J\\"
    for comment in (make_comment(hostile), cmake_comment(hostile)):
        assert "\n" not in comment and "\r" not in comment and "\x1b" not in comment
    assert not make_comment(hostile).endswith("\\")
    value = make_value(hostile)
    assert " " not in value and "\n" not in value and not value.endswith("\\")
    assert "$(" not in value.replace("$$(", "") and "#" not in value.replace("\\#", "")
    quoted = cmake_quoted(hostile)
    assert '"' not in quoted.replace('\\"', "") and "${" not in quoted.replace("\\${", "")
    assert "$ENV{" not in quoted.replace("\\$ENV{", "") and "\n" not in quoted
    assert make_value("-march=x86-64") == "-march=x86-64" and cmake_quoted("^arm.*-none-eabi$") == "^arm.*-none-eabi$"


# --- public identifiers ------------------------------------------------------------------------

RESERVED_FIELDS = ["INT32_MAX", "EOF", "errno", "stdin", "class", "new", "this", "namespace", "linux", "unix",
                   "SIZE_MAX", "M_PI", "int64_t", "AOT_ALIGNED", "HOSTILE_IO_ARENA_SIZE"]
PLAIN_FIELDS = ["x", "exp", "log", "h_t", "E", "images"]  # not reserved: their fields keep the name


def _io_model(path: Path) -> Path:
    names = RESERVED_FIELDS + PLAIN_FIELDS
    inputs, outputs = names[::2], names[1::2]
    nodes = [helper.make_node("Neg", [i], [o]) for i, o in zip(inputs, outputs)]
    extra = inputs[len(outputs):]
    nodes += [helper.make_node("Relu", [i], [f"{i}_relu"]) for i in extra]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in outputs + [f"{i}_relu" for i in extra]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _user_program(manifest: dict, name: str) -> str:
    """A program that includes the standard headers first, then fills and runs the model by field."""
    ins, outs = manifest["inputs"], manifest["outputs"]
    lines = ["#include <stdio.h>", "#include <errno.h>", "#include <stdint.h>", "#include <math.h>",
             "#include <stddef.h>", "#include <stdbool.h>", "#include <assert.h>", "#include <limits.h>",
             "#include <float.h>", "#include <stdlib.h>", f'#include "{name}.h"',
             f"{name.upper()}_DECLARE_ARENA(arena);", "int main(void) {"]
    lines += [f"    static float in{k}[2] = {{{k}.0f, -1.0f}};" for k in range(len(ins))]
    lines += [f"    static float out{k}[2];" for k in range(len(outs))]
    lines.append(f"    {name}_inputs in; {name}_outputs out;")
    lines += [f"    in.{t['c_name']} = in{k};" for k, t in enumerate(ins)]
    lines += [f"    out.{t['c_name']} = out{k};" for k, t in enumerate(outs)]
    lines.append(f"    if ({name}_run(&in, &out, arena) != AOT_OK) return 1;")
    lines.append('    printf("%g %g\\n", (double)out0[0], (double)out0[1]);')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def test_fields_named_like_keywords_and_macros_give_a_usable_package(tmp_path: Path) -> None:
    for tool in ("make", "gcc", "g++"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed")
    pkg = tmp_path / "pkg"
    result = aot("compile", str(_io_model(tmp_path / "m.onnx")), "--name", "hostile_io", "-o", str(pkg))
    assert result.returncode == 0, result.stderr
    subprocess.run(["make", "-s", "-C", str(pkg), "CC=gcc"], check=True, capture_output=True)  # its own build
    manifest = json.loads((pkg / "manifest.json").read_text())
    fields = {t["name"]: t["c_name"] for t in manifest["inputs"] + manifest["outputs"]}
    assert all(fields[n] != n for n in RESERVED_FIELDS), fields
    assert all(fields[n] == n for n in PLAIN_FIELDS), fields
    source = tmp_path / "user.c"
    source.write_text(_user_program(manifest, "hostile_io"))
    lib = pkg / "libhostile_io.a"
    for compiler, flags in (("gcc", ["-std=c99", "-pedantic"]), ("gcc", ["-std=gnu11"]),
                            ("g++", ["-x", "c++", "-std=gnu++17"])):
        exe = tmp_path / f"user_{compiler}_{flags[-1].strip('-')}"
        build = subprocess.run([compiler, *flags, "-Wall", "-Wextra", "-Werror", f"-I{pkg}", str(source),
                                *(["-x", "none"] if compiler == "g++" else []), str(lib), "-lm", "-o", str(exe)],
                               capture_output=True, text=True)
        assert build.returncode == 0, f"{compiler} {flags}:\n{build.stderr}"
        ran = subprocess.run([str(exe)], capture_output=True, text=True)
        assert ran.returncode == 0 and ran.stdout.split() == ["-0", "1"], ran


def test_reserved_names_plus_an_underscore_are_free_and_plain_names_are_kept() -> None:
    for ident in sorted(_NAMES) + ["INT_LEAST8_MAX", "UINT64_C", "PRIx64", "FLT_EPSILON", "FP_NAN", "CLOCK_REALTIME"]:
        assert is_reserved_public(ident), ident
        # c_identifier frees a reserved name with a "_" after it, or (reserved prefixes) a word before.
        assert not is_reserved_public(ident + "_" if not needs_prefix(ident) else "t_" + ident), ident
    names = UniqueNames(public=True, own_macro_prefix="M_")
    made = [names.make(n) for n in ["input", "output", "x", "Conv_0", "logits", "M_PI", "M_PI", "M_PI", "EOF", "EOF"]]
    assert made[:5] == ["input", "output", "x", "Conv_0", "logits"]
    assert len(set(made)) == len(made) and not any(is_reserved_public(m) for m in made), made


# --- the terminal --------------------------------------------------------------------------------

HOSTILE_IN = "in\x1b[31mred\rX"
HOSTILE_OUT = "[bold]out\x07\u202e"


def _hostile_names_model(path: Path) -> Path:
    mid = "mid\x1b]0;title\x07"
    nodes = [helper.make_node("Conv", [HOSTILE_IN, "w\x1b[1m"], [mid], name="node\x1b[2J\r", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [mid], [HOSTILE_OUT], name="[red]n2")]
    weight = helper.make_tensor("w\x1b[1m", TensorProto.FLOAT, [2, 1, 3, 3], np.ones(18, np.float32).tolist())
    graph = helper.make_graph(nodes, "g\x1b",
                              [helper.make_tensor_value_info(HOSTILE_IN, TensorProto.FLOAT, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info(HOSTILE_OUT, TensorProto.FLOAT, [1, 2, 4, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_inspect_and_errors_print_names_without_control_characters(tmp_path: Path) -> None:
    model = _hostile_names_model(tmp_path / "m.onnx")
    result = aot("inspect", str(model))
    assert result.returncode == 0, result.stderr
    for raw in ("\x1b", "\r", "\x07", "\u202e"):
        assert raw not in result.stdout, repr(raw)
    assert printable(HOSTILE_IN) in result.stdout and "[bold]out" in result.stdout  # shown, markup not read
    assert printable("node\x1b[2J\r") in result.stdout  # the per-layer MACs table
    error = aot("compile", str(model), "-o", str(tmp_path / "pkg"), "--input-shape", "bad\x1b[31m=1,2")
    assert_user_error(error, "bad\\x1b[31m")
    assert "\x1b" not in error.stderr


def test_inspect_on_a_terminal_does_not_read_names_as_markup() -> None:
    from io import StringIO

    from rich.console import Console

    from aot.commands.inspect import render

    report = {"model": "m.onnx", "supported": False, "onnx_nodes": 1, "nodes_after_folding": 1,
              "inputs": [{"name": HOSTILE_IN, "shape": [1], "dtype": "float32"}],
              "outputs": [{"name": HOSTILE_OUT, "shape": [1], "dtype": "float32"}],
              "unsupported": [{"op": "Foo", "nodes": ["[blink]n\x1b"]}], "op_counts": {"Foo": 1},
              "parameters": 0, "weights_bytes": 0, "macs": 0, "layers": []}
    out = StringIO()
    render(report, Console(file=out, force_terminal=True, color_system="standard", width=200))
    text = out.getvalue()
    assert "\x1b[31mred" not in text and "\r" not in text and "\x07" not in text
    assert "[bold]out" in text and "[blink]" in text
