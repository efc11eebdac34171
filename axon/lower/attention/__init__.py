"""Attention as one flash-style loop nest: `lower_attention(graph, knobs, hw)` for the graph forms
`(E @ V) / sum(E)` and `(E / sum(E)) @ V` with `E = exp(s - max(s))`, `s = (Q @ K.T) * c` (the
division by the row sum is applied after the second matmul in both, as an online softmax must).
Q and K may each be an rmsnorm of an input (`x / sqrt(mean(x^2) + eps) * gain`): the rows are
scaled in place before the transposes and the gain, one value per partition once transposed, is
applied on the way out of PSUM.

What it does that the row-block lowering cannot:
- Q, K and V of a head come in one DMA each (partition p holds rows p*T .. p*T+T-1: one descriptor
  per partition), Q and K are transposed on TensorE, four tiles per PSUM bank, one evacuation per
  bank; K^T and V stay resident for every query block of the head.
- Scores go to PSUM one chunk of <= 512 keys at a time (PSUM banks rotate; keys that are not
  whole chunks leave a narrower last chunk; a sequence length that is not whole 128-row tiles is
  loaded tile by tile, its partial last key tile ends the last chunk and its partial last query
  tile is computed over all partitions, the rows past its end zero); the row max is read from
  PSUM; one ScalarE `activation` computes exp(c*s - c*max) from PSUM with the row sum
  accumulated on the way (bias, scale and reduce of the same instruction).
- Several key chunks run as an online softmax: a running max, the correction exp(c*(m_old -
  m_new)) and a rescale of the running sum and output with one `scalar_tensor_tensor` each; the
  division by the row sum is deferred to the end of the row block.
- P is transposed on TensorE (four tiles into one bank, one evacuation on the engine of the knob
  `p_evac`) and multiplied by V tile by tile, accumulating in PSUM.
Query rows and key rows are permuted the same way for every tensor (row p*T + t is tile t,
partition p), which attention is invariant to; the output is written back with that permutation.
It emits no source and times nothing.

Parts: `form` (matching the graph), `plan` (knobs, what is rejected, the chunks), `rows` (rmsnorm
and transposes of Q and K), `steps` (the pipelined query-block loop), `nest` (one kernel).
"""

from axon.lower.attention.form import AttentionForm, match_attention
from axon.lower.attention.nest import lower_attention
from axon.lower.attention.plan import ATTENTION_KNOBS, Plan, plan_of

__all__ = ["ATTENTION_KNOBS", "AttentionForm", "Plan", "lower_attention", "match_attention", "plan_of"]
