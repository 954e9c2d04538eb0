"""The generated C reads like C a person wrote: parameters named by role, named locals at the call
sites, weights named after their initializers, parentheses only where precedence needs them,
decimal constants where they are exact; and it still means exactly what the kernel IR says."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aot.backends.c.kernel_printer import KernelPrinter, float_literal
from aot.codegen.c_names import short_tensor_name, weight_member_names
from aot.codegen.kernel_names import kernel_comment, kernel_stem, kernel_symbols
from aot.ir.graph import Tensor
from aot.kernel.ir import (
    INDEX,
    Assign,
    Binary,
    Buffer,
    Cast,
    Const,
    Declare,
    Expr,
    If,
    Kernel,
    Load,
    Loop,
    Select,
    Store,
    Unary,
    Var,
    const,
    lt,
)
from aot.lowering.builder import KernelBuilder
from aot.lowering.param_roles import param_identifier
from tests.test_cli import EXAMPLE, aot

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


@pytest.fixture(scope="module")
def tiny_cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("readable") / "pkg"
    result = aot("compile", str(EXAMPLE), "-o", str(out))
    assert result.returncode == 0, result.stderr
    return out


def _signature(text: str, kernel: str) -> str:
    found = re.search(rf"static void tiny_cnn_{kernel}\((.*)\)\n", text)
    assert found, kernel
    return found.group(1)


def test_kernel_parameters_are_named_by_role(tiny_cnn: Path) -> None:
    text = (tiny_cnn / "tiny_cnn.c").read_text()
    # The stem conv: its scratch (a strided copy of the input, or its column matrix: which one
    # depends on this machine's tiles), the input, the output, bias and weights.
    assert _signature(text, "stem_conv_relu6") in (
        f"float *restrict {scratch}, const float *restrict x, float *restrict y, "
        "const float *restrict bias, const float *restrict w" for scratch in ("strided", "im2col"))
    # the fused Add's other operand
    assert "const float *restrict residual" in _signature(text, "block0_pw_conv_relu6_residual")
    assert not re.search(r"\b(in|out)[0-9]+\b", text)


def test_call_sites_pass_named_locals(tiny_cnn: Path) -> None:
    text = (tiny_cnn / "tiny_cnn.c").read_text()
    assert "    float *stem_out = (float *)(a + 0);\n" in text
    assert "    const float *image = (const float *)inputs[0];\n" in text
    assert "tiny_cnn_softmax(logits, probabilities);" in text
    for line in text.splitlines():
        if "(a + " in line or ("inputs[0]" in line and "(const float *)" in line):
            declaration = r"    (const )?float \*\w+ = \((const )?float \*\)(\(a \+ \d+\)|inputs\[0\]);"
            assert re.fullmatch(declaration, line), line


def test_weights_are_named_after_their_initializers(tiny_cnn: Path) -> None:
    header = (tiny_cnn / "tiny_cnn_weights.h").read_text()
    assert "float stem_conv_bias_folded[16]; /* 'stem/conv_bias_folded'" in header
    assert "float head_b[10]; /* 'head.b'" in header
    assert not re.search(r"\bw[0-9]+\[", header)


def test_weight_member_names_are_unique_and_safe() -> None:
    names = weight_member_names(["a.b", "a/b", "int", "NULL", "0conv", "pad0", "x__aot3", "x", "M_PI",
                                 "TINY_CNN_ARENA_SIZE"], "TINY_CNN_")
    assert names == ["a_b", "a_b_1", "int_", "NULL_", "w_0conv", "pad0_1", "x", "x_1", "M_PI_", "TINY_CNN_ARENA_SIZE_"]


def test_fused_tensor_names_are_shortened_to_their_first_op() -> None:
    assert short_tensor_name("model/conv2d_5/BiasAdd;model/conv2d_5/Conv2D;model/x/resource1__strided") == \
        "model/conv2d_5/BiasAdd__strided"
    assert short_tensor_name("a;b") == "a" and short_tensor_name("a__b") == "a__b"
    assert weight_member_names(["conv/BiasAdd;conv/Conv2D", "conv/BiasAdd;other"]) == ["conv_BiasAdd", "conv_BiasAdd_1"]


def test_parameter_identifiers_avoid_what_a_kernel_body_uses() -> None:
    assert [param_identifier(r) for r in ["X", "int", "first", "expf", "let0", "NAN", "", "input_mean"]] == \
        ["x", "int_", "first_", "expf_", "let0_", "nan", "p", "input_mean"]


def test_parameter_names_are_unique_and_apart_from_the_locals() -> None:
    kb = KernelBuilder("Test", [], lambda t: (t, 0))
    first_local = kb.var("i")
    tensors = [Tensor(f"t{n}", np.dtype(np.float32), (4,)) for n in range(4)]
    names = [kb.input(tensors[0], "x").buffer.name, kb.input(tensors[1], "x").buffer.name,
             kb.input(tensors[2], "i0").buffer.name, kb.output(tensors[3]).buffer.name]
    assert [first_local.name, *names] == ["i0", "x", "x_2", "i0_2", "y"]
    kb.input(Tensor("t4", np.dtype(np.float32), (4,)), "k0")
    assert kb.var("k").name == "k1"  # k0 is a parameter


# -- parentheses: the printed text parses back to the same tree --------------------------------
_TOKEN = re.compile(r"\s*(0x[0-9a-fA-F.]+p[-+]?[0-9]+f?|[0-9]+\.[0-9]*(?:e[-+]?[0-9]+)?f?|[0-9]+e[-+]?[0-9]+f?"
                    r"|[0-9]+u?|[A-Za-z_][A-Za-z_0-9]*|<=|>=|==|!=|&&|\|\||[-+*/%<>!?:()\[\],])")
_BINARY = {"*": 13, "/": 13, "%": 13, "+": 12, "-": 12, "<": 10, "<=": 10, ">": 10, ">=": 10, "==": 9, "!=": 9,
           "&&": 5, "||": 4}
_TYPES = {"float", "double", "int32_t", "uint8_t"}


class _Parser:
    """C's expression grammar for what the printer emits, as ISO C reads it."""

    def __init__(self, text: str) -> None:
        self.tokens = _TOKEN.findall(text)
        assert "".join(self.tokens) == text.replace(" ", ""), text
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.tokens[self.at]
        assert expected is None or token == expected, (token, expected, self.tokens)
        self.at += 1
        return token

    def expression(self) -> tuple:
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.take("?")
        a = self.expression()
        self.take(":")
        return ("select", cond, a, self.expression())

    def binary(self, minimum: int) -> tuple:
        left = self.unary()
        while self.peek() in _BINARY and _BINARY[self.peek()] > minimum:
            op = self.take()
            left = (op, left, self.binary(_BINARY[op]))
        return left

    def unary(self) -> tuple:
        token = self.peek()
        if token in ("-", "!"):
            self.take()
            return (token + "u", self.unary())
        if token == "(" and self.tokens[self.at + 1] in _TYPES and self.tokens[self.at + 2] == ")":
            self.take()
            kind = self.take()
            self.take(")")
            return ("cast", kind, self.unary())
        if token == "(":
            self.take()
            inner = self.expression()
            self.take(")")
            return inner
        name = self.take()
        if self.peek() == "[":
            self.take()
            index = self.expression()
            self.take("]")
            return ("load", name, index)
        return ("atom", name)


