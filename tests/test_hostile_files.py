"""Hostile output folders, input files, runner arguments and options: each gets one line naming
the culprit and exit code 2 (1 for the runner), nothing written or deleted, and memory bounded by
what the model needs, not by what a file claims."""

from __future__ import annotations

import io
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aot.host.build import STRICT_CFLAGS
from tests.helpers import SANITIZE_FLAGS, SANITIZER_REPORTS, matmul_model_file, rand
from tests.test_cli import EXAMPLE, REPO, assert_user_error

GB = 2**30
PEAK_LIMIT = GB  # every hostile file below must be refused within this much memory
# A guard, not the measure: a regression that inflates a bomb fails fast instead of filling RAM.
ADDRESS_SPACE_LIMIT = 6 * GB


def aot_measured(*args: str, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run `python -m aot ...`; returns its result and its own peak resident memory in bytes."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "aot", *args], stdout=out, stderr=err, cwd=cwd,
                                env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    return result, usage.ru_maxrss * 1024  # Linux reports KiB


def tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every path under `root` with its kind, size and (for small files) content."""
    snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            kind = "link" if path.is_symlink() else ("dir" if path.is_dir() else "file")
            content = path.read_bytes() if kind == "file" and st.st_size < 2**20 else b""
            snapshot[str(path.relative_to(root))] = (kind, st.st_size, content)
    return snapshot


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    """A user's working folder: their model, their notes and a subfolder of their own."""
    home = tmp_path / "home"
    work = home / "work"
    (work / "notes").mkdir(parents=True)
    shutil.copy(EXAMPLE, work / "model.onnx")
    (work / "notes" / "todo.txt").write_text("mine")
    (work / "keep.txt").write_text("mine too")
    return work


# --- 1. --force and the output folder -----------------------------------------------------------

@pytest.mark.parametrize("output,message", [
    ("CWD", "is the current folder"),
    (".", "is the current folder"),
    ("..", "is a parent of the current folder"),
    ("HOME", "is the home folder"),
    ("/", "parent of the current folder"),
    ("notes", "not a package aot wrote"),
])
def test_force_never_replaces_what_aot_did_not_write(user_folder: Path, output: str, message: str) -> None:
    root = user_folder.parent.parent
    home = root / "elsewhere" / "me"  # $HOME, not above the current folder
    home.mkdir(parents=True)
    (home / ".profile").write_text("mine")
    target = {"CWD": str(user_folder), "HOME": str(home)}.get(output, output)
    before = tree(root)  # also where a staging or old folder beside a parent would be left
    result, _ = aot_measured("compile", "model.onnx", "-o", target, "--force", cwd=user_folder,
                             env={"HOME": str(home)})
    assert_user_error(result, message, "--force")
    assert tree(root) == before, "files were changed, added or deleted"


def test_force_never_replaces_a_package_holding_the_model_or_its_data(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    assert aot_measured("compile", str(EXAMPLE), "-o", str(pkg))[0].returncode == 0
    (pkg / "sub").mkdir()
    model = _external_model(pkg / "sub", [("location", "weights.bin")])
    (pkg / "sub" / "weights.bin").write_bytes(rand(4, 3, seed=2).tobytes())
    before = tree(tmp_path)
    result, _ = aot_measured("compile", str(model), "-o", str(pkg), "--force")
    assert_user_error(result, "holds the input", "model.onnx")
    # the data alone inside the package, the model outside it
    elsewhere = _external_model(tmp_path, [("location", "pkg/sub/weights.bin")])
    result, _ = aot_measured("compile", str(elsewhere), "-o", str(pkg), "--force")
    assert_user_error(result, "holds the input", "weights.bin")
    (tmp_path / "model.onnx").unlink()
    assert tree(tmp_path) == before


def test_force_over_a_symlink_or_a_file_is_refused(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    assert aot_measured("compile", str(EXAMPLE), "-o", str(pkg))[0].returncode == 0
    (tmp_path / "link").symlink_to(pkg)
    (tmp_path / "file").write_text("mine")
    before = tree(tmp_path)
    assert_user_error(aot_measured("compile", str(EXAMPLE), "-o", str(tmp_path / "link"), "--force")[0],
                      "symbolic link")
    assert_user_error(aot_measured("compile", str(EXAMPLE), "-o", str(tmp_path / "file"), "--force")[0],
                      "not a folder")
    assert tree(tmp_path) == before


def test_force_replaces_an_aot_package_or_an_empty_folder(tmp_path: Path) -> None:
    pkg, empty = tmp_path / "pkg", tmp_path / "empty"
    empty.mkdir()
    assert aot_measured("compile", str(EXAMPLE), "-o", str(pkg))[0].returncode == 0
    (pkg / "tiny_cnn.o").write_text("left by make")
    for out in (pkg, empty):
        result, _ = aot_measured("compile", str(EXAMPLE), "-o", str(out), "--force")
        assert result.returncode == 0, result.stderr
        assert (out / "manifest.json").is_file() and not (out / "tiny_cnn.o").exists()
        assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())  # not mkdtemp's private 0700
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "pkg"], "staging or old folder left behind"


def test_build_follows_the_same_rules_before_compiling(user_folder: Path) -> None:
    before = tree(user_folder.parent)
    for target in (".", "notes"):
        result, _ = aot_measured("build", "model.onnx", "--target", "x86_64", "-o", target, "--force",
                                 cwd=user_folder, env={"HOME": str(user_folder.parent)})
        assert_user_error(result, "--force")
    assert tree(user_folder.parent) == before


def test_report_never_overwrites_its_model_or_a_foreign_file(user_folder: Path) -> None:
    before = tree(user_folder)
    assert_user_error(aot_measured("report", "model.onnx", "-o", "model.onnx", cwd=user_folder)[0],
                      "is the input model.onnx")
    assert_user_error(aot_measured("report", "model.onnx", "-o", "keep.txt", cwd=user_folder)[0],
                      "not a report aot wrote")
    assert tree(user_folder) == before
    for force in ([], ["--force"]):  # and replaces its own page
        result, _ = aot_measured("report", "model.onnx", "-o", "r.html", *force, cwd=user_folder)
        assert result.returncode == 0, result.stderr
    assert set(tree(user_folder)) == set(before) | {"r.html"}


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


# --- 2. model and external data sizes ------------------------------------------------------------

def _external_model(folder: Path, entries: list[tuple[str, str]], dims: tuple[int, ...] = (4, 3)) -> Path:
    """MatMul by an initializer `w` of `dims` whose data is external, described by `entries`."""
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=dims)  # no data: dims may be huge
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return matmul_model_file(folder, tensor)


