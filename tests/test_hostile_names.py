"""Arbitrary ONNX names and --name values become valid, unique C identifiers, and text copied
into comments or strings cannot end them or inject code."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from onnx import helper

import aot
from aot.codegen.c_names import UniqueNames, c_comment, c_identifier, c_string, model_identifier
from aot.host.run import HostModel
from tests.helpers import make_model, rand, run_onnxruntime

HOSTILE = [
    "x */ int evil = 1; /*",
    "line\nbreak\r\n#include <stdio.h>",
    "back\\slash\\",
    "tri??/graph??=",
    "return",
    "1leading_digit",
    "ünïcødé-名前",
    "a-b",
    "a_b",
    "",
    '"quoted"',
]


def test_identifiers_are_valid_and_unique() -> None:
    names = UniqueNames()
    made = [names.make(n) for n in HOSTILE]
    assert len(set(made)) == len(made)
    for ident in made:
        assert ident.isidentifier() and ident.isascii() and not ident[0].isdigit()
    assert c_identifier("return") != "return" and c_identifier("int") != "int"


def test_comments_cannot_be_closed_and_strings_cannot_be_escaped() -> None:
    for text in HOSTILE:
        comment = c_comment(text)
        assert "*/" not in comment and "\n" not in comment and "\r" not in comment and "??" not in comment
        literal = c_string(text)
        body = literal[1:-1]
        assert '"' not in body.replace('\\"', "") and "??" not in body and "\n" not in body


@pytest.mark.parametrize("name", ["my model", "123", "static", "x*/y", "名前"])
def test_model_name_option_becomes_a_prefix(name: str) -> None:
    ident = model_identifier(name)
    assert ident.isidentifier() and ident.isascii() and ident == ident.lower()


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_model_with_hostile_names_compiles_strictly_and_runs(cc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    monkeypatch.setenv("CC", cc)  # HostModel builds with $CC (-std=c99 -Wall -Wextra -Werror -pedantic)
    x0, x1 = rand(2, 3), rand(2, 3, seed=1)
    in0, in1, mid, out0, out1 = "x */ int evil = 1; /*", "a-b", "line\nbreak\r\n#include <stdio.h>", "a_b", "return"
    nodes = [helper.make_node("Add", [in0, in1], [mid], name="tri??/graph??= */ node"),
             helper.make_node("Relu", [mid], [out0], name="back\\slash\\"),
             helper.make_node("Sigmoid", [mid], [out1], name="ünïcødé-名前")]
    model = make_model(nodes, {in0: x0, in1: x1}, [out0, out1],
                       initializers=None)
    package = aot.compile(model, name="1 weird */ name")
    host = HostModel.build(package, opt="-O1", extra_cflags="-pedantic")
    ours = host.run({in0: x0, in1: x1})
    ref = run_onnxruntime(model, {in0: x0, in1: x1})
    for key in (out0, out1):
        np.testing.assert_allclose(ours[key], ref[key], rtol=1e-6)
    for path, data in package.files.items():
        if path.endswith((".c", ".h")):
            code = code_outside_comments_and_strings(data.decode())
            assert not re.search(r"\bevil\s*=", code), f"injected declaration escaped into code in {path}"
            assert "line\nbreak" not in code, path
    for specs in (package.inputs, package.outputs):  # fields must be unique within each struct
        fields = [s["c_name"] for s in specs]
        assert len(set(fields)) == len(fields) and all(f.isidentifier() for f in fields)


def code_outside_comments_and_strings(text: str) -> str:
    """What a C compiler sees as code: drop block/line comments and string/char literals."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            assert end >= 0, "unterminated comment"
            i = end + 2
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif text[i] in "\"'":
            quote, i = text[i], i + 1
            while text[i] != quote:
                assert text[i] != "\n", "newline in a literal"
                i += 2 if text[i] == "\\" else 1
            i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_weights_and_locals_named_like_c_things_compile_strictly(cc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights are struct members named after their initializers and the run function's locals
    are named after the tensors: names that are keywords, macros, the struct's padding members,
    the run function's own variables or the file's functions must not break the C."""
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    monkeypatch.setenv("CC", cc)
    weights = ["int", "NULL", "pad0", "a.b", "a/b", "0w", "M_PI", "HOSTILE_ARENA_SIZE"]
    tensors = ["a", "inputs", "i", "hostile_k0", "aot_parallel_for", "expf", "first", "context", "arena"]
    nodes, previous = [], "x"
    for k, (weight, tensor) in enumerate(zip(weights, tensors)):
        added = f"added{k}"  # Transpose is a kernel of its own, so every tensor is in the arena
        nodes += [helper.make_node("Add", [previous, weight], [added]),
                  helper.make_node("Transpose", [added], [tensor], perm=[1, 0])]
        previous = tensor
    nodes.append(helper.make_node("Relu", [previous], ["y"]))
    x = rand(3, 3)
    inits = {w: rand(3, 3, seed=k + 1) for k, w in enumerate(weights)}
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    package = aot.compile(model, name="hostile")
    ours = HostModel.build(package, opt="-O1", extra_cflags="-pedantic").run({"x": x})
    np.testing.assert_allclose(ours["y"], run_onnxruntime(model, {"x": x})["y"], rtol=1e-6)
    header = package.files["hostile_weights.h"].decode()
    members = re.findall(r"float (\w+)\[9\];", header)
    assert len(members) == len(set(members)) == len(weights) and "pad0" not in members