_C_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}


def _tree(e: Expr) -> tuple:
    """The tree a correct printing of `e` parses to."""
    if isinstance(e, Const):
        text = float_literal(float(e.value), e.dtype) if e.dtype == "float32" else str(e.value)
        return ("-u", ("atom", text[1:])) if text.startswith("-") else ("atom", text)
    if isinstance(e, Var):
        return ("atom", e.name)
    if isinstance(e, Load):
        return ("load", e.buffer.name, _tree(e.index))
    if isinstance(e, Binary):
        return (_C_OPS[e.op], _tree(e.a), _tree(e.b))
    if isinstance(e, Unary):
        return ({"neg": "-u", "not": "!u"}[e.op], _tree(e.a))
    if isinstance(e, Cast) and e.dtype == "bool":
        return ("cast", "uint8_t", ("!=", _tree(e.a), ("atom", "0")))
    if isinstance(e, Cast):
        return ("cast", "float", _tree(e.a))
    assert isinstance(e, Select)
    return ("select", _tree(e.cond), _tree(e.a), _tree(e.b))


_BUFFER = Buffer("x", "float32", 64, False)
_leaves = st.one_of(
    st.sampled_from([Var("a", "float32"), Var("b", "float32"), Var("i0", INDEX)]),
    st.floats(-1e6, 1e6, width=32).map(lambda v: Const(v, "float32")),
    st.integers(-9, 9).map(lambda v: Const(v, INDEX)),
)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.builds(lambda op, a, b: Binary(op, a, b, "float32"), st.sampled_from(sorted(set(_C_OPS) - {"mod"})),
                  children, children),
        st.builds(lambda op, a: Unary(op, a, "float32"), st.sampled_from(["neg", "not"]), children),
        st.builds(Cast, children, st.sampled_from(["float32", "bool"])),
        st.builds(Select, children, children, children),
        st.builds(lambda i: Load(_BUFFER, i), children),
    )


