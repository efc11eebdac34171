"""The built-in workload library and user spec files (`path.py:function`).

A `Workload` is a spec function plus named shape presets (`default`, `small`). The registry is the
one explicit global of this package; user specs are loaded on demand and never registered.
"""

from __future__ import annotations

import difflib
import importlib.util
import keyword
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from axon.errors import SpecError
from axon.ir import Graph, trace
from axon.ir.frontend import signature_of
from axon.ir.trace import bind_dims
from axon.timelimit import TimeUp, time_limit
from axon.userfiles import siblings_importable
from axon.workloads import specs

SINGLE, MULTI = "single", "multi"


@dataclass(frozen=True)
class Workload:
    """A spec function with shape presets.

    >>> from axon.workloads import get
    >>> get("rmsnorm_matmul").graph("small").bindings
    {'K': 256, 'M': 256, 'N': 512}
    """

    name: str
    fn: Callable[..., Any]
    kind: str
    formula: str
    presets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # the name of its graphs and kernels: a Python identifier (a user spec's `name` is its file ref)
    kernel_name: str = ""

    def __post_init__(self) -> None:
        if not self.kernel_name:
            object.__setattr__(self, "kernel_name", identifier(self.name))

    def dims(self, preset: str = "default", **overrides: int) -> dict[str, int]:
        if preset in ("default", "small") and preset not in self.presets:
            # a user spec without the preset a command defaults to: its default preset for small, else
            # only what is given
            base = self.presets.get("default", {}) if preset == "small" else {}
            return {**base, **overrides}
        if preset not in self.presets:
            known = ", ".join(self.presets) or "none"
            raise SpecError(f"workload {self.name} has no preset {preset!r} (presets: {known})")
        return {**self.presets[preset], **overrides}

    def graph(self, preset: str | None = "default", dtype: str = "float32", **overrides: int) -> Graph:
        """The traced graph at a preset (or only the given dims when `preset` is None)."""
        dims = dict(overrides) if preset is None else self.dims(preset, **overrides)
        traced = trace(self.fn, dtype=dtype, name=self.kernel_name)
        stray = sorted(set(self.presets.get(preset or "", {})) - traced.symbols)
        if stray:  # "spec f has no dimension 'NN'" did not say where the NN came from: not the command line
            raise SpecError(
                f"{self.name}: PRESETS[{self.fn.__name__!r}][{preset!r}] binds {stray[0]!r}, a dimension spec "
                f"{self.fn.__name__} does not have (its dimensions are {', '.join(sorted(traced.symbols))})"
            )
        graph = bind_dims(traced, dims, self.fn.__name__)
        try:
            graph.check_bound()
        except SpecError as exc:
            if preset is None or preset in self.presets or not self.presets:
                raise
            # a spec whose PRESETS lacks the one a command defaults to: "unbound dimension 'M'" alone
            # did not say that it has others
            names = ", ".join(self.presets)
            raise SpecError(
                f"{exc}, or pick one of its presets with --preset ({names}; it has no {preset!r})"
            ) from None
        return graph

    def symbolic(self, dtype: str = "float32") -> Graph:
        """The graph with every dimension symbolic (what the verifier proves over)."""
        return trace(self.fn, dtype=dtype, name=self.kernel_name)


# module names an emitted kernel file imports: a kernel function of that name would shadow them
_KERNEL_GLOBALS = frozenset({"nki", "nisa", "nl"})


def identifier(name: str) -> str:
    """A valid Python identifier from a function name, usable as an emitted kernel's name
    (`my-fn` -> `my_fn`, `2x` -> `_2x`, `def` -> `def_`, `nl` -> `nl_`)."""
    out = re.sub(r"\W", "_", name) or "kernel"
    if out[0].isdigit():
        out = "_" + out
    return out + "_" if keyword.iskeyword(out) or out in _KERNEL_GLOBALS else out


def is_spec_ref(name: str) -> bool:
    """Whether `name` names a user spec (`path.py:function`) rather than a built-in workload."""
    path, sep, fn = name.rpartition(":")
    return bool(sep) and path.endswith(".py") and bool(fn)


def _w(fn: Callable[..., Any], kind: str, formula: str, default: dict[str, int], small: dict[str, int]) -> Workload:
    return Workload(fn.__name__, fn, kind, formula, {"default": default, "small": small})


