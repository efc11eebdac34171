"""The NeuronCore timing simulator: a trace plus a `HardwareSpec` give latency, busy time, traffic, timeline."""

from axon.sim.simulate import simulate, simulate_with_prefix
from axon.sim.timeline import Timeline
from axon.sim.timing import Timing

__all__ = ["Timeline", "Timing", "simulate", "simulate_with_prefix"]
