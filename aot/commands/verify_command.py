"""`aot verify`: compile MODEL..., build the package to run here (or under qemu-user), run each model
and compare its outputs with onnxruntime's (aot/commands/verify.py), or every node's with --per-layer
(aot/commands/per_layer.py); print the results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aot.commands.build_to_run import build_to_run
from aot.commands.compile import compile_package
from aot.commands.model_options import shapes, values, with_array_shapes, with_dims
from aot.errors import AotError
from aot.progress import Progress
from aot.terminal import printable


def verify_command(model: list[Path], *, input_shape: list[str] | None, dim: list[str] | None,
                   input_value: list[str] | None, shared_arena: bool, backend: str, target: list[str] | None,
                   inputs: Path | None, expected: Path | None, tolerance: float, seed: int, conv_algorithm: str,
                   max_arena: int | None, per_layer: bool, as_json: bool, progress: Progress) -> bool:
    """Verify MODEL... (one target at most), printing the results; whether every output passed."""
    from aot.model_set import model_specs

    if len(model) == 1:
        input_shape = with_array_shapes(model[0], inputs, input_shape, input_value)
    input_shape = with_dims(model, input_shape, input_value, dim)
    specs = model_specs(model, [], input_shape or [], input_value or [])
    if len(specs) > 1 and (per_layer or inputs is not None or expected is not None):
        option = "--per-layer" if per_layer else "--inputs" if inputs is not None else "--expected"
        raise AotError(f"{option}: the package has {len(specs)} models; give one model (and one shape) with it")
    if per_layer and max_arena is not None:
        raise AotError("--max-arena: --per-layer exposes every node's output, which changes the arena; "
                       "verify the budgeted package without --per-layer")
    if per_layer:
        return _verify_per_layer(model[0], shapes(input_shape), backend, target[0] if target else None,
                                 inputs=inputs, tolerance=tolerance, seed=seed, as_json=as_json,
                                 conv_algorithm=conv_algorithm, input_values=values(input_value), progress=progress)
    package = compile_package(model, None, None, shared_arena, input_shape, input_value, progress=progress,
                              backend=backend, target=target or None, conv_algorithm=conv_algorithm,
                              max_arena=max_arena)
    from aot.npz import load_npz

    built = None  # the package is built once; each model runs from that build
    results = []
    for view, spec in zip(package.models, specs):
        # Each array's header is checked against the model before its data is read, and before building.
        given = load_npz(inputs, "--inputs", view.inputs) if inputs is not None else None
        want = (load_npz(expected, "--expected", view.outputs, role="output", exact_dtype=False)
                if expected is not None else None)
        built = build_to_run(view, target[0] if target else None, backend, built, progress=progress)
        results.append(_verify_model(view, Path(spec.model), backend, built, given=given, want=want,
                                     tolerance=tolerance, seed=seed, as_json=as_json, progress=progress))
    if as_json:
        payloads = [payload for _, payload in results]
        print(json.dumps(payloads[0] if len(payloads) == 1 else
                         {"passed": all(p["passed"] for p in payloads), "package": package.name,
                          "shared_arena": shared_arena, "models": payloads}, sort_keys=True))
    return all(passed for passed, _ in results)


def _verify_model(package: Any, model: Path, backend: str, built: Any, *, given: dict[str, Any] | None,
                  want: dict[str, Any] | None, tolerance: float, seed: int,
                  as_json: bool, progress: Progress) -> tuple[bool, dict[str, Any]]:
    """Verify one model of a package, `built` (printing its result unless --json); (passed, its JSON)."""
    from aot.commands.verify import verify_package

    result = verify_package(package, str(model), given, want, tolerance, seed, built=built, progress=progress)
    where = getattr(built, "where", "host")
    payload = result.to_json()
    payload.update({"model": str(model), "backend": backend, "arena_bytes": package.arena_bytes,
                    "target": package.manifest.get("target", "host"), "ran_on": where})
    if package.library != package.name:
        payload["name"] = package.name
    if not as_json:
        label = printable(model) + (f" as {printable(package.name)}" if package.library != package.name else "")
        print(f"verify {label} (backend {backend}, {printable(where)}) against {result.reference}, "
              f"tolerance {tolerance:g}")
        for o in result.outputs:
            status = "ok  " if o.passed else "FAIL"
            extra = f"  ({o.detail})" if o.detail else ""
            print(f"  {status} {printable(o.name)}: max abs err {o.max_abs_err:.3g}, max rel err {o.max_rel_err:.3g}"
                  f"{printable(extra)}")
        print("PASSED" if result.passed else "FAILED")
    return result.passed, payload


def _verify_per_layer(model: Path, input_shapes: dict[str, tuple[int, ...]], backend: str, target: str | None, *,
                      inputs: Path | None, tolerance: float, seed: int, as_json: bool, conv_algorithm: str,
                      input_values: dict[str, str], progress: Progress) -> bool:
    """--per-layer: every node's output against onnxruntime's, printed; whether all are in tolerance."""
    from aot.commands.per_layer import compare_layers
    from aot.npz import load_npz

    # Read once the debug package's inputs are known, so each header is checked before its data.
    given = (lambda specs: load_npz(inputs, "--inputs", specs)) if inputs is not None else None
    progress.start("per-layer comparison (compile, build and run with every node's output exposed)")
    results, culprit = compare_layers(model, input_shapes,
                                      lambda pkg: build_to_run(pkg, target, backend, progress=progress), given,
                                      tolerance, seed, backend, target, conv_algorithm=conv_algorithm,
                                      input_values=input_values)
    progress.finish()
    if as_json:
        print(json.dumps({
            "passed": culprit is None, "first_failing_node": culprit.node if culprit else None,
            "layers": [{"node": r.node, "op": r.op, "tensor": r.tensor, "max_abs_err": r.comparison.max_abs_err,
                        "max_rel_err": r.comparison.max_rel_err, "passed": r.comparison.passed} for r in results],
        }, sort_keys=True))
    else:
        width = max((len(printable(r.node)) for r in results), default=4)
        print(f"per-layer comparison of {printable(model)} with onnxruntime, tolerance {tolerance:g}")
        for r in results:
            mark = "ok  " if r.comparison.passed else "FAIL"
            print(f"  {mark} {printable(r.node):{width}} {printable(r.op):18} "
                  f"max abs err {r.comparison.max_abs_err:.3g}")
        print(printable(f"first failing node: {culprit.node!r} ({culprit.op}), tensor {culprit.tensor!r}") if culprit
              else "PASSED: every layer within tolerance")
    return culprit is None