@settings(max_examples=400, deadline=None)
@given(st.recursive(_leaves, _extend, max_leaves=12))
def test_printed_expressions_parse_back_to_the_same_tree(e: Expr) -> None:
    text = KernelPrinter("m").expr(e)
    parser = _Parser(text)
    assert parser.expression() == _tree(e), text
    assert parser.peek() is None, text


A, B, C = (Var(n, "float32") for n in "abc")
I = Var("i0", INDEX)


def _op(op: str, a: Expr, b: Expr) -> Expr:
    return Binary(op, a, b, "float32")


@pytest.mark.parametrize(("tree", "text"), [
    (_op("sub", A, _op("sub", B, C)), "a - (b - c)"),
    (_op("sub", _op("sub", A, B), C), "a - b - c"),
    (_op("div", A, _op("mul", B, C)), "a / (b * c)"),
    (_op("mul", _op("add", A, B), C), "(a + b) * c"),
    (Unary("neg", Unary("neg", A, "float32"), "float32"), "-(-a)"),
    (Unary("neg", Const(-6.0, "float32"), "float32"), "-(-6.0f)"),
    (Cast(_op("add", A, B), "int32"), "(int32_t)(a + b)"),
    (Binary("mod", Binary("mul", I, Const(3, INDEX), INDEX), Const(4, INDEX), INDEX), "i0 * 3 % 4"),
    (Binary("mul", I, Binary("mod", Const(3, INDEX), I, INDEX), INDEX), "i0 * (3 % i0)"),
    (Binary("or", Binary("and", Var("p", "bool"), Var("q", "bool"), "bool"), Var("r", "bool"), "bool"),
     "(p && q) || r"),
    (Binary("eq", Binary("lt", Var("a", "f"), Var("b", "f"), "bool"), Var("c", "bool"), "bool"), "(a < b) == c"),
])
def test_parentheses_where_precedence_needs_them(tree: Expr, text: str) -> None:
    assert KernelPrinter("m").expr(tree) == text


# -- constants -----------------------------------------------------------------------------------
def test_decimal_constants_only_where_exact() -> None:
    assert [float_literal(v, "float32") for v in (6.0, 0.5, -0.25, 1e-5, 0.1, 2.0**-20)] == \
        ["6.0f", "0.5f", "-0.25f", "0x1.4f8b58p-17f", "0x1.99999ap-4f", "0x1p-20f"]
    assert [float_literal(v, "float64") for v in (6.0, 0.1, 1e300)] == ["6.0", "0x1.999999999999ap-4",
                                                                        "0x1.7e43c8800759cp+996"]


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_constants_compile_to_the_same_bits(tmp_path: Path) -> None:
    """Each printed constant is, compiled, exactly the float it prints."""
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(200), rng.integers(-64, 64, 100) / 8.0, [6.0, 3e-38, 1.5e-40]])
    floats = [float(np.float32(v)) for v in values]
    lines = ["#include <stdio.h>", "#include <math.h>", "static const float f[] = {",
             ",\n".join(float_literal(v, "float32") for v in floats), "};", "static const double d[] = {",
             ",\n".join(float_literal(float(v), "float64") for v in values), "};",
             "int main(void) { unsigned i; for (i = 0; i < sizeof f / sizeof f[0]; ++i) printf(\"%a %a\\n\", "
             "(double)f[i], d[i]); return 0; }"]
    (tmp_path / "c.c").write_text("\n".join(lines) + "\n")
    subprocess.run(["cc", *STRICT, str(tmp_path / "c.c"), "-o", str(tmp_path / "c")], check=True)
    out = subprocess.run([str(tmp_path / "c")], check=True, capture_output=True, text=True).stdout.split()
    assert [float.fromhex(x) for x in out[0::2]] == floats
    assert [float.fromhex(x) for x in out[1::2]] == [float(v) for v in values]


