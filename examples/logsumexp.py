"""Row logsumexp written the stable way a user writes it: m = max(x); m + log(sum(exp(x - m)))."""

import axon.spec as ax


@ax.spec(x="M N")
def logsumexp(x):
    m = ax.max(x)
    return m + ax.log(ax.sum(ax.exp(x - m)))


PRESETS = {"logsumexp": {"default": {"M": 4096, "N": 8192},
                         "small": {"M": 256, "N": 512}}}
