"""The examples run as documented."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.markdown_sections import code_blocks, markdown_section

REPO = Path(__file__).resolve().parent.parent


def test_digits_example_c_accuracy_equals_python(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(REPO / "examples" / "digits" / "run.sh"), str(tmp_path)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    python = re.search(r"python: (\d+)/(\d+) correct", result.stdout)
    c = re.search(r"C: (\d+)/(\d+) correct", result.stdout)
    assert python and c, result.stdout
    assert c.groups() == python.groups()
    correct, total = map(int, c.groups())
    assert total == 540 and correct / total > 0.9
    # The int8 variant classifies within 1% of the float model.
    int8 = re.search(r"int8 C: (\d+)/(\d+) correct", result.stdout)
    assert int8 and int(int8.group(2)) == total, result.stdout
    assert abs(int(int8.group(1)) - correct) / total <= 0.01, result.stdout


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def test_cpp_app_compiles_its_model_through_aot_add_model(tmp_path: Path) -> None:
    import shutil

    import pytest

    if not (shutil.which("cmake") and shutil.which("c++")):
        pytest.skip("cmake or a C++ compiler not installed")
    result = subprocess.run(["bash", str(REPO / "examples" / "cpp_app" / "run.sh"), str(tmp_path)],
                            capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.fullmatch(r"tiny_cnn: class \d, p=0\.\d{4}, arena \d+ bytes\n", result.stdout)
    assert (tmp_path / "tiny_cnn_aot" / "tiny_cnn.h").exists()  # the package aot_add_model compiled


def test_cpp_app_cross_built_for_rpi4_runs_under_qemu(tmp_path: Path) -> None:
    import shutil

    import pytest

    if not all(shutil.which(tool) for tool in ("cmake", "aarch64-linux-gnu-g++", "qemu-aarch64")):
        pytest.skip("cmake, aarch64-linux-gnu-g++ or qemu-aarch64 not installed (tests/setup_env.sh installs them)")
    result = subprocess.run(["bash", str(REPO / "examples" / "cpp_app" / "run.sh"), str(tmp_path), "rpi4"],
                            capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.fullmatch(r"tiny_cnn: class \d, p=0\.\d{4}, arena \d+ bytes\n", result.stdout)
    assert (tmp_path / "cpp_app").read_bytes()[18] == 183  # ELF e_machine: EM_AARCH64
    assert json.loads((tmp_path / "tiny_cnn_aot" / "manifest.json").read_text())["target"] == "rpi4"


def test_cpp_app_recompiles_its_model_when_the_model_file_changes(tmp_path: Path) -> None:
    """A copy of the example: the first build compiles the model; after new model bytes, the next
    `cmake --build` compiles it again (new weights) and the app still runs."""
    import shutil

    import pytest

    if not (shutil.which("cmake") and shutil.which("c++")):
        pytest.skip("cmake or a C++ compiler not installed")
    examples = tmp_path / "examples"
    shutil.copytree(REPO / "examples" / "cpp_app", examples / "cpp_app")
    shutil.copy(REPO / "examples" / "tiny_cnn.onnx", examples / "tiny_cnn.onnx")
    run = ["bash", str(examples / "cpp_app" / "run.sh"), str(tmp_path / "build")]
    first = subprocess.run(run, capture_output=True, text=True, env=_env())
    assert first.returncode == 0, first.stdout + first.stderr
    weights = tmp_path / "build" / "tiny_cnn_aot" / "tiny_cnn_weights.c"
    before = weights.read_bytes()
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(examples / "tiny_cnn.onnx"))
    first_weight = model.graph.initializer[0]
    first_weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(first_weight) * np.float32(1.5),
                                                  first_weight.name))
    onnx.save(model, str(examples / "tiny_cnn.onnx"))
    second = subprocess.run(run, capture_output=True, text=True, env=_env())
    assert second.returncode == 0, second.stdout + second.stderr
    assert re.fullmatch(r"tiny_cnn: class \d, p=0\.\d{4}, arena \d+ bytes\n", second.stdout)
    assert weights.read_bytes() != before


def test_cpp_app_without_aot_on_path_uses_the_repository_venv_or_says_what_to_do(tmp_path: Path) -> None:
    """After examples/run_example.sh, aot is in .venv but not on PATH: run.sh finds it there; in a
    copy with no .venv it stops with one line saying how to get aot."""
    import shutil

    import pytest

    if not (shutil.which("cmake") and shutil.which("c++")):
        pytest.skip("cmake or a C++ compiler not installed")
    bare_path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                                if not (Path(d) / "aot").exists())
    env = {**{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}, "PATH": bare_path}
    copy = tmp_path / "checkout" / "examples" / "cpp_app"
    shutil.copytree(REPO / "examples" / "cpp_app", copy)
    refused = subprocess.run(["bash", str(copy / "run.sh"), str(tmp_path / "b0")], capture_output=True, text=True,
                             env=env)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == ("run.sh: aot not found: run '. .venv/bin/activate' in the repository, "
                              "or 'pip install .'\n")
    if not (REPO / ".venv" / "bin" / "aot").exists():
        pytest.skip("needs the repository's .venv (made by tests/run.sh or examples/run_example.sh)")
    result = subprocess.run(["bash", str(REPO / "examples" / "cpp_app" / "run.sh"), str(tmp_path / "b1")],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.fullmatch(r"tiny_cnn: class \d, p=0\.\d{4}, arena \d+ bytes\n", result.stdout)


def test_digits_example_cross_compiled_for_raspberry_pi_runs_under_qemu(tmp_path: Path) -> None:
    import shutil

    import pytest

    if not (shutil.which("qemu-arm") and shutil.which("arm-linux-gnueabihf-gcc")):
        pytest.skip("qemu-user or the armhf cross compiler not installed")
    result = subprocess.run(["bash", str(REPO / "examples" / "digits" / "run.sh"), str(tmp_path), "rpi3"],
                            capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stdout + result.stderr
    python = re.search(r"python: (\d+)/(\d+) correct", result.stdout)
    c = re.search(r"C: (\d+)/(\d+) correct", result.stdout)
    assert python and c and c.groups() == python.groups(), result.stdout
    assert "under qemu-arm" in result.stdout


def test_readme_first_command_runs_the_example() -> None:
    """`bash examples/run_example.sh`: compile, build, run, print the result and arena, verify."""
    import pytest

    if not (REPO / ".venv" / "bin" / "aot").exists():
        pytest.skip("needs the repository's .venv (made by tests/run.sh or the script itself)")
    result = subprocess.run(["bash", str(REPO / "examples" / "run_example.sh")], capture_output=True, text=True,
                            env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"predicted class \d \(p=0\.\d{4}\)", result.stdout)
    assert re.search(r"arena: \d+ bytes \(lower bound \d+\)", result.stdout)
    assert "median_us" in result.stdout and result.stdout.rstrip().endswith("PASSED")


NEWCOMER_SECTION = "## From pip install to a verified Raspberry Pi 4 binary"
SETUP_COMMANDS = ("sudo apt-get install", "python3 -m venv", "pip install")


def _readme_newcomer_path() -> tuple[list[str], list[str], list[str]]:
    """The README's newcomer section: its setup commands, its other commands, and the output it shows."""
    blocks = code_blocks(markdown_section("README.md", NEWCOMER_SECTION))
    commands = [line for kind, body in blocks if kind == "sh" for line in body.splitlines() if line.strip()]
    shown = [line for kind, body in blocks if kind == "text" for line in body.splitlines() if line.strip()]
    setup = [c for c in commands if c.startswith(SETUP_COMMANDS)]
    return setup, [c for c in commands if c not in setup], shown


