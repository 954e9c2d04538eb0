"""Where the C runtime, templates and target presets are: inside the installed package
(aot/_data, put there by the wheel build) or at the top of a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    installed = _PACKAGE_DIR / "_data" / name
    if installed.is_dir():
        return installed
    checkout = _PACKAGE_DIR.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"aot installation is incomplete: resource folder {name!r} not found")
