"""Every workload traces at both presets and its graph computes what WORKLOADS.md says."""

from __future__ import annotations

import numpy as np
import pytest

from axon.errors import SpecError
from axon.ir import evaluate, flops, min_bytes, random_inputs
from axon.workloads import all_workloads, get
from tests.conftest import rel_err


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rmsnorm(x, g, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * g


def _layernorm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _attention(q, k, v):
    d = q.shape[-1]
    return _softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(d)) @ v


def _adamw(theta, g, m, v, lr=1e-3, wd=0.01, b1=0.9, b2=0.999, eps=1e-8):
    t = theta - lr * wd * theta
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g**2
    return {"theta": t - lr * m2 / (np.sqrt(v2 / (1 - b2)) + eps), "m": m2, "v": v2}


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)


def _gqa(q, k, v):
    group = q.shape[0] // k.shape[0]
    return _attention(q, np.repeat(k, group, axis=0), np.repeat(v, group, axis=0))


REFERENCE = {
    "matmul": lambda a, b: a @ b,
    "transpose_matmul": lambda a, b: a.T @ b,
    "bmm": lambda a, b: a @ b,
    "softmax": _softmax,
    "rmsnorm": _rmsnorm,
    "layernorm": _layernorm,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3))),
    "rope": _rope,
    "adamw": _adamw,
    "rmsnorm_matmul": lambda x, g, w: _rmsnorm(x, g) @ w,
    "add_rmsnorm_matmul": lambda x, z, g, w: _rmsnorm(x + z, g) @ w,
    "matmul_add_rmsnorm": lambda x, w, z, g: _rmsnorm(x @ w + z, g),
    "layernorm_matmul": lambda x, g, b, w: _layernorm(x, g, b) @ w,
    "swiglu": lambda x, wg, wu, wd: ((x @ wg) / (1 + np.exp(-(x @ wg))) * (x @ wu)) @ wd,
    "lora": lambda x, w, a, b: x @ w + (x @ a) @ b,
    "bmm_softmax": lambda a, b: _softmax(a @ b),
    "attention": _attention,
    "gqa_attention": _gqa,
    "qknorm_attention": lambda q, k, v, gq, gk: _attention(_rmsnorm(q, gq), _rmsnorm(k, gk), v),
}


def test_there_are_twenty_workloads_with_references():
    names = [w.name for w in all_workloads()]
    assert len(names) == 20
    assert sorted(names) == sorted(REFERENCE)
    kinds = [w.kind for w in all_workloads()]
    assert kinds.count("single") == 10 and kinds.count("multi") == 10


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_evaluate_matches_independent_numpy_at_small_preset(name):
    graph = get(name).graph("small")
    inputs = random_inputs(graph, seed=3)
    if name == "adamw":  # v is a running mean of squares: keep it non-negative as in training
        inputs["v"] = np.abs(inputs["v"])
    outputs = evaluate(graph, inputs)
    expected = REFERENCE[name](*[inputs[n] for n in graph.input_names])
    if not isinstance(expected, dict):
        expected = {"out": expected}
    assert set(outputs) == set(expected)
    for key in expected:
        assert rel_err(outputs[key], expected[key]) <= 1e-12, key


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_traces_at_default_preset_with_documented_shapes(name):
    w = get(name)
    graph = w.graph("default")
    for dim, size in w.presets["default"].items():
        assert graph.bindings[dim] == size
    assert flops(graph) > 0 and min_bytes(graph) > 0
    assert w.graph("default", dtype="bfloat16").inputs[0].type.dtype == "bfloat16"
    # the symbolic graph is the same program
    assert w.symbolic().canonical_hash() == graph.canonical_hash()


def test_default_shapes_follow_workloads_md():
    assert get("matmul").graph().concrete_shape(get("matmul").graph().outputs[0]) == (4096, 12288)
    g = get("gqa_attention").graph()
    assert [n.type.concrete(g.bindings) for n in g.inputs] == [(16, 4096, 128), (8, 4096, 128), (8, 4096, 128)]
    assert get("adamw").graph().output_names == ("theta", "m", "v")


def test_matmul_flops_and_bytes():
    g = get("matmul").graph()
    assert flops(g) == 2 * 4096 * 5120 * 12288
    assert min_bytes(g) == 4 * (4096 * 5120 + 5120 * 12288 + 4096 * 12288)


def test_unknown_workload_suggests_the_closest_name():
    with pytest.raises(SpecError, match="did you mean 'rmsnorm_matmul'"):
        get("rmsnorm_matmull")


def test_user_spec_file_loads_with_presets(tmp_path):
    spec = tmp_path / "my_spec.py"
    spec.write_text(
        "import axon.spec as ax\n"
        "PRESETS = {'scaled_exp': {'default': {'M': 4, 'N': 8}}}\n"
        "@ax.spec(x='M N')\n"
        "def scaled_exp(x):\n"
        "    return ax.exp(x * 0.5)\n"
    )
    w = get(f"{spec}:scaled_exp")
    g = w.graph("default")
    x = np.linspace(-1, 1, 32).reshape(4, 8)
    assert rel_err(evaluate(g, {"x": x})["out"], np.exp(x * 0.5)) <= 1e-15


def test_user_spec_errors_name_the_problem(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        get(str(tmp_path / "missing.py") + ":f")
    spec = tmp_path / "s.py"
    spec.write_text("def plain(x):\n    return x\n")
    with pytest.raises(SpecError, match="has no function 'nope'"):
        get(f"{spec}:nope")
    with pytest.raises(SpecError, match="is not a spec"):
        get(f"{spec}:plain")
