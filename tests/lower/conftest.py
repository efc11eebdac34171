"""Shared helpers for the lowering tests: reference inputs and the relative-error check."""

from __future__ import annotations

import numpy as np

from axon.ir import evaluate, random_inputs

TOL = {"float32": 1e-5, "bfloat16": 2e-2}


def inputs_and_reference(graph, seed=0):
    """Random inputs in [-1, 1], or (0.05, 1] where the reference is undefined on negatives (adamw's sqrt)."""
    x = random_inputs(graph, seed)
    ref = evaluate(graph, x)
    if any(np.isnan(v).any() for v in ref.values()):
        x = random_inputs(graph, seed, low=0.05, high=1.0)
        ref = evaluate(graph, x)
    return x, ref


def rel_err(out, ref) -> float:
    return max(float(np.max(np.abs(out[k] - ref[k])) / max(1e-30, float(np.max(np.abs(ref[k]))))) for k in ref)
