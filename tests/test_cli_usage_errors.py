"""A mistyped command line gets what any other bad input gets: one line on stderr naming the option,
exit 2, and no usage block; --help and a bare `aot` still print the help."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli import EXAMPLE, aot, assert_user_error

USAGE_ERRORS = {
    "unknown option": (["compile", str(EXAMPLE), "--bogus"], ("compile: no such option: --bogus",)),
    "unknown option of verify": (["verify", str(EXAMPLE), "--opt-level", "3"], ("verify:", "--opt-level")),
    "unknown option of a command without arguments": (["targets", "--wide"], ("targets:", "--wide")),
    "unknown option before the command": (["--bogus", "compile"], ("no such option: --bogus",)),
    "missing argument": (["compile"], ("compile: missing argument 'MODEL'",)),
    "missing argument of bench": (["bench", "--rounds", "3"], ("bench: missing argument 'MODEL'",)),
    "bad value for a typed option": (["verify", str(EXAMPLE), "--tolerance", "tight"],
                                     ("verify: invalid value for '--tolerance'",)),
    "bad value for an integer option": (["bench", str(EXAMPLE), "--rounds", "many"],
                                        ("bench: invalid value for '--rounds'",)),
    "missing option value": (["compile", str(EXAMPLE), "--name"], ("option '--name' requires an argument",)),
    "missing option value of build": (["build", str(EXAMPLE), "--toolchain"], ("'--toolchain' requires",)),
    "unknown command": (["complie", str(EXAMPLE)], ("no such command 'complie'",)),
}


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_usage_errors_are_one_line_naming_the_option(case: str) -> None:
    args, fragments = USAGE_ERRORS[case]
    result = aot(*args)
    assert_user_error(result, *fragments)
    assert "Usage:" not in result.stderr and "Try '" not in result.stderr
    assert result.stdout == ""


def test_a_usage_error_writes_no_package(tmp_path: Path) -> None:
    assert_user_error(aot("compile", str(EXAMPLE), "-o", str(tmp_path / "p"), "--opt", "3"), "--opt")
    assert not (tmp_path / "p").exists()


def test_an_option_name_with_a_newline_stays_on_one_line() -> None:
    assert_user_error(aot("compile", str(EXAMPLE), "--bo\ngus"), "no such option: --bo\\x0agus")


@pytest.mark.parametrize("args", [["--help"], ["compile", "--help"], ["verify", "--help"]])
def test_help_still_prints_the_usage_and_exits_0(args: list[str]) -> None:
    result = aot(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ") and "Options" in result.stdout
    assert result.stderr == ""


def test_bare_aot_prints_the_help() -> None:
    result = aot()
    assert "Usage: " in result.stdout + result.stderr and "compile" in result.stdout + result.stderr
    assert "aot: error" not in result.stderr