_REGISTRY: dict[str, Workload] = {
    w.name: w
    for w in [
        _w(specs.matmul, SINGLE, "a @ b", dict(M=4096, K=5120, N=12288), dict(M=256, K=384, N=512)),
        _w(specs.transpose_matmul, SINGLE, "a.T @ b", dict(K=2048, M=4096, N=10944), dict(K=256, M=256, N=384)),
        _w(specs.bmm, SINGLE, "a @ b (batched)", dict(B=16, M=4096, K=64, N=4096), dict(B=2, M=256, K=64, N=256)),
        _w(specs.softmax, SINGLE, "exp(x - max(x)) / sum(exp(x - max(x)))", dict(M=4096, N=8192), dict(M=256, N=512)),
        _w(specs.rmsnorm, SINGLE, "x / sqrt(mean(x*x) + eps) * g", dict(M=4096, N=8192), dict(M=256, N=512)),
        _w(
            specs.layernorm,
            SINGLE,
            "(x - mean(x)) / sqrt(var(x) + eps) * g + b",
            dict(M=4096, N=8192),
            dict(M=256, N=512),
        ),
        _w(specs.silu, SINGLE, "x / (1 + exp(-x))", dict(M=4096, N=7168), dict(M=256, N=512)),
        _w(specs.gelu, SINGLE, "0.5x(1 + tanh(0.79788456(x + 0.044715x^3)))", dict(M=4096, N=7168), dict(M=256, N=512)),
        _w(
            specs.rope,
            SINGLE,
            "concat(x0*cos - x1*sin, x0*sin + x1*cos)",
            dict(H=64, S=4096, D=128),
            dict(H=2, S=256, D=128),
        ),
        _w(specs.adamw, SINGLE, "AdamW step (theta, m, v)", dict(M=10944, N=2048), dict(M=256, N=512)),
        _w(specs.rmsnorm_matmul, MULTI, "rmsnorm(x, g) @ w", dict(M=4096, K=1024, N=2048), dict(M=256, K=256, N=512)),
        _w(
            specs.add_rmsnorm_matmul,
            MULTI,
            "rmsnorm(x + z, g) @ w",
            dict(M=4096, K=1024, N=2048),
            dict(M=256, K=256, N=512),
        ),
        _w(
            specs.matmul_add_rmsnorm,
            MULTI,
            "rmsnorm(x @ w + z, g)",
            dict(M=4096, K=2048, N=2048),
            dict(M=256, K=256, N=512),
        ),
        _w(
            specs.layernorm_matmul,
            MULTI,
            "layernorm(x, g, b) @ w",
            dict(M=4096, K=4096, N=4096),
            dict(M=256, K=256, N=512),
        ),
        _w(
            specs.swiglu,
            MULTI,
            "(silu(x @ wg) * (x @ wu)) @ wd",
            dict(M=4096, D=1024, F=3072),
            dict(M=256, D=256, F=384),
        ),
        _w(
            specs.lora,
            MULTI,
            "x @ w + (x @ a) @ b",
            dict(M=4096, K=5120, N=12288, R=128),
            dict(M=256, K=256, N=512, R=64),
        ),
        _w(
            specs.bmm_softmax,
            MULTI,
            "softmax(a @ b) (batched)",
            dict(B=16, M=4096, K=64, N=4096),
            dict(B=2, M=256, K=64, N=256),
        ),
        _w(specs.attention, MULTI, "softmax(q @ k.T / sqrt(d)) @ v", dict(H=16, S=4096, D=128), dict(H=2, S=256, D=64)),
        _w(
            specs.gqa_attention,
            MULTI,
            "attention, 2 query heads per kv head",
            dict(KV=8, G=2, S=4096, D=128),
            dict(KV=2, G=2, S=256, D=64),
        ),
        _w(
            specs.qknorm_attention,
            MULTI,
            "attention(rmsnorm(q, gq), rmsnorm(k, gk), v)",
            dict(H=16, S=4096, D=128),
            dict(H=2, S=256, D=64),
        ),
    ]
}