def test_model_file_over_2_gib_is_refused_before_reading(tmp_path: Path) -> None:
    model = tmp_path / "big.onnx"
    model.write_bytes(EXAMPLE.read_bytes())
    os.truncate(model, 3 * GB)  # sparse: costs no disk
    result, peak = aot_measured("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, str(model), "3221225472 bytes", "2 GiB")
    assert peak < PEAK_LIMIT, peak
    assert not (tmp_path / "pkg").exists()


def test_ten_gb_external_data_file_is_read_only_for_the_tensor(tmp_path: Path) -> None:
    """One file can hold many tensors: only each tensor's own dims * itemsize bytes are read."""
    model = _external_model(tmp_path, [("location", "w.bin")])
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(10 * 10**9)
    result, peak = aot_measured("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert result.returncode == 0, result.stderr
    assert peak < PEAK_LIMIT, peak


def test_external_data_over_protobufs_limit_is_refused_before_reading(tmp_path: Path) -> None:
    """Weights past 2 GiB in all: onnx's checker and shape inference cannot serialize the model."""
    model = _external_model(tmp_path, [("location", "w.bin")], (1, 600_000_000))
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(10 * 10**9)
    result, peak = aot_measured("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, str(model), "external data of 2400000000 bytes", "2 GiB")
    assert peak < PEAK_LIMIT, peak
    assert not (tmp_path / "pkg").exists()


@pytest.mark.parametrize("entries,dims,message", [
    ([("location", "w.bin"), ("length", str(10 * 10**9))], (4, 3), "length 10000000000 bytes"),
    ([("location", "w.bin"), ("offset", str(10 * 10**9 - 8))], (4, 3), "shorter than the tensor's data"),
    ([("location", "w.bin")], (100000, 100000, 10), "100000000000 elements, more than the supported"),
    ([("location", "w.bin"), ("offset", "-1")], (4, 3), "offset '-1' is not a non-negative integer"),
    ([("location", "w.bin"), ("offset", "1.5")], (4, 3), "offset '1.5' is not a non-negative integer"),
    ([("location", "w.bin"), ("length", "12 bytes")], (4, 3), "length '12 bytes' is not"),
    ([("offset", "0")], (4, 3), "has no location"),
    ([("location", "w.bin\0.txt")], (4, 3), "NUL byte"),
    ([("location", "a" * 5000)], (4, 3), "too long"),
    ([("location", "d/" + "a" * 300)], (4, 3), "too long"),
    ([("location", "/etc/passwd")], (4, 3), "absolute paths are not allowed"),
])
def test_bad_external_data_is_refused_before_reading(tmp_path: Path, entries: list, dims: tuple,
                                                     message: str) -> None:
    model = _external_model(tmp_path, entries, dims)
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(10 * 10**9)
    result, peak = aot_measured("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, str(model), "initializer 'w'", message)
    assert peak < PEAK_LIMIT, peak
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "w.bin"]


# --- 3. .npz and .npy given to verify -------------------------------------------------------------

MIB = 2**20
BOMB_SHAPE = (1, 3, 32, 5468160)  # 2.1 GB of float32 zeros, deflated to 2 MB


def _npz_bomb(path: Path, shape: tuple[int, ...], member: str = "image.npy", data_bytes: int | None = None) -> Path:
    """An .npz whose one member inflates to `shape` float32 zeros (or `data_bytes` of them),
    deflated about 1000:1. Written as a raw zip (sizes below 4 GiB need no zip64): its deflate
    stream is one compressed MiB of zeros repeated, so making it costs only the CRC."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    head = header.getvalue()
    size = int(np.prod(shape)) * 4 if data_bytes is None else data_bytes
    blocks, rest = divmod(size, MIB)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(bytes(MIB)) + deflate.flush(zlib.Z_FULL_FLUSH) if blocks else b""
    stream = start + block * blocks + deflate.compress(bytes(rest)) + deflate.flush()
    crc, zeros = zlib.crc32(head), bytes(MIB)
    for _ in range(blocks):
        crc = zlib.crc32(zeros, crc)
    crc = zlib.crc32(bytes(rest), crc)
    name, total = member.encode(), len(head) + size
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(stream), total, len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(stream), total,
                          len(name), 0, 0, 0, 0, 0, 0) + name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(stream), 0)
    path.write_bytes(local + stream + central + end)
    return path


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bombs")
    return {"BOMB": _npz_bomb(folder / "bomb.npz", BOMB_SHAPE),
            "BOMB_OUT": _npz_bomb(folder / "out.npz", (1, 2**28), member="probabilities.npy")}  # 1 GiB


def test_the_bomb_is_a_valid_npz(tmp_path: Path) -> None:
    """The crafted archive is one numpy itself reads (small here, the same construction)."""
    with np.load(_npz_bomb(tmp_path / "small.npz", (3, MIB // 4 + 5))) as data:
        assert data["image"].shape == (3, MIB // 4 + 5) and not data["image"].any()


@pytest.mark.parametrize("args,message", [
    (["--inputs", "BOMB"], "input 'image': shape [1, 3, 32, 5468160], the model needs [1, 3, 32, 32]"),
    (["--inputs", "BOMB", "--per-layer"], "input 'image': shape [1, 3, 32, 5468160], the model needs [1, 3, 32, 32]"),
    (["--expected", "BOMB_OUT"], "output 'probabilities': shape [1, 268435456], the model needs [1, 10]"),
])
def test_npz_bomb_is_refused_from_its_header(bombs: dict[str, Path], args: list[str], message: str) -> None:
    assert bombs["BOMB"].stat().st_size < 4 * MIB
    result, peak = aot_measured("verify", str(EXAMPLE), *[str(bombs.get(a, a)) for a in args])
    assert_user_error(result, message)
    assert peak < PEAK_LIMIT, peak


def test_npz_member_whose_size_disagrees_with_its_header_is_refused(tmp_path: Path) -> None:
    _npz_bomb(tmp_path / "lying.npz", (1, 3, 32, 32), data_bytes=3 * MIB)
    result, _ = aot_measured("verify", str(EXAMPLE), "--inputs", str(tmp_path / "lying.npz"))
    assert_user_error(result, "array 'image' holds 3145728 bytes of data", "need 12288")


@pytest.mark.parametrize("make,message", [
    (lambda p: np.savez(p, image=np.full((1, 3, 32, 32), "a")), "dtype <U1 (strings); input 'image' needs float32"),
    (lambda p: np.savez(p, image=np.full((1, 3, 32, 32), None, dtype=object)),
     "dtype object (Python objects); input 'image' needs float32"),
    (lambda p: p.write_bytes(b"PK\x03\x04 not really a zip"), "not an .npz file"),
])
def test_wrong_kind_of_inputs_file_is_named(tmp_path: Path, make, message: str) -> None:  # noqa: ANN001
    path = tmp_path / "in.npz"
    make(path)
    if not path.exists():  # np.save added .npy
        path = tmp_path / "in.npz.npy"
    result, _ = aot_measured("verify", str(EXAMPLE), "--inputs", str(path))
    assert_user_error(result, "--inputs", message)


def test_good_npz_still_verifies(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", rand(1, 3, 32, 32, seed=7))
    result, _ = aot_measured("verify", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz"))
    assert result.returncode == 0, result.stderr
    assert "PASSED" in result.stdout


# --- 4. the shipped runner --------------------------------------------------------------------------

def _write_npy(path: Path, header: str, data: bytes = b"", version: int = 1, header_len: int | None = None) -> None:
    body = header.encode()
    body += b" " * ((64 - (10 + len(body) + 1) % 64) % 64) + b"\n"
    size = len(body) if header_len is None else header_len
    preamble = b"\x93NUMPY" + bytes([version, 0]) + (struct.pack("<H", size) if version == 1
                                                     else struct.pack("<I", size))
    path.write_bytes(preamble + body + data)


@pytest.fixture(scope="module")
def sanitized_runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    pkg = tmp_path_factory.mktemp("runner") / "pkg"
    result, _ = aot_measured("compile", str(EXAMPLE), "-o", str(pkg))
    assert result.returncode == 0, result.stderr
    subprocess.run(["make", "-s", "-C", str(pkg), f"CC={cc}", f"CFLAGS=-O1 -g {STRICT_CFLAGS} -pedantic "
                    f"{SANITIZE_FLAGS}", "LDFLAGS=-fsanitize=address,undefined", "tiny_cnn_runner"],
                   check=True, capture_output=True)
    return pkg / "tiny_cnn_runner"


LONG_DIR = "/tmp/" + "d/" * 2100


@pytest.mark.parametrize("args,message", [
    (["-r", str(2**61)], "-r 2305843009213693952: give a whole number from 0 to 10000000"),
    (["-r", "-1"], "-r -1: give a whole number"),
    (["-r", "5x"], "-r 5x: give a whole number"),
    (["-r", "99999999999999999999999"], "give a whole number"),
    (["-w", "-3"], "-w -3: give a whole number"),
    (["-t", "2abc"], "-t 2abc: give a whole number from 1 to 1024"),
    (["-o", LONG_DIR], "is longer than 4095 bytes"),
])
def test_runner_refuses_bad_arguments(sanitized_runner: Path, tmp_path: Path, args: list[str], message: str) -> None:
    np.save(tmp_path / "x.npy", rand(1, 3, 32, 32, seed=3))
    before = tree(tmp_path)
    cmd = [str(sanitized_runner), *(["-o", str(tmp_path)] if "-o" not in args else []), *args, str(tmp_path / "x.npy")]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr and not any(r in result.stderr for r in SANITIZER_REPORTS), result.stderr
    assert tree(tmp_path) == before, "an output was written"


@pytest.mark.parametrize("header,kwargs,message", [
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 1000000000000, 32), }", {}, "shorter than its shape"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904, 32), }", {},
     "shape too large"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 32), }", {}, "bad shape"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 32, 32", {}, "bad shape"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", {"version": 2, "header_len": 0xFFFFFFF0},
     "header too long"),
])
def test_runner_refuses_hostile_npy(sanitized_runner: Path, tmp_path: Path, header: str, kwargs: dict,
                                    message: str) -> None:
    _write_npy(tmp_path / "x.npy", header, **kwargs)
    result = subprocess.run([str(sanitized_runner), "-o", str(tmp_path), str(tmp_path / "x.npy")],
                            capture_output=True, text=True)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert not any(r in result.stderr for r in SANITIZER_REPORTS), result.stderr
    assert not (tmp_path / "output0.npy").exists()


def test_runner_still_times_and_writes(sanitized_runner: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", rand(1, 3, 32, 32, seed=3))
    result = subprocess.run([str(sanitized_runner), "-o", str(tmp_path), "-r", "3", "-w", "0", "-t", "1",
                             str(tmp_path / "x.npy")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("runs 3 median_us") and np.load(tmp_path / "output0.npy").shape == (1, 10)


# --- 5. options --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["verify", "MODEL", "--tolerance", "nan"], "--tolerance nan: must be a positive finite number"),
    (["verify", "MODEL", "--tolerance", "inf"], "--tolerance inf: must be a positive finite number"),
    (["verify", "MODEL", "--tolerance", "-1"], "--tolerance -1.0: must be a positive finite number"),
    (["verify", "MODEL", "--seed", "-1"], "--seed -1: must be an integer from 0"),
    (["compile", "MODEL", "-o", "OUT", "--input-shape", "x=1x4x"], "empty dimension"),
    (["compile", "MODEL", "-o", "OUT", "--input-shape", "x=" + "9" * 20 + "x4"], "is too large"),
    (["compile", "MODEL", "-o", "OUT", "--input-shape", "x=1x\u0664"], "is not an integer dimension"),
    (["compile", "MODEL", "-o", "OUT", "--input-shape", os.fsdecode(b"\xffx=1x4")], "not valid UTF-8"),
    (["compile", "MODEL", "-o", "OUT", "--name", os.fsdecode(b"net\xff")], "--name"),
    (["bench", "MODEL", "--threads", "100000"], "--threads 100000: give at most 1024"),
])
def test_bad_options_are_named(tmp_path: Path, args: list[str], message: str) -> None:
    model = tmp_path / "m.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    result, _ = aot_measured(*[{"MODEL": str(model), "OUT": str(tmp_path / "pkg")}.get(a, a) for a in args])
    assert_user_error(result, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("field", ["node name", "tensor name", "external location"])
def test_names_that_are_not_utf8_are_refused(tmp_path: Path, field: str) -> None:
    """protobuf hands a proto2 string that is not UTF-8 over as bytes: once an internal error."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["yyyy"], name="nnnn")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("yyyy", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if field == "external location":
        weight = onnx.numpy_helper.from_array(np.ones(2, np.float32), "w")
        weight.data_location = TensorProto.EXTERNAL
        weight.ClearField("raw_data")
        entry = weight.external_data.add()
        entry.key, entry.value = "location", "wwww.bin"
        model.graph.initializer.append(weight)
    raw = model.SerializeToString()
    raw = {"node name": raw.replace(b"nnnn", b"n\xff\xfen"), "tensor name": raw.replace(b"yyyy", b"y\xffyy"),
           "external location": raw.replace(b"wwww.bin", b"w\xffww.bin")}[field]
    (tmp_path / "m.onnx").write_bytes(raw)
    before = tree(tmp_path)
    result, _ = aot_measured("compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, "m.onnx", "not valid UTF-8")
    assert tree(tmp_path) == before


def test_a_name_with_a_line_break_stays_on_the_error_line(tmp_path: Path) -> None:
    """Messages quote names; one holding CR LF once split the error over two lines."""
    graph = helper.make_graph([helper.make_node("Relu", ["a\r\nb"], ["y"])], "g",
                              [helper.make_tensor_value_info("a\r\nb", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    result, _ = aot_measured("compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, "symbolic", "--input-shape")
    assert "\r" not in result.stderr
