import axon.spec as ax


@ax.spec(x="M K", g="K", w="K N")          # input names and symbolic shapes
def rmsnorm_matmul(x, g, w, eps=1e-6):
    return (x / ax.sqrt(ax.mean(x * x) + eps) * g) @ w


PRESETS = {"rmsnorm_matmul": {"default": {"M": 4096, "K": 1024, "N": 2048},
                              "small": {"M": 256, "K": 256, "N": 512}}}   # optional
