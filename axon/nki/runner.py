"""Running kernels: `run` (numbers), `trace` (shapes only), `load_kernel`, and the `@nki.jit` wrapper.

A kernel is a plain function or one decorated with `nki.jit`; its array arguments become HBM
tensors and its returned HBM tensors are the outputs. Exceptions the kernel's own Python raises
become an `NKIError` naming the kernel line. Nothing here computes or checks hardware rules.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import linecache
import os
import sys
import traceback
import types
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from axon.errors import AxonError, NKIError
from axon.nki import legacy_isa
from axon.nki.context import maybe_active
from axon.nki.dtypes import as_dtype
from axon.nki.lang_tensors import sequential_range
from axon.nki.machine import Machine
from axon.nki.memory import View
from axon.nki.shim import install_import_shim
from axon.nki.standins import framework_stand_ins
from axon.target.hardware import DEFAULT_HW, HardwareSpec, load_hw
from axon.target.trace import Trace
from axon.userfiles import siblings_importable


class Kernel:
    """What `@nki.jit` returns: call it with NumPy arrays to run it here, index it with a grid for
    SPMD launches (`kernel[2, 1](a, b)`), or call it from another kernel."""

    def __init__(self, fn: Callable[..., Any], grid: tuple[int, ...] = ()) -> None:
        self.fn = fn
        self.grid = grid
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __getitem__(self, grid: Any) -> Kernel:
        return Kernel(self.fn, tuple(int(g) for g in grid) if isinstance(grid, tuple) else (int(grid),))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        m = maybe_active()
        if m is None:
            return run(self, *args, **kwargs)
        if not self.grid:
            return self.fn(*args, **kwargs)
        # An SPMD launch from inside a kernel or its host caller: every program, in this machine.
        saved = m.program_ids, m.num_programs
        result = None
        try:
            for i in range(int(np.prod(self.grid))):
                m.program_ids = tuple(int(v) for v in np.unravel_index(i, self.grid))
                m.num_programs = self.grid
                result = self.fn(*args, **kwargs)
        finally:
            m.program_ids, m.num_programs = saved
        return result


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """`@nki.jit`, `@nki.jit(mode=...)` (also `baremetal`, `benchmark`): options are accepted and ignored."""
    if fn is None:
        return lambda f: Kernel(f.fn if isinstance(f, Kernel) else f)
    return Kernel(fn.fn if isinstance(fn, Kernel) else fn)


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """`nki.simulate_kernel(kernel, *arrays)`, as in the Neuron SDK: runs here."""
    return run(kernel, *args, **kwargs)


def install_shim() -> None:
    """`import nki` and `import neuronxcc.nki` resolve to the emulator (see `axon.nki.shim`)."""
    install_import_shim(jit, simulate_kernel)


def load_kernel(ref: str, name: str | None = None) -> Callable[..., Any]:
    """The kernel function `fn` from `"path/to/file.py:fn"` (imports resolve to the emulator).

    >>> import axon.nki, pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "k.py"
    >>> _ = p.write_text("def k(a):\\n    return a\\n")
    >>> axon.nki.load_kernel(f"{p}:k").__name__
    'k'
    """
    path, sep, fn_name = ref.rpartition(":")
    if not sep or not path:
        path, fn_name = ref, name or ""
    if not fn_name:
        raise NKIError(f"kernel reference {ref!r} must be FILE.py:FUNCTION")
    file = Path(path)
    if not file.is_file():
        raise NKIError(f"kernel file {path} not found")
    install_shim()
    mod_name = f"axon_kernel_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        with siblings_importable(str(file.resolve().parent)), framework_stand_ins():
            spec.loader.exec_module(module)
    except AxonError:
        raise
    except Exception as exc:  # the user's file failed to import: one line, with where
        raise NKIError(f"{file}: cannot load kernel file: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        raise NKIError(f"{file}: no kernel function {fn_name!r}")
    return fn


def load_source(source: str, name: str | None = None) -> Callable[..., Any]:
    """The kernel defined in NKI source text (e.g. from `axon.lower.emit`): the function `name`, else
    the one `@nki.jit` function, else the only function. Errors name lines of a pseudo-file
    `nki_<hash>.py` whose text is registered for tracebacks.

    >>> import axon.nki
    >>> axon.nki.load_source(chr(10).join(["import nki", "@nki.jit", "def k(a):", "    return a", ""])).__name__
    'k'
    """

    install_shim()
    file = f"nki_{hashlib.sha256(source.encode()).hexdigest()[:12]}.py"
    linecache.cache[file] = (len(source), None, source.splitlines(True), file)
    module = types.ModuleType(file[:-3])
    module.__file__ = file
    try:
        exec(compile(source, file, "exec"), module.__dict__)
    except AxonError:
        raise
    except Exception as exc:
        line = getattr(exc, "lineno", None) or next(
            (f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename == file), "?"
        )
        raise NKIError(f"{file}:{line}: cannot load kernel source: {type(exc).__name__}: {exc}") from None
    if name is not None:
        fn = module.__dict__.get(name)
        if fn is None:
            raise NKIError(f"{file}: no kernel function {name!r}")
        return fn
    found: list[Any] = [v for v in module.__dict__.values() if isinstance(v, Kernel)]
    if not found:
        found = [v for v in module.__dict__.values() if inspect.isfunction(v) and v.__module__ == module.__name__]
    if len(found) != 1:
        raise NKIError(f"{file}: expected one kernel (an @nki.jit function), found {len(found)}")
    return found[0]


def _resolve(kernel: Any) -> tuple[Callable[..., Any], tuple[int, ...]]:
    if isinstance(kernel, str) and "\n" in kernel:
        kernel = load_source(kernel)
    elif isinstance(kernel, (str, os.PathLike)):
        kernel = load_kernel(str(kernel))
    if isinstance(kernel, Kernel):
        return kernel.fn, kernel.grid
    if not callable(kernel):
        raise NKIError(f"{kernel!r} is not a kernel function")
    return kernel, ()


def _imports_legacy(fn: Callable[..., Any]) -> bool:
    """Whether a kernel's module imports `neuronxcc.nki`."""
    env = getattr(fn, "__globals__", None) or {}
    return any(
        v is legacy_isa or (isinstance(v, types.ModuleType) and v.__name__.startswith("neuronxcc"))
        for v in env.values()
    )


