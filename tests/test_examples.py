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
