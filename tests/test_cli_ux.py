"""What a user sees: `aot inspect` tables, progress on a terminal, --verbose step timings and error
detail, and clean output when stdout/stderr are pipes (scripts)."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import onnx
from onnx import helper

from aot.compiler import compile as compile_model
from tests.helpers import make_model, rand
from tests.test_cli import EXAMPLE, REPO, aot

ANSI = re.compile(r"\x1b\[")
COMPILE_STEPS = ["import", "graph passes", "lowering to kernels", "memory planning", "C code generation",
                 "writing the package"]


def _row(text: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is `first` (cells are 2+ spaces apart)."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]
    matches = [r for r in rows if r and r[0] == first]
    assert len(matches) == 1, (first, text)
    return matches[0]


def _section(text: str, title: str) -> str:
    """The lines of one titled table, up to the blank line that ends it."""
    start = text.index(f"\n{title}\n")
    end = text.find("\n\n", start + 1)
    return text[start:end if end != -1 else None]


def test_inspect_tables_show_ops_sizes_macs_memory_and_footprint() -> None:
    report = json.loads(aot("inspect", str(EXAMPLE), "--json").stdout)
    result = aot("inspect", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert result.stderr == "" and not ANSI.search(text), "piped output must be plain"
    assert text.startswith("model tiny_cnn.onnx: 25 ONNX nodes, 25 after folding, 10 kernels\n")
    assert _row(text, "input") == ["input", "image", "float32[1, 3, 32, 32]"]

    ops = _section(text, "Ops")
    for op, count in report["op_counts"].items():
        assert _row(ops, op) == [op, str(count), "supported"]
    assert _row(text, "parameters")[1] == f"{report['parameters']} (6.63k)"
    assert _row(text, "weights bytes in the ONNX model")[1] == f"{report['weights_bytes']} (25.9 KiB)"
    assert _row(text, "MACs")[1].startswith(f"{report['macs']} (")

    layers = _section(text, "MACs per layer")
    for layer in report["layers"]:
        node, op, macs, share = _row(layers, layer["node"])
        assert (op, int(macs)) == (layer["op"], layer["macs"])
        assert float(share.rstrip("%")) == round(100 * layer["macs"] / report["macs"], 1)
    assert _row(text, "total") == ["total", str(report["macs"]), "100.0%"]

    memory = _section(text, "Memory plan")
    assert _row(memory, "planned arena")[1].startswith(f"{report['arena_bytes']} (")
    assert _row(memory, "lower bound (largest live set)")[1].startswith(f"{report['arena_lower_bound_bytes']} (")
    assert _row(memory, "unshared (every tensor its own buffer)")[1].startswith(
        f"{report['arena_unshared_bytes']} (")
    peak = report["peak_live"]
    assert f"largest live set at kernel {peak['kernel']} (" in text
    assert all(t in text for t in peak["tensors"])

    footprint = _section(text, "Estimated footprint per target")
    by_target = {row["target"]: row for row in report["footprint"]}
    assert {"rpi4", "cortex-m4f", "x86_64"} <= set(by_target)
    for name, row in by_target.items():
        cells = _row(footprint, name)
        assert cells[1] == str(row["alignment"])
        assert cells[2].startswith(f"{row['flash_bytes']} (") and cells[3].startswith(f"{row['ram_bytes']} (")


def test_inspect_footprint_json_adds_up() -> None:
    report = json.loads(aot("inspect", str(EXAMPLE), "--json").stdout)
    io_bytes = (1 * 3 * 32 * 32 + 1 * 10) * 4
    rows = {row["target"]: row for row in report["footprint"]}
    for row in rows.values():
        assert row["io_bytes"] == io_bytes
        assert row["ram_bytes"] == row["arena_bytes"] + io_bytes
        assert row["arena_bytes"] % row["alignment"] == 0
        assert row["flash_bytes"] == row["weights_bytes"]
    assert report["arena_bytes"] == compile_model(EXAMPLE).manifest["arena_bytes"]
    # Each row is what compiling for that target gives: its register tiles decide the weights'
    # packing and whether the 16 -> 32 3x3 conv runs as Winograd (larger weights: not on the
    # Cortex-M, which has no vectors); the struct pads each weight to 64 bytes.
    for target in ("rpi4", "cortex-m4f", "x86_64-v4"):
        manifest = compile_model(EXAMPLE, target=target).manifest
        assert rows[target]["arena_bytes"] == manifest["arena_bytes"], target
        assert 0 <= rows[target]["weights_bytes"] - manifest["weights_bytes"] < 64 * 40, target
    assert rows["rpi4"]["weights_bytes"] > rows["cortex-m4f"]["weights_bytes"]


def test_inspect_table_lists_unsupported_ops_with_their_nodes(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Det", ["a"], ["b"], name="det_1"),
             helper.make_node("Det", ["a"], ["c"], name="det_2")]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, {"x": rand(3, 3)}, ["b", "c"]), path)
    result = aot("inspect", str(path))
    assert result.returncode == 0, result.stderr
    assert _row(result.stdout, "Det") == ["Det", "2", "UNSUPPORTED ('det_1', 'det_2')"]
    assert _row(result.stdout, "Relu") == ["Relu", "1", "supported"]
    assert "1 unsupported op type(s)" in result.stdout
    assert "\nMemory plan\n" not in result.stdout and "Estimated footprint" not in result.stdout


def test_piped_output_has_no_progress_noise(tmp_path: Path) -> None:
    result = aot("compile", str(EXAMPLE), "-o", str(tmp_path / "pkg"))
    assert result.returncode == 0 and result.stderr == ""
    assert not ANSI.search(result.stdout)
    assert result.stdout.splitlines()[0] == f"compiled {EXAMPLE} -> {tmp_path / 'pkg'}/"
    assert len(result.stdout.splitlines()) == 5  # tiny_cnn's Winograd layer: a line on the weights it adds
    verify = aot("verify", str(EXAMPLE))
    assert verify.returncode == 0 and verify.stderr == "" and verify.stdout.rstrip().endswith("PASSED")


def test_verbose_prints_step_timings_on_stderr_and_leaves_stdout_alone(tmp_path: Path) -> None:
    plain = aot("compile", str(EXAMPLE), "-o", str(tmp_path / "a"))
    verbose = aot("compile", str(EXAMPLE), "-o", str(tmp_path / "b"), "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout == plain.stdout.replace(str(tmp_path / "a"), str(tmp_path / "b"))
    lines = verbose.stderr.splitlines()
    assert not ANSI.search(verbose.stderr)
    timings = [re.fullmatch(r"aot: (.+): (\d+\.\d\d) s", line) for line in lines]
    assert all(timings), lines
    steps = [m.group(1) for m in timings if m]
    assert steps == [*COMPILE_STEPS, "total"]
    assert float(timings[-1].group(2)) >= sum(float(m.group(2)) for m in timings[:-1]) - 0.05  # type: ignore


def test_verbose_verify_times_build_run_and_reference() -> None:
    result = aot("verify", str(EXAMPLE), "-v")
    assert result.returncode == 0, result.stderr
    steps = [line.split(": ")[1] for line in result.stderr.splitlines()]
    assert steps == [*COMPILE_STEPS[:-1], "host build", "running the compiled model (host)", "running onnxruntime",
                     "total"]


def test_verbose_error_shows_the_cause_chain_after_the_one_line_message(tmp_path: Path) -> None:
    model = tmp_path / "cut.onnx"
    model.write_bytes(EXAMPLE.read_bytes()[:9000])
    terse = aot("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert terse.returncode == 2 and len(terse.stderr.strip().splitlines()) == 1
    result = aot("compile", str(model), "-o", str(tmp_path / "pkg"), "--verbose")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == terse.stderr.strip() and lines[0].startswith("aot: error: ")
    assert lines[1].startswith("aot: caused by DecodeError: ")
    assert "Traceback (most recent call last):" in result.stderr
    assert "The above exception was the direct cause" in result.stderr
    assert re.fullmatch(r"aot: import: failed after \d+\.\d\d s", lines[-1])
    assert not (tmp_path / "pkg").exists()


def test_terminal_stderr_shows_a_spinner_and_stdout_stays_clean(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = subprocess.run([sys.executable, "-m", "aot", "compile", str(EXAMPLE), "-o", str(tmp_path / "pkg")],
                          stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm"})
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    terminal = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0
    assert proc.stdout.startswith("compiled ") and not ANSI.search(proc.stdout)
    assert "C code generation ..." in terminal and ANSI.search(terminal)
    assert "aot: " not in terminal  # no timing lines without --verbose


def test_library_compile_is_silent(capfd) -> None:  # noqa: ANN001 - pytest fixture
    import aot as aot_api
    from aot.progress import StepReporter

    aot_api.compile(EXAMPLE)
    assert capfd.readouterr() == ("", "")
    stream = io.StringIO()
    reporter = StepReporter(live=False, verbose=False, stream=stream)
    aot_api.compile(EXAMPLE, progress=reporter)
    assert [step for step, _ in reporter.timings] == COMPILE_STEPS[:-1]
    assert stream.getvalue() == "" and capfd.readouterr() == ("", "")


def test_inspect_prints_names_that_look_like_markup_verbatim(tmp_path: Path) -> None:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["[y]"], name="[red]mm[/red]"),
             helper.make_node("Det", ["[y]"], ["d"], name="[/]det")]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, {"x": rand(3, 3), "w": rand(3, 3)}, ["d"]), path)
    result = aot("inspect", str(path))
    assert result.returncode == 0, result.stderr
    assert _row(result.stdout, "[red]mm[/red]") == ["[red]mm[/red]", "MatMul", "27", "100.0%"]
    assert _row(result.stdout, "Det") == ["Det", "1", "UNSUPPORTED ('[/]det')"]
