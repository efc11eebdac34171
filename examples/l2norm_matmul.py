"""Rows scaled to unit L2 norm, then a matmul: (x / sqrt(sum(x*x) + eps)) @ w (cosine-similarity heads)."""

import axon.spec as ax


@ax.spec(x="M K", w="K N")
def l2norm_matmul(x, w, eps=1e-12):
    return (x / ax.sqrt(ax.sum(x * x) + eps)) @ w


PRESETS = {"l2norm_matmul": {"default": {"M": 4096, "K": 1024, "N": 2048},
                             "small": {"M": 256, "K": 256, "N": 512}}}
