"""The search: tuning problems, the tuner and its callbacks, the cost model and sampler, sweeps.

The Python API is `axon.search.api` (`TuneRequest`, `tune`).
"""