def _kernel_with_unread_locals() -> Kernel:
    """y[i] = x[i], with locals nothing reads: a position from the indices (the only reader of
    `indices`), a local computed only from it, and one that is set in an if but never read."""
    x, indices, y = Buffer("x", "float32", 4, False), Buffer("indices", "int64", 4, False), \
        Buffer("y", "float32", 4, True)
    i = Var("i0", INDEX)
    k, k_next, flag = Var("k0", INDEX), Var("k1", INDEX), Var("flag", INDEX)
    body = [Declare(k, Cast(Load(indices, i), INDEX)), Declare(k_next, k + const(1, INDEX)),
            Declare(flag, const(0, INDEX)),
            If(lt(i, const(2, INDEX)), [Assign(flag, k_next)]),
            Store(y, i, Load(x, i))]
    return Kernel("k0", [x, indices, y], [Loop(i, 4, body)], ["Copy#0"], "Copy")


def test_unread_locals_and_parameters_print_warning_free() -> None:
    """Whatever a lowering leaves unread, the printed kernel declares only what it reads and marks
    an untouched parameter as such, so -Werror accepts it (unused variable 'k0' was a build failure)."""
    text = KernelPrinter("m").kernel(_kernel_with_unread_locals())
    assert "k0 =" not in text and "k1" not in text and "flag" not in text, text
    assert "(void)indices;" in text and "(void)x" not in text and "(void)y" not in text
    compilers = [cc for cc in ("gcc", "clang") if shutil.which(cc)]
    if not compilers:
        pytest.skip("needs gcc or clang")
    source = "#include <stdint.h>\n#define AOT_KERNEL\n" + text \
        + "\nvoid call(const float *x, const int64_t *i, float *y);\n" \
        "void call(const float *x, const int64_t *i, float *y) { m_k0(x, i, y); }\n"
    for cc in compilers:
        compiled = subprocess.run([cc, *STRICT, "-x", "c", "-fsyntax-only", "-"], input=source, capture_output=True,
                                  text=True)
        assert compiled.returncode == 0, f"{cc}:\n{compiled.stderr}\n{source}"


def test_model_source_opens_with_its_kernels(tiny_cnn: Path) -> None:
    """The compiler hints live in runtime/aot_compiler_hints.h: the model's .c opens with a short
    header comment, its includes and the ISA check, then its first kernel; no comment is an essay."""
    text = (tiny_cnn / "tiny_cnn.c").read_text()
    lines = text.splitlines()
    first_kernel = next(i for i, line in enumerate(lines) if re.match(r"AOT_KERNEL .*static void ", line))
    assert first_kernel < 40, "\n".join(lines[:first_kernel])
    assert '#include "runtime/aot_compiler_hints.h"' in lines[:first_kernel]
    assert "#define AOT_KERNEL" not in text and (tiny_cnn / "runtime" / "aot_compiler_hints.h").is_file()
    opening, *comments = re.findall(r"/\*.*?\*/", text, re.DOTALL)
    assert text.startswith(opening) and opening.count("\n") <= 3
    for comment in comments:
        assert "\n" not in comment and len(comment) <= 100, comment


def test_kernels_are_named_after_their_onnx_nodes(tiny_cnn: Path) -> None:
    text = (tiny_cnn / "tiny_cnn.c").read_text()
    functions = re.findall(r"^AOT_KERNEL .*?static void (\w+)\(", text, re.MULTILINE)
    assert functions[:3] == ["tiny_cnn_stem_conv_relu6", "tiny_cnn_block0_dw_conv_relu6",
                             "tiny_cnn_block0_pw_conv_relu6_residual"]
    assert "tiny_cnn_softmax" in functions and not any(re.search(r"_k[0-9]+$", f) for f in functions)
    # each function is introduced by one line naming its op kinds and ONNX nodes
    assert "/* Conv+Clip <- ONNX 'stem/conv', 'stem/relu6' */\nAOT_KERNEL static void tiny_cnn_stem_conv_relu6(" in text


def _kernel(name: str, sources: list[str], op: str = "Conv") -> Kernel:
    return Kernel(name, [], [], sources, op)


