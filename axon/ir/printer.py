"""A readable listing of a graph, one node a line, shapes with their bound sizes.

The listing is part of `Graph` itself (`Graph.format`, `str(graph)`), so it lives in
`axon.ir.graph`; this module is its historical import path.
"""

from __future__ import annotations

from axon.ir.dims import Dim
from axon.ir.graph import format_graph

__all__ = ["format_graph", "Dim"]
