"""Residual add followed by LayerNorm: h = x + r, then (h - mean(h)) / sqrt(var(h) + eps) * g + b."""

import axon.spec as ax


@ax.spec(x="M N", r="M N", g="N", b="N")
def add_layernorm(x, r, g, b, eps=1e-5):
    h = x + r
    return (h - ax.mean(h)) / ax.sqrt(ax.var(h) + eps) * g + b


PRESETS = {"add_layernorm": {"default": {"M": 4096, "N": 8192},
                             "small": {"M": 256, "N": 512}}}
