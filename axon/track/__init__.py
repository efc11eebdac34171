"""MLflow tracking: runs, nested sweep runs, artifacts, the cost-model registry."""

from axon.track.tracker import Run, Tracker, workdir_store

__all__ = ["Run", "Tracker", "workdir_store"]
