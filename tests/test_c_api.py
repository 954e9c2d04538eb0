"""aot/c_api.py against what C sees: the codes it reads from runtime_c/aot_runtime.h are the ones a
C compiler gives the enum constants, and the dtype numbers are ONNX's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import aot
from aot import c_api
from aot.host.build import STRICT_CFLAGS, host_cc
from aot.resources import resource_dir


def _c_values(tmp_path: Path, constants: list[str]) -> dict[str, int]:
    """The values a C compiler gives `constants`, compiled against the shipped runtime header."""
    prints = "\n".join(f'    printf("{c} %d\\n", (int){c});' for c in constants)
    source = tmp_path / "codes.c"
    source.write_text(f'#include <stdio.h>\n#include "aot_runtime.h"\n'
                      f'int main(void)\n{{\n{prints}\n    return 0;\n}}\n')
    program = tmp_path / "codes"
    subprocess.run([host_cc(), *STRICT_CFLAGS.split(), "-pedantic", "-I", str(resource_dir("runtime_c")),
                    str(source), "-o", str(program)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    return {name: int(value) for name, value in (line.split() for line in out.splitlines())}


def test_status_and_dtype_codes_are_what_c_compiles(tmp_path: Path) -> None:
    dtypes = c_api.dtype_codes()
    constants = [*c_api.status_codes(), *(code.enum for code in dtypes.values())]
    values = _c_values(tmp_path, constants)
    assert {name: values[name] for name in c_api.status_codes()} == c_api.status_codes()
    assert {d: values[code.enum] for d, code in dtypes.items()} == {d: code.value for d, code in dtypes.items()}
    assert c_api.status_code("AOT_OK") == 0 and len(dtypes) == 11


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "bool"])
def test_dtype_codes_are_onnx_tensorproto_numbers(dtype: str) -> None:
    expected = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    assert c_api.dtype_codes()[dtype].value == expected


def test_entry_points_are_the_header_declarations() -> None:
    """Every name c_api gives is declared in a compiled package's header, and nothing else is."""
    header = aot.compile(Path(__file__).parent.parent / "examples" / "tiny_cnn.onnx").files["tiny_cnn.h"].decode()
    declared = {line.split("(")[0].split()[-1].lstrip("*") for line in header.splitlines()
                if line.startswith(("aot_status ", "const aot_model_info *"))}
    assert declared == set(c_api.entry_points("tiny_cnn").values())
    with pytest.raises(ValueError):
        c_api.entry_point("tiny_cnn", "run_body")