def _legacy_loops(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A `neuronxcc.nki` kernel with its Python `range` loops as `sequential_range`: that compiler
    replaced every `range(...)` in a kernel so (NKI docs, `nki.language.sequential_range`), which
    keeps the iterations from overlapping; the current NKI unrolls them, so its kernels stay as they are."""
    code, env = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or env is None or "range" not in code.co_names or not _imports_legacy(fn):
        return fn
    legacy = types.FunctionType(code, {**env, "range": sequential_range}, fn.__name__, fn.__defaults__, fn.__closure__)
    legacy.__kwdefaults__ = fn.__kwdefaults__
    return legacy


def _hw(hw: str | HardwareSpec) -> HardwareSpec:
    return hw if isinstance(hw, HardwareSpec) else load_hw(hw)


def _is_tensor_spec(x: Any) -> bool:
    """A `(shape, dtype)` pair or an object with `.shape` and `.dtype` (not a dtype itself); anything
    else (a tuple shape, a dtype, an int) is a compile-time parameter passed through to the kernel."""
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (tuple, list)):
        try:
            as_dtype(x[1])
        except AxonError:
            return False
        return all(isinstance(s, (int, np.integer)) for s in x[0])
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (np.dtype, type))


def _spec(x: Any) -> tuple[tuple[int, ...], np.dtype, np.ndarray | None]:
    if isinstance(x, np.ndarray):
        return tuple(x.shape), x.dtype, x
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (tuple, list)):
        return tuple(int(s) for s in x[0]), as_dtype(x[1]), None
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(int(s) for s in x.shape), as_dtype(x.dtype), None
    raise NKIError(f"kernel input {x!r} is neither an array nor a (shape, dtype) spec")


def _execute(
    kernel: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    hw: str | HardwareSpec,
    execute: bool,
    loop_limit: Any = None,
) -> tuple[Machine, Any]:
    fn, grid = _resolve(kernel)
    fn = _legacy_loops(fn)
    code = getattr(fn, "__code__", None)
    file = code.co_filename if code is not None else "<kernel>"
    machine = Machine(_hw(hw), execute, getattr(fn, "__name__", "kernel"), file)
    machine.loop_limit = loop_limit
    # the legacy compiler keeps affine_range loops as loops it may reorder; the current one unrolls
    # every loop but dynamic_range, in order (`axon.nki.carried`)
    names = getattr(code, "co_names", ())
    machine.independent_iterations = _imports_legacy(fn) or any(n.startswith("neuronxcc") for n in names)
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        params = []
    with machine:
        call_args: list[Any] = []
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray) or (not execute and _is_tensor_spec(a)):
                shape, dtype, data = _spec(a)
                name = params[i] if i < len(params) else f"arg{i}"
                alloc = machine.allocate(shape, dtype, "hbm", name)
                alloc.ever_written = True
                if alloc.data is not None:
                    if data is None:
                        raise NKIError(f"run needs arrays, got a spec for {name!r} (use axon.nki.trace for specs)")
                    alloc.data[...] = data.astype(dtype, copy=False)
                    alloc.written[...] = True  # type: ignore[index]
                call_args.append(View.whole(alloc))
            else:
                call_args.append(a)
        programs = (
            [()] if not grid else [tuple(int(v) for v in np.unravel_index(i, grid)) for i in range(int(np.prod(grid)))]
        )
        result = None
        for pid in programs:
            machine.program_ids, machine.num_programs = pid, grid
            try:
                result = fn(*call_args, **kwargs)
            except AxonError:
                raise
            except Exception as exc:
                raise _kernel_error(exc, file, machine.kernel) from None
        machine.check_liveness()
    return machine, result


def _kernel_error(exc: Exception, file: str, kernel: str) -> NKIError:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == file]
    where = f"{os.path.basename(file)}:{frames[-1].lineno}: " if frames else ""
    # a bare `assert` says nothing: its source line says what the kernel expected
    detail = str(exc) or (frames[-1].line or "" if frames else "")
    return NKIError(f"{where}kernel {kernel} raised {type(exc).__name__}: {detail}")


def _outputs(machine: Machine, result: Any) -> tuple[View, ...]:
    items = result if isinstance(result, (tuple, list)) else (() if result is None else (result,))
    outs = []
    for r in items:
        if not isinstance(r, View) or r.alloc.kind != "hbm":
            raise NKIError(f"kernel {machine.kernel} must return HBM tensors (nl.shared_hbm), got {r!r}")
        outs.append(r)
    return tuple(outs)


def _small_blas() -> Any:
    """Run BLAS single-threaded while emulating: every nc_matmul is a small (<=128x128x512) product,
    for which thread start-up and synchronization cost far more than the arithmetic, above all on
    a loaded machine."""
    return _blas_libraries().limit(limits=1, user_api="blas")


@cache
def _blas_libraries() -> ThreadpoolController:
    """The thread pools of the libraries loaded, found once per process: `threadpool_limits` looks
    them up on every call, walking every shared library the process has loaded (2-3 ms in a tune,
    which has loaded MLflow's, XGBoost's and Z3's: 3% of the test suite's CPU, one lookup per kernel
    run). NumPy's BLAS, the one the emulator's products use, is loaded before this module."""
    return ThreadpoolController()


def run(kernel: Any, *arrays: Any, hw: str | HardwareSpec = DEFAULT_HW, **kwargs: Any) -> Any:
    """Execute `kernel` on NumPy arrays; returns its output array, or a tuple of them.

    `kernel` is a function (plain or `@nki.jit`), `"file.py:fn"`, or NKI source text.

    >>> import numpy as np, axon.nki
    >>> axon.nki.install_import_shim()
    >>> import nki.language as nl, nki.isa as nisa
    >>> def double(a):
    ...     out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ...     t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    ...     nisa.dma_copy(dst=t, src=a)
    ...     nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    ...     nisa.dma_copy(dst=out, src=t)
    ...     return out
    >>> axon.nki.run(double, np.ones((4, 8), np.float32))[0, :3]
    array([2., 2., 2.], dtype=float32)
    """
    _, _, outs = _executed(kernel, arrays, kwargs, hw)
    return outs[0] if len(outs) == 1 else outs


def _executed(kernel: Any, arrays: Any, kwargs: Any, hw: str | HardwareSpec) -> tuple[Any, Any, tuple[Any, ...]]:
    """`kernel` executed on `arrays`: its machine, its output views and a copy of each output."""
    with _small_blas():
        machine, result = _execute(kernel, arrays, kwargs, hw, execute=True)
    views = _outputs(machine, result)
    return machine, views, tuple(v.alloc.data[v.np_index()].copy() for v in views)  # type: ignore[index]


def run_with_unwritten(
    kernel: Any, *arrays: Any, hw: str | HardwareSpec = DEFAULT_HW, **kwargs: Any
) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """`run`, with its outputs always as a tuple, and per output how many of its elements the kernel
    never wrote (on a device those hold whatever HBM held before; here NaN or 0)."""
    _, views, outs = _executed(kernel, arrays, kwargs, hw)
    unwritten = tuple(int((~v.alloc.written[v.np_index()]).sum()) for v in views)
    return outs, unwritten


def run_with_trace(kernel: Any, *arrays: Any, hw: str | HardwareSpec = DEFAULT_HW, **kwargs: Any) -> tuple[Any, Trace]:
    """`run`, also returning the trace of the executed instructions."""
    machine, views, outs = _executed(kernel, arrays, kwargs, hw)
    return (outs[0] if len(outs) == 1 else outs), machine.to_trace(tuple(v.alloc.id for v in views))


def trace(
    kernel: Any, *arrays_or_specs: Any, hw: str | HardwareSpec = DEFAULT_HW, loop_limit: Any = None, **kwargs: Any
) -> Trace:
    """Run `kernel` on shapes only and return the instruction `Trace` (no arrays allocated).

    Inputs are arrays, `(shape, dtype)` pairs or objects with `.shape` and `.dtype`. With
    `loop_limit` (an int, or a function of the trip count), each top-level loop runs only its first
    iterations (the trace's loop records keep the full trip counts): a partial trace, for timing
    extrapolation.

    >>> import axon.nki
    >>> axon.nki.install_import_shim()
    >>> import nki.language as nl, nki.isa as nisa
    >>> def copy(a):
    ...     out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ...     t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    ...     nisa.dma_copy(dst=t, src=a)
    ...     nisa.dma_copy(dst=out, src=t)
    ...     return out
    >>> axon.nki.trace(copy, ((128, 512), "bfloat16")).count()
    {'dma_copy': 2}
    """
    machine, result = _execute(kernel, arrays_or_specs, kwargs, hw, execute=False, loop_limit=loop_limit)
    return machine.to_trace(tuple(v.alloc.id for v in _outputs(machine, result)))