def test_kernel_names_are_unique_short_and_safe() -> None:
    assert kernel_stem(["model/conv2d_5/Conv2D;model/conv2d_5/BiasAdd", "model/activation/Relu"], "Conv+Relu") == \
        "model_conv2d_5_conv2d_relu"
    assert len(kernel_stem(["x" * 300, "y"], "Conv")) == 48 and kernel_stem(["", ""], "Add+Relu") == "add"
    assert kernel_stem(["run"], "Add") == "run_kernel" and kernel_stem(["int"], "Add") == "int_"
    kernels = [_kernel("k0", ["a/b"]), _kernel("k1", ["a.b"]), _kernel("k1_0", ["a.b"]), _kernel("k1_1", ["a.b"]),
               _kernel("k1s", ["a.b"]), _kernel("k2", ["int"]), _kernel("k3", ["a_b_1"]), _kernel("k4", ["α"])]
    symbols = kernel_symbols("m", kernels)
    # a kernel keeps the name of its nodes; a parallel segment named like it gives way
    assert symbols == {"k0": "m_a_b", "k1": "m_a_b_1", "k1_0": "m_a_b_1_0", "k1_1": "m_a_b_1_1_k",
                       "k1s": "m_a_b_1_serial", "k2": "m_int_", "k3": "m_a_b_1_1", "k4": "m_n"}, symbols
    assert len(set(symbols.values())) == len(symbols)


def test_kernel_comments_are_one_short_line() -> None:
    assert kernel_comment(["stem/conv", "stem/relu6"], "Conv+Clip") == "Conv+Clip <- ONNX 'stem/conv', 'stem/relu6'"
    many = kernel_comment([f"block{i}/conv" for i in range(30)], "Conv+Add")
    assert len(f"/* {many} */") <= 100 and many.endswith("more") and "'block0/conv'" in many
    assert "*/" not in kernel_comment(["*/ evil", "x" * 500], "Op") and len(kernel_comment(["x" * 500], "Op")) <= 94


def test_index_constants_are_folded(tiny_cnn: Path) -> None:
    """Index arithmetic prints as a sum of terms and one constant: no `+ -1`, no `* 1`, no
    product of constants, no `((oy + 1) * 2 + -1)`."""
    text = (tiny_cnn / "tiny_cnn.c").read_text()
    assert not re.search(r"\+ -[0-9]", text)
    assert not re.search(r"\* 1\b(?!\.)", text)
    assert not re.search(r"\* [0-9]+ \* [0-9]+\b", text)
    assert not re.search(r"\([a-z]\w* \+ [0-9]+\) \* [0-9]", text)
    i, j = Var("i", INDEX), Var("j", INDEX)
    nested = Binary("add", Binary("mul", Binary("add", Binary("mul", Binary("add", i, const(1, INDEX), INDEX),
                                                                       const(2, INDEX), INDEX),
                                                        const(-1, INDEX), INDEX), const(32, INDEX), INDEX),
                    Binary("sub", j, Binary("mul", i, const(64, INDEX), INDEX), INDEX), INDEX)
    assert KernelPrinter("m").expr(nested) == "j + 32"  # ((i + 1) * 2 - 1) * 32 + (j - i * 64)
    assert KernelPrinter("m").expr(Binary("sub", const(3, INDEX), Binary("mul", i, j, INDEX), INDEX)) == "-(i * j) + 3"
    assert KernelPrinter("m").expr(Binary("mul", Binary("mul", i, const(3, INDEX), INDEX), const(256, INDEX),
                                          INDEX)) == "i * 768"


def test_loop_indices_are_named_by_role(tiny_cnn: Path) -> None:
    text = (tiny_cnn / "tiny_cnn.c").read_text()
    stem = text[text.index("static void tiny_cnn_stem_conv_relu6("):]
    stem = stem[:stem.index("\n}\n")]
    for role in ("c", "oy", "ox"):
        assert f"for (int32_t {role} = 0;" in stem, role
    pool = text[text.index("static void tiny_cnn_gap("):]
    assert "for (int32_t c = 0;" in pool[:pool.index("\n}\n")]
    kb = KernelBuilder("Test", [], lambda t: (t, 0))
    loops = kb.loops([2, 3], lambda idx: [], roles=["oy", "ox"]) + kb.loops([2], lambda idx: [], roles=["oy"])
    assert [s.var.name for s in loops if isinstance(s, Loop)] == ["oy", "oy1"]