def all_workloads() -> list[Workload]:
    return list(_REGISTRY.values())


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> Workload:
    """A built-in workload by name, or a user's spec as `path.py:function`."""
    if is_spec_ref(name) or name.endswith(".py") or ".py:" in name:
        return load_spec(name)
    if name in _REGISTRY:
        return _REGISTRY[name]
    close = difflib.get_close_matches(name, _REGISTRY, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else _path_hint(name)
    raise SpecError(f"unknown workload {name!r}{hint}")


def _path_hint(name: str) -> str:
    """What a name that reads as a path is missing (`dir:f`, `model.txt:f`, `dir/`): it was told to
    look in `axon workloads`, which lists the built-in ones only."""
    if ":" not in name and "/" not in name:
        return "; `axon workloads` lists them"
    path = Path(name.rpartition(":")[0] or name).expanduser()
    what = "a directory" if path.is_dir() else "not a .py file" if path.is_file() else "not found"
    return f"; {path} is {what}: a spec is named FILE.py:FUNCTION (the built-in ones: `axon workloads`)"


def _presets(table: Any, path: str, fn_name: str) -> Mapping[str, Mapping[str, int]]:
    """`PRESETS[fn_name]` of a spec file, checked: a SpecError naming the file and the entry that is
    not a mapping of preset names to {dimension: positive int}."""
    if not isinstance(table, Mapping):
        raise SpecError(
            f"spec file {path!r}: PRESETS must be a dict of function names to presets, got {type(table).__name__}"
        )
    flat = table and all(
        isinstance(v, Mapping) and v and all(isinstance(s, int) for s in v.values()) for v in table.values()
    )
    if fn_name not in table and flat:  # {"default": {"M": 256}}: presets of no function, the spec's dims unbound
        raise SpecError(
            f"spec file {path!r}: PRESETS is keyed by function name first: "
            f"PRESETS = {{{fn_name!r}: {{{', '.join(f'{k!r}: ...' for k in table)}}}}}"
        )
    presets = table.get(fn_name, {})
    if not isinstance(presets, Mapping):
        raise SpecError(f"spec file {path!r}: PRESETS[{fn_name!r}] must map preset names to shapes")
    for preset, dims in presets.items():
        if not isinstance(dims, Mapping):
            raise SpecError(
                f"spec file {path!r}: PRESETS[{fn_name!r}][{preset!r}] must map dimension names to sizes, got {dims!r}"
            )
        for dim, size in dims.items():
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise SpecError(
                    f"spec file {path!r}: PRESETS[{fn_name!r}][{preset!r}][{dim!r}] must be a positive "
                    f"integer, got {size!r}"
                )
    return presets


# how long a spec file may take to import (its top-level code) before it is refused
IMPORT_SECONDS = 60.0


def load_spec(ref: str, base: str | os.PathLike[str] | None = None) -> Workload:
    """Load `path.py:function`. Presets come from `PRESETS = {"function": {"default": {...}}}`, if any.

    A relative path is taken from `base` (default: the working directory). The workload's `name` is
    the resolved `ABSOLUTE_PATH.py:function`, so records and studies of a spec are the same from any
    working directory; its graphs and kernels are named by the function (`kernel_name`).
    """
    path, sep, fn_name = ref.rpartition(":")
    if not sep or not path.endswith(".py") or not fn_name:
        raise SpecError(f"malformed spec reference {ref!r}: expected PATH.py:FUNCTION, e.g. my_model.py:block")
    path = os.path.abspath(os.path.join(base or os.getcwd(), os.path.expanduser(path)))
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "not found"
        raise SpecError(f"spec file {path!r} {what}" + (f" (from {ref!r})" if not os.path.isabs(ref) else ""))
    mod_name = f"axon_user_spec_{abs(hash(os.path.abspath(path)))}"
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise SpecError(f"cannot import spec file {path!r}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[mod_name] = module
    try:
        with time_limit(IMPORT_SECONDS), siblings_importable(os.path.dirname(path)):
            loader_spec.loader.exec_module(module)
    except SpecError as exc:  # an @ax.spec declaration: which file it is in
        raise SpecError(f"spec file {path!r}: {exc}") from None
    except TimeUp:  # a loop at the file's top level: a hang without a word before
        raise SpecError(
            f"spec file {path!r} did not finish importing in {IMPORT_SECONDS:g} s (an endless loop at its top level?)"
        ) from None
    except SystemExit as exc:  # sys.exit() at the top level ended the command with its code and nothing said
        raise SpecError(f"spec file {path!r} called sys.exit({exc.code!r}) while imported") from None
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("nki", "neuronxcc"):  # a kernel file, given where a spec goes
            raise SpecError(
                f"{path!r} is an NKI kernel file, not a spec (it imports {exc.name}): "
                "`axon nki run` and `axon nki profile` run kernels; a spec imports axon.spec"
            ) from None
        raise SpecError(f"spec file {path!r} failed to import: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # a user's file failed to import: say where, not a traceback
        raise SpecError(f"spec file {path!r} failed to import: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        raise SpecError(f"spec file {path!r} has no function {fn_name!r}")
    signature_of(fn)
    presets = _presets(getattr(module, "PRESETS", {}), path, fn_name)
    return Workload(
        f"{path}:{fn_name}", fn, "user", fn.__doc__ or fn_name, presets, identifier(getattr(fn, "__name__", fn_name))
    )


__all__ = ["Workload", "all_workloads", "get", "identifier", "is_spec_ref", "load_spec", "names", "SINGLE", "MULTI"]
