"""Tracing, shape inference errors, canonical hashing, the printer, the evaluator."""

import json
import subprocess
import sys

import numpy as np
import pytest

import axon.spec as ax
from axon.errors import SpecError
from axon.ir import (
    GraphBuilder,
    TensorType,
    declare,
    evaluate,
    frontend,
    graph,
    parse_shape,
    printer,
    reference_case,
    shape_str,
    trace,
)
from tests.conftest import rel_err


@ax.spec(x="M K", w="K N")
def proj(x, w):
    return ax.relu(x @ w) * 2.0


def test_trace_binds_and_infers_shapes():
    g = trace(proj, M=4, K=3, N=5)
    assert g.bindings == {"M": 4, "K": 3, "N": 5}
    assert g.concrete_shape(g.outputs[0]) == (4, 5)
    assert [n.op for n in g.nodes] == ["input", "input", "matmul", "relu", "const", "mul"]


def test_shape_mismatch_names_op_both_shapes_and_line():
    @ax.spec(x="M K", y="M N")
    def bad(x, y):
        return x + y

    with pytest.raises(SpecError) as info:
        trace(bad)
    msg = str(info.value)
    assert msg.startswith("add:") and "[M, K]" in msg and "[M, N]" in msg
    assert "test_graph.py:" in msg


def test_matmul_contraction_mismatch():
    @ax.spec(x="M K", w="N K")
    def bad(x, w):
        return x @ w

    with pytest.raises(SpecError, match=r"matmul: contraction mismatch: \[M, K\] @ \[N, K\]"):
        trace(bad)


def test_unbound_dimension_and_unknown_dimension():
    g = trace(proj, M=4, K=3)
    with pytest.raises(SpecError, match="unbound dimension 'N'"):
        evaluate(g, {})
    with pytest.raises(SpecError, match="has no dimension 'Q'"):
        trace(proj, Q=3)


def test_canonical_hash_ignores_ids_and_operand_order():
    @ax.spec(x="M K", y="M K")
    def f1(x, y):
        a = ax.exp(x)
        return a * y + 1.0

    @ax.spec(x="M K", y="M K")
    def f2(x, y):
        unused = ax.tanh(y)  # noqa: F841 - dead code is pruned
        return 1.0 + y * ax.exp(x)

    @ax.spec(x="M K", y="M K")
    def f3(x, y):
        return ax.exp(y) * x + 1.0

    assert trace(f1).canonical_hash() == trace(f2).canonical_hash()
    assert trace(f1).canonical_hash() != trace(f3).canonical_hash()


def test_builder_shares_identical_nodes():
    b = GraphBuilder("g")
    x = b.input("x", TensorType(parse_shape("M K")))
    e1 = b.add("exp", [x])
    e2 = b.add("exp", [x])
    assert e1 == e2
    g = b.build([b.add("add", [e1, e2])])
    assert len(g.nodes) == 3


def test_printer_shows_bound_sizes():
    text = trace(proj, M=4, K=3, N=5).format()
    assert "x: f32[M=4, K=3]" in text
    assert "matmul(x, w)" in text and "return out=" in text


def test_structural_ops_evaluate_like_numpy():
    @ax.spec(x="B S D")
    def f(x):
        lo, hi = ax.split(x, 2, axis=-1)
        y = ax.concatenate([hi, lo], axis=-1)
        z = ax.transpose(y, (1, 0, 2))
        r = ax.reshape(z, ("S", "B*D"))
        return ax.repeat(r, 2, axis=0), ax.var(x), ax.max(x, axis=0, keepdims=False)

    g = trace(f, B=2, S=3, D=4)
    x = np.arange(24, dtype=float).reshape(2, 3, 4)
    out = evaluate(g, {"x": x})
    y = np.concatenate([x[..., 2:], x[..., :2]], -1).transpose(1, 0, 2).reshape(3, 8)
    assert rel_err(out["out0"], np.repeat(y, 2, 0)) == 0
    assert rel_err(out["out1"], x.var(-1, keepdims=True)) <= 1e-15
    assert rel_err(out["out2"], x.max(0)) == 0


