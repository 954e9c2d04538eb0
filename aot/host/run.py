"""Running a package's model in this Python process through ctypes."""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aot import c_api
from aot.errors import AotError, ModelInputError, ModelInputTypeError
from aot.host.build import run_make
from aot.package.package import Package

# What a failed run's error message says for each aot_status.
_STATUS = {c_api.status_code("AOT_ERROR_NULL_POINTER"): "null pointer",
           c_api.status_code("AOT_ERROR_ARENA_ALIGNMENT"): "arena misaligned",
           c_api.status_code("AOT_ERROR_BAD_ARGUMENT"): "bad argument"}


class HostModel:
    """A package built as a shared library for this machine and loaded with ctypes."""

    def __init__(self, package: Package, directory: Path, keep: Any = None, threads: int = 1) -> None:
        """`threads` > 1 runs the model through <name>_run_parallel_ptrs on a thread pool of the
        package's runtime/aot_threads.c, created here once and destroyed by close()."""
        self.package = package
        self.directory = directory
        self._keep = keep  # a TemporaryDirectory kept alive as long as the library is loaded
        # Where the model code in the library came from: "c", or "llvm" and the target's name.
        self.backend, self.target = host_variant(package)
        self._lib = ctypes.CDLL(str(directory / f"lib{package.library}.so"))
        if threads < 1:
            raise AotError(f"threads {threads}: give at least 1")
        self.threads = threads
        self._pool = None
        self._executor = None
        if threads > 1:
            pool_api = f"{package.library}_thread_pool"  # runtime/aot_threads.h: named after the package
            if not hasattr(self._lib, f"{pool_api}_create"):
                raise AotError(f"{package.name}: the package has no thread pool (compiled for a target without "
                               "threads, or built with THREADS=0)")
            create = getattr(self._lib, f"{pool_api}_create")
            create.restype, create.argtypes = ctypes.c_void_p, [ctypes.c_int32]
            executor = getattr(self._lib, f"{pool_api}_executor")
            executor.restype, executor.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
            self._destroy = getattr(self._lib, f"{pool_api}_destroy")
            self._destroy.restype, self._destroy.argtypes = None, [ctypes.c_void_p]
            self._pool = create(threads)
            if not self._pool:
                raise AotError(f"cannot start a pool of {threads} threads")
            self._executor = executor(self._pool)
        self._run = getattr(self._lib, c_api.entry_point(package.name, c_api.RUN_PARALLEL_PTRS))
        self._run.restype = ctypes.c_int
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        align = int(package.manifest["arena_alignment"])
        self._arena_raw = np.zeros(package.arena_bytes + align, dtype=np.uint8)
        start = (-self._arena_raw.ctypes.data) % align
        self._arena = self._arena_raw[start:start + max(package.arena_bytes, 1)]
        # run()'s inputs and outputs live in cache-line-aligned buffers made once, as a C
        # program's static buffers would (see runner_for): building arrays and pointer tables on
        # every call cost 18 us, more than the example model takes to run.
        self._specs = package.inputs
        self._in_buffers = [_aligned_empty(s["shape"], s["dtype"]) for s in self._specs]
        self._out_buffers = [_aligned_empty(o["shape"], o["dtype"]) for o in package.outputs]
        self._out_names = [o["name"] for o in package.outputs]
        self._in_ptrs = _pointer_table(self._in_buffers)
        self._out_ptrs = _pointer_table(self._out_buffers)
        self._arena_ptr = ctypes.c_void_p(self._arena.ctypes.data)
        # What run() checks each call, made once (looked up per call, they cost 2 us of the
        # example model's 19: benchmarks/build_paths.py).
        self._ok = c_api.status_code("AOT_OK")
        self._fast_inputs = [(s["name"], b.shape, b.dtype) for s, b in zip(self._specs, self._in_buffers)]

    def close(self) -> None:
        """Stops the thread pool (if any). The model cannot run afterwards."""
        if self._pool:
            pool, self._pool = self._pool, None
            self._destroy(pool)

            def closed(*_: Any) -> int:
                raise AotError(f"{self.package.name}: the model was closed")

            self._run = closed

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown ctypes may be gone
            self.close()

    def __enter__(self) -> HostModel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @classmethod
    def build(cls, package: Package, build_dir: str | os.PathLike[str] | None = None,
              opt: str = "-O3", extra_cflags: str = "", threads: int = 1,
              target_cflags: str | None = None) -> HostModel:
        keep = None
        if build_dir is None:
            keep = tempfile.TemporaryDirectory(prefix=f"aot-{package.name}-")
            directory = Path(keep.name) / "pkg"
            package.write(directory)
        else:
            directory = Path(build_dir)
            package.write(directory, force=True)
        backend, target = host_variant(package)
        variables = {"BACKEND": backend, "TARGET": target or ""} if package.manifest.get("targets") else None
        run_make(directory, ["shared"], opt=opt, extra_cflags=extra_cflags, variables=variables,
                 target_cflags=target_cflags)
        return cls(package, directory, keep, threads=threads)

    def run(self, inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray) -> dict[str, np.ndarray]:
        for buffer, array in zip(self._in_buffers, self._checked(inputs)):
            buffer[...] = array
        status = self._run(self._in_ptrs, self._out_ptrs, self._arena_ptr, self._executor)
        if status != self._ok:
            raise AotError(f"{self.package.name}_run failed: {_STATUS.get(status, status)}")
        # Copies: the caller keeps the results while later runs reuse the buffers.
        return {name: buffer.copy() for name, buffer in zip(self._out_names, self._out_buffers)}

    def _checked(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """The inputs in model order; arrays of exactly the right shape and dtype by name pass
        without prepare_inputs' general checks (2.8 us a call on the example model)."""
        if type(inputs) is dict and len(inputs) == len(self._fast_inputs):
            values = []
            for name, shape, dtype in self._fast_inputs:
                value = inputs.get(name)
                if type(value) is not np.ndarray or value.shape != shape or value.dtype != dtype:
                    return prepare_inputs(self._specs, inputs)
                values.append(value)
            return values
        return prepare_inputs(self._specs, inputs)

    def runner_for(self, inputs: Mapping[str, Any] | Sequence[Any]) -> Callable[[], None]:
        """A call with everything prepared (pointers, output buffers), for timing the model alone."""
        # Inputs and outputs on cache-line boundaries, as a C program's static buffers or the
        # runner's are: numpy's own are only 16-byte aligned, so every 64-byte vector access
        # would straddle two lines (measured 17% on a conv with a residual input).
        arrays = [aligned_array(a) for a in prepare_inputs(self.package.inputs, inputs)]
        outputs = [aligned_array(np.empty(o["shape"], dtype=np.dtype(o["dtype"]))) for o in self.package.outputs]
        in_ptrs = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        out_ptrs = (ctypes.c_void_p * len(outputs))(*[o.ctypes.data for o in outputs])
        run, arena, executor = self._run, self._arena.ctypes.data, self._executor

        def call() -> None:
            run(in_ptrs, out_ptrs, arena, executor)

        # The model too: its arena and library must outlive the call even if the caller drops it.
        call.keep_alive = (self, arrays, outputs)  # type: ignore[attr-defined]
        return call


@dataclass
class HostPackage(Package):
    """A Package that also runs on this machine: what aot.compile returns."""

    _host_model: HostModel | None = field(default=None, repr=False)
    # The graph inputs bound at compile time (--input-value), by name: a reference run (aot verify
    # feeding onnxruntime the original model) needs them.
    bound_inputs: dict[str, Any] = field(default_factory=dict, repr=False)

    # For a package of several models: each model's bound inputs, by model name.
    model_bound_inputs: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def models(self) -> list[HostPackage]:
        """The package's models, each as a HostPackage of its own (the same files): this package
        itself when it holds one model."""
        if "models" not in self.manifest:
            return [self]
        return [HostPackage(name, self.files, self.model_manifest(name),
                            bound_inputs=self.model_bound_inputs.get(name, {})) for name in self.model_names]

    def __repr__(self) -> str:
        """A summary (the files, which hold the whole source, are left out)."""
        m = self.manifest
        if "models" in m:
            return (f"<aot package {self.name!r}: {len(m['models'])} models ({', '.join(self.model_names)}), "
                    f"weights {m['weights_bytes']} bytes, backend {m.get('backend', 'c')}, "
                    f"target {m.get('target', 'host')}>")
        ports = "; ".join(f"{kind} " + ", ".join(f"{p['name']} {p['dtype']}[{'x'.join(map(str, p['shape']))}]"
                                                  for p in m[kind]) for kind in ("inputs", "outputs"))
        return (f"<aot package {self.name!r}: {ports}; arena {m['arena_bytes']} bytes, weights "
                f"{m['weights_bytes']} bytes, backend {m.get('backend', 'c')}, target {m.get('target', 'host')}>")

    def run(self, inputs: dict[str, Any] | list[Any] | np.ndarray,
            build_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """Build for the host (once) and run through ctypes; returns outputs by ONNX name. `inputs`:
        a dict by input name, a list in input order, or one array for a one-input model."""
        if "models" in self.manifest:
            raise AotError(f"{self.name}: the package holds {len(self.model_names)} models "
                           f"({', '.join(self.model_names)}): run one of package.models")
        if self._host_model is None:
            prepare_inputs(self.inputs, inputs)  # checked before the build, which takes seconds
            self._host_model = HostModel.build(self, build_dir)
        return self._host_model.run(inputs)


def host_variant(package: Package) -> tuple[str, str | None]:
    """("llvm", target) when the package has an LLVM object this machine can run, else ("c", None).

    Named explicitly to the Makefile, so the library is built from exactly that object (or from
    the C sources) whatever `cc -dumpmachine` says.
    """
    if package.manifest.get("backend") == "llvm":
        from aot.backends.llvm.target import runs_on_host

        for entry in package.manifest.get("targets", []):
            if runs_on_host(entry["triple"], entry["cpu"], entry["features"]):
                return "llvm", entry["name"]
    return "c", None


def _aligned_empty(shape: Sequence[int], dtype: str, alignment: int = 64) -> np.ndarray:
    dtype_ = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=object)) * dtype_.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)  # never empty: an empty tensor still has an address
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes].view(dtype_).reshape(shape)


