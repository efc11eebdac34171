"""Variant discovery by propagating operators through a graph, every step proved; instruction
synthesis for fused elementwise groups, every sequence proved."""

from axon.synth.discover import Attempt, Discovery, Variant, discover, discover_variants
from axon.synth.isel import Alternative, FusedGroup, fused_groups, synthesize_instructions
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
    "fused_groups",
    "synthesize_instructions",
]