def test_readme_newcomer_path_to_a_verified_raspberry_pi_4_binary(tmp_path: Path) -> None:
    """The README's steps, literally, from a copy of the bundled example (with this checkout's aot
    on PATH instead of a fresh venv): compile for rpi4, make, run under qemu, aot verify."""
    import shutil

    import pytest

    setup, commands, shown = _readme_newcomer_path()
    assert setup == ["sudo apt-get install -y python3-venv make gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user",
                     'python3 -m venv .venv && . .venv/bin/activate', 'pip install ".[verify]"']
    assert [c.split()[0] for c in commands] == ["aot", "make", "python", "qemu-aarch64", "aot"]
    for tool in ("make", "aarch64-linux-gnu-gcc", "qemu-aarch64"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed (the README's apt-get line)")
    (tmp_path / "examples").mkdir()
    shutil.copy(REPO / "examples" / "tiny_cnn.onnx", tmp_path / "examples")
    bin_dir = tmp_path / "bin"  # `aot` and `python` as a venv would provide them, running this checkout
    bin_dir.mkdir()
    for tool, run in (("aot", f'"{sys.executable}" -m aot'), ("python", f'"{sys.executable}"')):
        (bin_dir / tool).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    script = "set -euo pipefail\n" + "\n".join(commands) + "\n"
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for line in shown:  # every line the README shows, in order ("..." ends a line that varies)
        fixed = line.split("...")[0] if "..." in line else line
        found = [i for i, actual in enumerate(lines) if actual.startswith(fixed) if "..." in line or actual == line]
        assert found, f"README shows {line!r}; the commands printed:\n{result.stdout}"
        lines = lines[found[0] + 1:]
    runner = tmp_path / "tiny_cnn_rpi4" / "tiny_cnn_runner"
    assert runner.read_bytes()[:4] == b"\x7fELF" and runner.read_bytes()[18] == 183  # e_machine EM_AARCH64
    import numpy as np

    probabilities = np.load(tmp_path / "output0.npy")
    assert probabilities.shape == (1, 10) and abs(float(probabilities.sum()) - 1) < 1e-5


DOCUMENTED = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]


def _readme_commands() -> list[str]:
    """Every command the README and docs/*.md show: the lines of their code blocks (a line
    indented under an `aot` command continues it) and their `inline code`."""
    commands: list[str] = []
    for page in DOCUMENTED:
        text = (REPO / page).read_text()
        blocks = re.findall(r"```\w*\n(.*?)```", text, re.S)
        prose = re.sub(r"```\w*\n.*?```", "", text, flags=re.S)
        commands += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
        for block in blocks:
            for line in block.splitlines():
                if line.startswith(" ") and commands and commands[-1].startswith("aot "):
                    commands[-1] += " " + line.strip()
                else:
                    commands.append(line.strip())
    return commands


AOT_COMMAND = re.compile(r"(?:^|&&\s*|;\s*|\|\s*|\$\()aot ((?:--)?[a-z][a-z-]*)((?:[^;&|()#]|\|(?=[\w-]))*)")


def _cli_words(command: str) -> set[str]:
    """The options `aot COMMAND --help` lists (for the top level: the commands and its options)."""
    from tests.test_cli import aot

    result = aot(*([command] if command else []), "--help")
    assert result.returncode == 0, (command, result.stderr)
    return set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*|[a-z]+)", result.stdout))


