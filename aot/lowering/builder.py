"""Helpers op lowerings use to write kernels: strided views over buffers and loop nests."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from aot.ir.graph import Tensor
from aot.kernel.ir import INDEX, Buffer, Expr, Kernel, Load, Loop, Stmt, Store, Var, as_expr, const
from aot.lowering.param_roles import ParamRoles, param_identifier


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


class BroadcastError(ValueError):
    """A tensor does not broadcast to the shape a kernel reads it at: the model's shapes are
    inconsistent (onnx's lenient shape inference lets some through), not a bug in a lowering."""


class View:
    """A strided window onto a buffer: maps a multi-index to a flat element offset."""

    def __init__(self, buffer: Buffer, shape: Sequence[int], strides: Sequence[int] | None = None,
                 offset: int = 0) -> None:
        self.buffer = buffer
        self.shape = tuple(shape)
        self.strides = tuple(strides) if strides is not None else contiguous_strides(shape)
        self.offset = offset

    def index(self, idx: Sequence[Expr | int]) -> Expr:
        if len(idx) != len(self.shape):
            raise ValueError(f"index rank {len(idx)} for view of rank {len(self.shape)}")
        flat: Expr = const(self.offset, INDEX)
        for i, s, d in zip(idx, self.strides, self.shape):
            if s == 0 or d == 1:
                continue
            flat = flat + as_expr(i, INDEX) * s
        return flat

    def load(self, idx: Sequence[Expr | int]) -> Expr:
        return Load(self.buffer, self.index(idx))

    def store(self, idx: Sequence[Expr | int], value: Expr) -> Stmt:
        return Store(self.buffer, self.index(idx), value)

    def load_flat(self, i: Expr) -> Expr:
        """Element `i` of the underlying buffer, ignoring shape (for contiguous same-shape loops)."""
        return Load(self.buffer, i + self.offset)

    def store_flat(self, i: Expr, value: Expr) -> Stmt:
        return Store(self.buffer, i + self.offset, value)

    def broadcast_to(self, shape: Sequence[int]) -> View:
        """numpy broadcasting: align right, size-1 (or missing) dims get stride 0."""
        shape = tuple(shape)
        pad = len(shape) - len(self.shape)
        if pad < 0:
            raise BroadcastError(f"cannot broadcast {list(self.shape)} to {list(shape)}")
        strides = [0] * pad
        for d_in, s_in, d_out in zip(self.shape, self.strides, shape[pad:]):
            if d_in == d_out:
                strides.append(s_in)
            elif d_in == 1:
                strides.append(0)
            else:
                raise BroadcastError(f"cannot broadcast {list(self.shape)} to {list(shape)}")
        return View(self.buffer, shape, strides, self.offset)

    def permute(self, perm: Sequence[int]) -> View:
        return View(self.buffer, [self.shape[p] for p in perm], [self.strides[p] for p in perm], self.offset)

    def merged(self, groups: Sequence[Sequence[int]]) -> View:
        """The view with each group of neighbouring dimensions (merge_groups) as one."""
        shape = [math.prod(self.shape[d] for d in group) for group in groups]
        strides = [next((self.strides[d] for d in reversed(group) if self.shape[d] > 1), 0) for group in groups]
        return View(self.buffer, shape, strides, self.offset)


def merge_groups(shape: Sequence[int], views: Sequence[View]) -> list[list[int]]:
    """The dimensions of `shape` in runs that every view walks as one: dimension d joins the run
    before it when each view's stride there is the next dimension's times its extent (or either
    has extent 1). Loops over the runs touch the same elements in the same order; the inner loop
    is longer, which the compilers vectorise (an int8 loop of 28 never filled a vector of 64)."""
    groups: list[list[int]] = []
    for d, extent in enumerate(shape):
        # the run's innermost dimension that moves (a run of extent 1 joins anything)
        inner = next((e for e in reversed(groups[-1]) if shape[e] > 1), None) if groups else None
        if groups and (extent == 1 or inner is None or all(
                v.strides[inner] == v.strides[d] * extent for v in views)):
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


def spatial_roles(rank: int, kind: str = "o") -> list[str]:
    """The roles of `rank` spatial loop indices of an output (`kind` "o") or input ("i"): `oy`, `ox`."""
    axes = {1: ["x"], 2: ["y", "x"], 3: ["z", "y", "x"]}.get(rank) or [f"d{i}" for i in range(rank)]
    return [kind + axis for axis in axes]


class KernelBuilder:
    """Collects the buffers and fresh variable names of one kernel under construction."""

    def __init__(self, op: str, sources: list[str], resolve: Callable[[Tensor], tuple[Tensor, int]],
                 roles: ParamRoles | None = None) -> None:
        self.op = op
        self.sources = sources
        self.whole_run_in_place = False  # see Kernel.whole_run_in_place
        # Register tiles may load four consecutive broadcast operands as one vector and take
        # its lanes (TileConfig.lane_broadcasts).
        self.lane_broadcasts = False
        # ... and share such a vector among the written-out steps of a reduction (the taps of a
        # kernel row: TileConfig.lanes_across_steps).
        self.lanes_across_steps = False
        self._resolve = resolve
        self._roles = roles or ParamRoles(None)
        self.params: list[Buffer] = []
        self.bindings: list[Tensor] = []  # storage-root tensor bound to each param
        self.offsets: list[int] = []  # element offset of each param inside its root
        self._names: dict[str, int] = {}
        self._taken: set[str] = set()  # the names of the params and locals so far

    def _bind(self, tensor: Tensor, writable: bool, role: str | None = None) -> Buffer:
        root, offset = self._resolve(tensor)
        for i, (buf, bound) in enumerate(zip(self.params, self.bindings)):
            if bound is root and self.offsets[i] == offset and buf.size == tensor.size:
                if writable and not buf.writable:
                    raise ValueError(f"{tensor!r} is both read and written by one kernel")
                return buf
        buf = Buffer(self._param_name(role or self._roles.role(tensor, writable)), root.dtype.name, tensor.size,
                     writable)
        self.params.append(buf)
        self.bindings.append(root)
        self.offsets.append(offset)
        return buf

    def _param_name(self, role: str) -> str:
        """A parameter named by its role (aot/lowering/param_roles.py), unique in the kernel:
        `x`, then `x_2` ..."""
        base = param_identifier(role)
        name, n = base, 2
        while name in self._taken:
            name, n = f"{base}_{n}", n + 1
        self._taken.add(name)
        return name

    def input(self, tensor: Tensor, role: str | None = None) -> View:
        """`tensor` read as a parameter; `role` names it when the tensor's place in the node does
        not say what it is (see ParamRoles)."""
        return View(self._bind(tensor, False, role), tensor.shape)

    def output(self, tensor: Tensor, role: str | None = None) -> View:
        return View(self._bind(tensor, True, role), tensor.shape)

    def var(self, prefix: str, dtype: str = INDEX) -> Var:
        n = self._names.get(prefix, 0)
        while f"{prefix}{n}" in self._taken:
            n += 1
        self._names[prefix] = n + 1
        self._taken.add(f"{prefix}{n}")
        return Var(f"{prefix}{n}", dtype)

    def role_var(self, role: str, dtype: str = INDEX) -> Var:
        """A loop index named by what it counts (`oy`, `c`, `k`), numbered only when that role
        repeats in the kernel: `oy`, then `oy1` ..."""
        name, n = role, 1
        while name in self._taken:
            name, n = f"{role}{n}", n + 1
        self._taken.add(name)
        return Var(name, dtype)

    def loops(self, extents: Sequence[int], body: Callable[[list[Expr]], list[Stmt]],
              prefix: str = "i", roles: Sequence[str] | None = None) -> list[Stmt]:
        """A perfect loop nest over `extents` (outermost first); `body` gets the loop indices,
        named by `roles` (one a loop: `n`, `c`, `oy`, `ox`...) or else `prefix` and a number.

        Extent-1 dimensions get the constant 0 instead of a loop, and an empty extent yields
        no statements at all.
        """
        if any(int(e) == 0 for e in extents):
            return []
        names = list(roles) if roles is not None else [None] * len(extents)
        if len(names) != len(extents):
            raise ValueError(f"{len(names)} loop roles for {len(extents)} loops")
        indices: list[Expr] = [const(0, INDEX) if int(e) == 1 else self.role_var(role) if role else self.var(prefix)
                               for e, role in zip(extents, names)]
        stmts = body(indices)
        for v, extent in reversed(list(zip(indices, extents))):
            if isinstance(v, Var):
                stmts = [Loop(v, int(extent), stmts)]
        return stmts

    def build(self, name: str, body: list[Stmt]) -> Kernel:
        return Kernel(name, list(self.params), body, list(self.sources), self.op, self.whole_run_in_place)
