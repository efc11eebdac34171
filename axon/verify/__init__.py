"""Proofs that two tensor programs are equal for every size, and counterexamples when they are not."""

from axon.verify.numeric import refute
from axon.verify.online import InvariantProof, prove_online_softmax
from axon.verify.proof import Counterexample, Proof, Result, Unknown, prove
from axon.verify.z3math import Z3Math

__all__ = [
    "InvariantProof",
    "prove_online_softmax",
    "Counterexample",
    "Proof",
    "Result",
    "Unknown",
    "Z3Math",
    "prove",
    "refute",
]