def test_slices_count_negative_bounds_from_the_end_and_stay_inside_the_axis():
    """x[:, :-1] was refused as an empty slice, x[:, -64:] traced as N + 64 columns (every kernel then
    read never-written memory); x[:, :1000] at N=256 traced as 1000 columns, x[:, 300:] as -44."""

    @ax.spec(x="M N")
    def ends(x):
        return x[:, 1:] - x[:, :-1], x[:, -64:] * 2.0, x[-2:-1]

    g = trace(ends, M=4, N=256)
    assert [g.concrete_shape(o) for o in g.outputs] == [(4, 255), (4, 64), (1, 256)]
    x = np.random.default_rng(0).uniform(-1, 1, (4, 256))
    out = evaluate(g, {"x": x})
    assert rel_err(out["out0"], np.diff(x, axis=1)) == 0 and rel_err(out["out1"], x[:, -64:] * 2) == 0
    assert rel_err(out["out2"], x[-2:-1]) == 0

    @ax.spec(x="M N")
    def past_the_end(x):
        return x[:, :1000] * 2.0

    @ax.spec(x="M N")
    def starts_past_the_end(x):
        return x[:, 300:]

    trace(past_the_end, M=4, N=1024).check_bound()  # inside the axis at N=1024
    with pytest.raises(
        SpecError, match=r"slice \[0:1000\] of axis 1 \(node %1\) is \[0:1000\], outside the axis's 256"
    ):
        trace(past_the_end, M=4, N=256).check_bound()
    with pytest.raises(SpecError, match=r"is \[300:256\], outside the axis's 256 \(N\)"):
        evaluate(trace(starts_past_the_end, M=4, N=256), {"x": np.zeros((4, 256))})

    @ax.spec(x="S D")
    def halves(x):
        lo, hi = ax.split(x, 2, axis=-1)
        return lo * hi

    with pytest.raises(SpecError, match="dimension D/2 is not a whole number"):  # `axon show` printed it
        trace(halves, S=4, D=63).check_bound()


def test_a_size_that_is_not_whole_names_the_spec_and_the_value_it_sizes():
    """'dimension K/2 is not a whole number under {...} (3/2)' named neither the spec nor the input,
    slice or reshape whose size it is."""

    @ax.spec(x="M K", y="M K/2")
    def half_input(x, y):
        return ax.concatenate([y, y]) * x

    @ax.spec(x="S D")
    def halves(x):
        lo, hi = ax.split(x, 2, axis=-1)
        return lo * hi

    @ax.spec(x="B S D")
    def heads(x):
        return ax.reshape(ax.reshape(x, "B S 4 D/4") * 2.0, "B S D")

    with pytest.raises(SpecError, match=r"graph half_input: input y of shape \[M, K/2\]: dimension K/2 is not"):
        trace(half_input, M=4, K=3).check_bound()
    with pytest.raises(SpecError, match=r"graph halves: slice \[0:D/2\] \(node %1\): dimension D/2 is not"):
        trace(halves, S=4, D=63).check_bound()
    with pytest.raises(SpecError, match=r"graph heads: %1 \(reshape\) of shape \[B, S, 4, D/4\]: dimension D/4"):
        trace(heads, B=2, S=3, D=202).check_bound()


def test_bad_reshape_and_axis():
    @ax.spec(x="M K")
    def bad_reshape(x):
        return ax.reshape(x, ("M", "M"))

    @ax.spec(x="M K")
    def bad_axis(x):
        return ax.sum(x, axis=2)

    with pytest.raises(SpecError, match=r"cannot reshape \[M, K\] into \[M, M\]"):
        trace(bad_reshape)
    with pytest.raises(SpecError, match="axis 2 out of range"):
        trace(bad_axis)


def test_a_reshape_takes_a_shape_written_as_a_spec_declares_one():
    """`ax.reshape(x, "N M")` iterated the string: "cannot parse dimension ' '", without the op or line."""

    @ax.spec(x="M N")
    def by_text(x):
        return ax.reshape(x, "N M"), x.reshape("M*N"), x.reshape("M", "N/2", 2)

    g = trace(by_text, M=4, N=6)
    assert [shape_str(g.nodes[o].type.shape) for o in g.outputs] == ["[N, M]", "[M*N]", "[M, N/2, 2]"]
    x = np.arange(24.0).reshape(4, 6)
    assert evaluate(g, {"x": x})["out0"].tolist() == x.reshape(6, 4).tolist()

    @ax.spec(x="M N")
    def typo(x):
        return ax.reshape(x, "M N$")

    with pytest.raises(SpecError, match=r"^reshape: cannot parse dimension 'N\$' \(at test_graph.py:\d+\)$"):
        trace(typo, M=4, N=6)


def test_a_cast_to_an_unknown_dtype_names_the_op_and_line():
    # "unknown dtype 'int8'; expected one of ...": neither the op nor the spec's line
    @ax.spec(x="M N")
    def to_int(x):
        return ax.cast(x, "int8")

    with pytest.raises(SpecError, match=r"^cast: unknown dtype 'int8'; expected one of .* \(at test_graph.py:\d+\)$"):
        trace(to_int, M=4, N=6)


