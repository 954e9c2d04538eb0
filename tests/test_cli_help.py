"""What `aot --help`, `aot --version` and a missing cross compiler tell a user: the fixed choices of
each option, what --target does, the version, and only the installs that would work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aot.compiler import BACKENDS
from aot.errors import BuildError
from aot.package.c_sources import WEIGHTS_FORMATS
from aot.pipeline import CONV_ALGORITHMS
from aot.targets import load_target
from aot.toolchain import discovery
from aot.version import __version__
from tests.test_cli import EXAMPLE, aot, assert_user_error


def _metavar(help_text: str, option: str) -> str:
    """The word after `option` on its --help line: its metavar (c|llvm) or typer's default (<str>)."""
    match = re.search(rf"^\s+{re.escape(option)} (\S+)", help_text, re.MULTILINE)
    assert match, (option, help_text)
    return match.group(1)


def test_version_flag_prints_the_version_and_exits_0() -> None:
    for args in (["--version"], ["version"]):
        result = aot(*args)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"aot {__version__}\n"
        assert result.stderr == ""


@pytest.mark.parametrize("command", ["compile", "verify", "build", "bench"])
def test_help_shows_each_options_fixed_choices(command: str) -> None:
    """Each metavar lists exactly the values the compiler accepts, so help and checks cannot drift."""
    result = aot(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "<str>" not in re.sub(r"--(name|input-shape) \S+", "", result.stdout), result.stdout
    choices = {"--conv-algorithm": CONV_ALGORITHMS}
    if command != "bench":
        choices["--backend"] = BACKENDS
    if command in ("compile", "build"):
        choices["--weights-format"] = WEIGHTS_FORMATS
    if command == "build":
        choices["--toolchain"] = ("auto", "gcc", "zig", "clang")
    for option, values in choices.items():
        assert set(_metavar(result.stdout, option).split("|")) == set(values), option


def test_a_value_outside_the_choices_is_still_one_line_naming_the_option(tmp_path: Path) -> None:
    assert_user_error(aot("compile", str(EXAMPLE), "-o", str(tmp_path / "p"), "--weights-format", "hex"),
                      "--weights-format 'hex'")
    assert not (tmp_path / "p").exists()


def test_target_help_describes_the_c_backend_and_llvm() -> None:
    text = " ".join(aot("compile", "--help").stdout.split())
    assert _metavar(aot("compile", "--help").stdout, "--target") == "NAME|FILE.toml"
    for fragment in ("a preset name (see `aot targets`) or a target .toml file", "C backend: one target",
                     "register tiles", "Without it the package is for any target",
                     "-march=native by the machine that builds it", "--backend llvm: repeatable, one object file "
                     "per target (default: this machine)"):
        assert fragment in text, fragment
    verify = " ".join(aot("verify", "--help").stdout.split())
    assert "qemu-user" in verify and "Default: this machine" in verify


def _no_compilers(monkeypatch: pytest.MonkeyPatch, zig: bool) -> None:
    monkeypatch.setattr(discovery.shutil, "which", lambda name: None)
    monkeypatch.setattr(discovery, "_zig_available", lambda: zig)


def test_bare_metal_without_a_toolchain_names_only_what_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """zig is skipped for bare-metal targets, so installing it must not be suggested, even when
    it is already installed."""
    _no_compilers(monkeypatch, zig=True)
    with pytest.raises(BuildError) as error:
        discovery.find_toolchain(load_target("cortex-m4f"))
    message = str(error.value)
    assert message.startswith("--target cortex-m4f: no C toolchain found for thumbv7em-none-eabihf")
    assert "install arm-none-eabi-gcc (Debian: apt-get install gcc-arm-none-eabi)" in message
    assert "pip install ziglang" not in message


def test_linux_target_without_a_toolchain_names_gcc_and_zig(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_compilers(monkeypatch, zig=False)
    with pytest.raises(BuildError) as error:
        discovery.find_toolchain(load_target("rpi3"))
    assert ("install arm-linux-gnueabihf-gcc (Debian: apt-get install gcc-arm-linux-gnueabihf) or pip install "
            "ziglang") in str(error.value)


def test_build_for_cortex_m_without_a_cross_gcc_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command a user types, with no compiler on PATH (python is run by its full path)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("CC", "")
    result = aot("build", str(EXAMPLE), "--target", "cortex-m4f", "-o", str(tmp_path / "pkg"))
    assert_user_error(result, "--target cortex-m4f", "apt-get install gcc-arm-none-eabi")
    assert "ziglang" not in result.stderr
    assert not (tmp_path / "pkg").exists()