def test_every_documented_aot_command_uses_options_the_cli_has() -> None:
    """Each `aot ...` command in the README and docs/*.md names a command aot has, and only
    options that command's --help lists: the docs cannot drift from the CLI."""
    top = _cli_words("")
    known: dict[str, set[str]] = {}
    checked = 0
    for line in _readme_commands():
        for command, rest in AOT_COMMAND.findall(line):
            if command.startswith("--"):
                assert command in top, (line, command)
                continue
            assert command in top, f"{line!r}: aot has no command {command!r}"
            options = known.setdefault(command, _cli_words(command))
            for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*|-[a-zA-Z])(?![\w-])", rest):
                assert option in options, f"{line!r}: aot {command} has no option {option}"
            checked += 1
    assert checked > 40, checked


def _apt_installs() -> list[list[str]]:
    installs = [re.match(r"(?:sudo )?apt-get install (?:-y )?(.*)", c) for c in _readme_commands()]
    return [m.group(1).split() for m in installs if m]


def test_readme_newcomer_apt_line_has_every_package_its_steps_use() -> None:
    """Each tool the steps run comes from the apt line: make, the --target's cross GCC and its C
    library (the runner links statically), and qemu-user for the qemu-* command."""
    from aot.targets import load_target
    from aot.toolchain.discovery import _GCC_PACKAGES

    setup, commands, _ = _readme_newcomer_path()
    apt = setup[0].split()[4:]
    target = load_target(next(re.search(r"--target (\S+)", c).group(1) for c in commands if "--target" in c))
    assert _GCC_PACKAGES[target.gcc_prefix] in apt and "libc6-dev-arm64-cross" in apt
    assert any(c.startswith(target.qemu) for c in commands) and "qemu-user" in apt
    assert {"make", "python3-venv"} <= set(apt)


def test_readme_names_the_cross_packages_of_every_preset_and_setup_env_installs() -> None:
    """Every preset's cross GCC (and for Linux its libc for static runners) appears in an apt-get
    command, and the first paragraph lists what tests/setup_env.sh installs."""
    from aot.targets import list_targets
    from aot.toolchain.discovery import _GCC_PACKAGES

    named = {package for install in _apt_installs() for package in install}
    for target in list_targets():
        if target.gcc_prefix and target.arch != "x86_64":
            assert _GCC_PACKAGES[target.gcc_prefix] in named, target.name
    assert {"gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "libc6-dev-armhf-cross", "qemu-user",
            "cmake"} <= named
    setup = (REPO / "tests" / "setup_env.sh").read_text()
    installed = {p for group in re.findall(r"packages\+=\(([^)]*)\)", setup) for p in group.split()}
    first_paragraph = " ".join((REPO / "README.md").read_text().split("\n## ", 1)[0].split())
    assert installed and all(f" {p} " in first_paragraph.replace("`", " ") for p in installed), installed


def test_readme_apt_packages_exist() -> None:
    """No typo in a package name: apt knows each one (needs this machine's apt lists)."""
    import shutil

    import pytest

    if not shutil.which("apt-cache"):
        pytest.skip("apt-cache not installed")
    packages = sorted({p for install in _apt_installs() for p in install})
    shown = subprocess.run(["apt-cache", "show", "--no-all-versions", *packages], capture_output=True, text=True)
    if "No packages found" in shown.stderr and "Package: gcc" not in shown.stdout:
        pytest.skip("apt lists not downloaded (apt-get update)")
    known = set(re.findall(r"^Package: (\S+)", shown.stdout, re.M))
    assert set(packages) <= known, set(packages) - known
