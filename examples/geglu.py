"""GeGLU, the gated feed-forward input of T5 v1.1 and PaLM-style blocks: gelu(x @ wg) * (x @ wu).

`ax.gelu` is the tanh approximation 0.5x(1 + tanh(0.79788456(x + 0.044715x^3))), not the erf form.
"""

import axon.spec as ax


@ax.spec(x="M D", wg="D F", wu="D F")
def geglu(x, wg, wu):
    return ax.gelu(x @ wg) * (x @ wu)


PRESETS = {"geglu": {"default": {"M": 4096, "D": 1024, "F": 3072},
                     "small": {"M": 256, "D": 256, "F": 384}}}