def _pointer_table(arrays: Sequence[np.ndarray]) -> ctypes.Array:
    return (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])


def aligned_array(values: np.ndarray, alignment: int = 64) -> np.ndarray:
    """A C-contiguous copy of `values` whose data starts on an `alignment`-byte boundary."""
    out = _aligned_empty(values.shape, values.dtype.name, alignment)
    out[...] = values
    return out


def prepare_inputs(specs: list[dict[str, Any]],
                   inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray) -> list[np.ndarray]:
    """Check given inputs against the model's and return them as contiguous arrays in model order:
    a dict by input name, a list in model order, or one array for a one-input model."""
    names = [s["name"] for s in specs]
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise ModelInputError(f"inputs given for {unknown}, which the model does not have (inputs: {names})")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ModelInputError(f"no value given for model input(s) {missing}")
        values = [inputs[n] for n in names]
    elif isinstance(inputs, np.ndarray):
        if len(specs) != 1:
            raise ModelInputError(f"one array given, the model has {len(specs)} inputs {names}: give a dict "
                                  "{name: array} or a list in that order")
        values = [inputs]
    elif isinstance(inputs, (list, tuple)):
        values = list(inputs)
        if len(values) != len(specs):
            raise ModelInputError(f"{len(values)} inputs given, the model has {len(specs)} {names}")
    else:
        raise ModelInputTypeError(f"inputs of type {type(inputs).__name__}: give a dict {{name: array}}, a list "
                                  "of arrays in the model's input order, or one array for a one-input model")
    return [_checked_array(spec, value) for spec, value in zip(specs, values)]


def _checked_array(spec: Mapping[str, Any], value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise ModelInputTypeError(f"input {spec['name']!r}: not an array ({e})") from e
    if tuple(arr.shape) != tuple(spec["shape"]):
        raise ModelInputError(f"input {spec['name']!r}: shape {list(arr.shape)}, the model needs {spec['shape']}")
    if arr.dtype != np.dtype(spec["dtype"]):
        raise ModelInputError(f"input {spec['name']!r}: dtype {arr.dtype}, the model needs {spec['dtype']} "
                              f"(convert with array.astype(np.{spec['dtype']}))")
    return np.ascontiguousarray(arr)
