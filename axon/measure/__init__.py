"""Backends (`sim`, `neuron`) behind one protocol, and the measurement database."""

from axon.measure.backend import Backend, Measurement, SimBackend, kernel_hash
from axon.measure.neuron import NeuronBackend, get_backend
from axon.measure.records import Record, RecordDB, task_key

__all__ = [
    "Backend",
    "Measurement",
    "NeuronBackend",
    "Record",
    "RecordDB",
    "SimBackend",
    "get_backend",
    "kernel_hash",
    "task_key",
]
