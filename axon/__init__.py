"""Axon: a verified superoptimizer and learned-cost-model autotuner for NKI kernels on AWS Trainium."""

__version__ = "0.1.0"