def test_evaluate_checks_input_shapes():
    g = trace(proj, M=4, K=3, N=5)
    with pytest.raises(SpecError, match="input 'x' has shape"):
        evaluate(g, {"x": np.zeros((3, 3)), "w": np.zeros((3, 5))})


def test_max_rel_error_never_takes_a_nan_for_a_small_error():
    from axon.ir import max_rel_error

    ref = {"out": np.array([1.0, 2.0, 4.0])}
    assert max_rel_error({"out": np.array([1.0, 2.0, 3.0])}, ref) == pytest.approx(0.25)
    assert max_rel_error({"out": np.array([1.0, np.nan, 4.0])}, ref) == float("inf")
    assert max_rel_error({"out": np.array([1.0, np.inf, 4.0])}, ref) == float("inf")
    assert max_rel_error({"out": np.zeros(4)}, ref) == float("inf")  # another size
    assert max_rel_error({}, ref) == float("inf")
    # where the float64 reference is infinite (x / 0) the kernel must give the same infinity; where
    # it is NaN (0 / 0) any value is accepted
    ref = {"out": np.array([1.0, np.inf, -np.inf, np.nan])}
    assert max_rel_error({"out": np.array([1.0, np.inf, -np.inf, 7.0])}, ref) == 0.0
    assert max_rel_error({"out": np.array([1.0, 0.0, -np.inf, 7.0])}, ref) == float("inf")
    assert max_rel_error({"out": np.array([1.0, np.inf, np.inf, 7.0])}, ref) == float("inf")
    assert max_rel_error({"out": np.array([1.0, np.nan, -np.inf, 7.0])}, ref) == float("inf")


def test_reference_case_leaves_no_output_undefined():
    from axon.ir import reference_case
    from axon.workloads import get

    graph = get("adamw").graph("small")  # sqrt of a second moment: undefined on [-1, 1] inputs
    inputs, expected = reference_case(graph, seed=0)
    assert all(np.isfinite(v).all() for v in expected.values())
    assert (inputs["v"] > 0).all()
    x, y = reference_case(get("softmax").graph("small"), seed=0)
    assert (x["x"] < 0).any()  # inputs stay in [-1, 1] where the reference is defined there


def test_the_spec_module_exports_exactly_the_frontend_ops():
    exported = {n for n in dir(ax) if n[:1].islower() and callable(getattr(ax, n))} - {"spec", "tensor"}
    assert exported == set(frontend.OPS)
    assert all(hasattr(ax, n) for n in frontend.SPEC_NAMES)


def test_moved_names_keep_their_old_import_paths():
    for name in ("SpecSignature", "TensorDecl", "signature_of", "spec", "tensor"):
        assert getattr(frontend, name) is getattr(declare, name)
    assert printer.format_graph is graph.format_graph


def test_the_ir_imports_nothing_above_it():
    code = "import json, sys, axon.ir, axon.ir.printer; print(json.dumps([m for m in sys.modules if m[:5] == 'axon.']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert all(m.startswith(("axon.ir", "axon.errors", "axon.timelimit")) for m in json.loads(out)), out


def test_binding_a_spec_without_dimensions_says_it_has_none():
    # "spec scalar has no dimension 'M'; its dimensions are " (an empty list)
    @ax.spec(x="")
    def scalar(x):
        return ax.exp(x)

    with pytest.raises(SpecError, match=r"^spec scalar has no dimension 'M'; it has no dimensions$"):
        trace(scalar, M=4)


def test_reference_inputs_lie_in_a_declared_range():
    """A spec's declared range was ignored: sqrt(x - 5) for x in (5, 10) was evaluated on [-1, 1] and on
    [0.05, 1], every reference element NaN, so the kernel numerics check accepted any output, and
    `axon check` of log(x), x in (1, 10), said "finite NO"."""

    @ax.spec(x=ax.tensor("M N", range=(5, 10)), y="M N", z=ax.tensor("M N", range=(-100, 100)))
    def shifted(x, y, z):
        return ax.sqrt(x - 5.0) + y * z

    g = trace(shifted, M=4, N=8)
    inputs, expected = reference_case(g)
    assert 5 <= inputs["x"].min() and inputs["x"].max() <= 10 and np.isfinite(expected["out"]).all()
    assert -1 <= inputs["y"].min() and inputs["z"].max() <= 1  # the typical [-1, 1], within a wide range
