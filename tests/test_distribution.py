"""What `pip wheel .` gives a user: the wheel carries the LICENSE that pyproject.toml names."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.test_cli import REPO


def test_wheel_contains_the_apache_license(tmp_path: Path) -> None:
    """Builds the wheel (about 3 s; hatchling comes from the configured index) and reads it back."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("aot-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        licenses = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1, archive.namelist()
        assert archive.read(licenses[0]) == (REPO / "LICENSE").read_bytes()
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License-Expression: Apache-2.0" in archive.read(metadata).decode()
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text
