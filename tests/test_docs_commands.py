"""The command blocks of the guides that no walkthrough test runs: each runs here as written, on
a copy of the bundled examples, and must succeed. (docs/cli.md's block is the commands' synopsis,
checked option by option against --help in tests/test_examples.py; docs/cmake.md, docs/package.md
and docs/int8.md are run by tests/test_cmake_module.py, test_install.py, test_multi_model.py and
test_quantize.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.markdown_sections import REPO, code_blocks

RUN_HERE = ["docs/adding-a-target.md", "docs/debugging.md", "docs/memory.md", "docs/performance.md",
            "docs/targets.md", "docs/transformers.md"]
CROSS_TOOLS = ("qemu-aarch64", "aarch64-linux-gnu-gcc")
RISCV_TOOLS = ("qemu-riscv64", "riscv64-linux-gnu-gcc")


def _blocks() -> list[tuple[str, int, str]]:
    return [(page, index, body) for page in RUN_HERE
            for index, (_, body) in enumerate(code_blocks((REPO / page).read_text(), "sh"))]


@pytest.mark.parametrize(("page", "index", "body"), _blocks(), ids=[f"{p}#{i}" for p, i, _ in _blocks()])
def test_guide_commands_run_as_written(tmp_path: Path, page: str, index: int, body: str) -> None:
    if ("rpi4" in body) and not all(shutil.which(tool) for tool in CROSS_TOOLS):
        pytest.skip("needs qemu-aarch64 and aarch64-linux-gnu-gcc (tests/setup_env.sh installs them)")
    if ("riscv64" in body) and not all(shutil.which(tool) for tool in RISCV_TOOLS):
        pytest.skip("needs qemu-riscv64 and riscv64-linux-gnu-gcc (tests/setup_env.sh installs them)")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, f"{page} block {index}:\n{body}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
