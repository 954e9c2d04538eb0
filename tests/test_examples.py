"""The examples run as documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def test_cpp_app_links_the_package_through_cmake_add_subdirectory(tmp_path: Path) -> None:
    import shutil

    import pytest

    if not (shutil.which("cmake") and shutil.which("c++")):
        pytest.skip("cmake or a C++ compiler not installed")
    result = subprocess.run(["bash", str(REPO / "examples" / "cpp_app" / "run.sh"), str(tmp_path)],
                            capture_output=True, text=True, env=_env())
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
