"""MLflow tracking: runs, nested sweep runs, artifacts, the cost-model registry."""

from axon.track.tracker import Run, Tracker

__all__ = ["Run", "Tracker"]
