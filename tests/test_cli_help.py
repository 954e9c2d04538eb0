"""What `aot --help`, `aot --version` and a missing cross compiler tell a user: the fixed choices of
each option, what --target does, the version, and only the installs that would work."""

from __future__ import annotations

import os
import re
import shutil
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
                     "register tiles", "Without it the package is for the machine that compiles it",
                     "its build files pass -march=native", "--backend llvm: repeatable, one object file "
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
    assert ("install arm-none-eabi-gcc with newlib (Debian: apt-get install gcc-arm-none-eabi "
            "libnewlib-arm-none-eabi)") in message
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


def _path_of(tmp_path: Path, tools: tuple[str, ...]) -> Path:
    """A folder of symlinks to these tools only, to be the whole PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"needs {tool}")
        (folder / tool).symlink_to(os.path.realpath(found))
    return folder


def test_bare_metal_with_clang_but_no_c_library_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """clang alone brings no math.h for a bare-metal triple: the build names it and what to
    install before compiling anything, instead of failing inside the first source file."""
    monkeypatch.setenv("PATH", str(_path_of(tmp_path, ("clang", "llvm-ar", "make", "sh"))))
    monkeypatch.setenv("CC", "")
    for toolchain in ("auto", "clang"):
        result = aot("build", str(EXAMPLE), "--target", "cortex-m4f", "-o", str(tmp_path / "pkg"),
                     "--toolchain", toolchain)
        assert_user_error(result, "--target cortex-m4f: no C library for thumbv7em-none-eabihf",
                          "clang --target=thumbv7em-none-eabihf finds no math.h",
                          "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi")
        assert "tiny_cnn.c" not in result.stderr  # refused before the build, not by the compiler
        assert not (tmp_path / "pkg").exists()


def test_bare_metal_prefers_the_gcc_with_newlib_over_clang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_path_of(tmp_path, ("clang", "arm-none-eabi-gcc", "arm-none-eabi-ar"))))
    if discovery._missing_header(discovery.find_toolchain(load_target("cortex-m4f"), "gcc"),
                                 load_target("cortex-m4f")):
        pytest.skip("arm-none-eabi-gcc has no newlib here")
    assert discovery.find_toolchain(load_target("cortex-m4f")).cc == ("arm-none-eabi-gcc",)
