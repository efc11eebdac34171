"""Shared figures for the lowering tests: the relative-error tolerance per dtype."""

from __future__ import annotations

TOL = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 2e-2}  # axon.verify.adversarial.tolerance
