"""Variant discovery by propagating operators through a graph, every step proved."""

from axon.synth.discover import Attempt, Discovery, Variant, discover, discover_variants
from axon.synth.rewrite import Move

__all__ = ["Attempt", "Discovery", "Move", "Variant", "discover", "discover_variants"]
