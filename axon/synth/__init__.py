"""Variant discovery by propagating operators through a graph, every step proved; instruction
synthesis for fused elementwise groups (formed by `axon.lower.groups`), every sequence proved."""

from axon.synth.discover import Attempt, Discovery, Variant, discover, discover_variants
from axon.synth.isel import Alternative, FusedGroup, synthesize_instructions
from axon.synth.rewrite import Move

__all__ = [
    "Alternative",
    "Attempt",
    "Discovery",
    "FusedGroup",
    "Move",
    "Variant",
    "discover",
    "discover_variants",
    "synthesize_instructions",
]
