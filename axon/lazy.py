"""The heavy or optional libraries, imported on first use (the only imports inside functions).

MLflow and XGBoost take about 2 s each to import, matplotlib about 0.5 s; a command that does not
track, train or plot should not pay for them. psycopg and SQLAlchemy (0.1-0.2 s each) serve only
stores on PostgreSQL. The Neuron SDK exists only on a Trainium instance.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType


def mlflow() -> ModuleType:
    """mlflow, with its submodules entities, tracking and xgboost reachable from it."""
    import mlflow  # lazy: a 2 s import, paid only by runs that track

    # a new store's schema migration is logged at INFO by MLflow's own handler: not for the terminal
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # nor a SQLite error (a full disk) it logs with its traceback before raising it again: the CLI says it once
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    return mlflow


# Set by the `axon` command, whose process is its own: XGBoost is then imported without scikit-learn.
# Its scikit-learn API imports scikit-learn and SciPy's statistics, 0.75 s of CPU in every process that
# trains or reads a cost model; Axon uses `Booster` only. A program that imports Axon keeps XGBoost whole.
COMMAND_PROCESS = False


def xgboost() -> ModuleType:
    if COMMAND_PROCESS and "xgboost" not in sys.modules and "sklearn" not in sys.modules:
        sys.modules["sklearn"] = None  # type: ignore[assignment]  # makes `import sklearn` an ImportError
        try:
            import xgboost  # lazy: a 1 s import, paid only when a cost model is trained, asked or logged
        finally:
            del sys.modules["sklearn"]
    import xgboost  # lazy: as above

    return xgboost


def matplotlib() -> ModuleType:
    """matplotlib with `figure` loaded: plots are `matplotlib.figure.Figure`s drawn off-screen (no
    pyplot, no global backend switch)."""
    import matplotlib.figure  # lazy: matplotlib loads only when a plot is drawn

    return matplotlib


def psycopg() -> ModuleType:
    import psycopg  # lazy: only records on PostgreSQL use it, and every `axon` process would pay its import

    return psycopg


def sqlalchemy_exc() -> ModuleType:
    """`sqlalchemy.exc`: the errors of Optuna's storage on PostgreSQL."""
    import sqlalchemy.exc  # lazy: only Optuna storage on PostgreSQL raises these; SQLAlchemy is a 0.2 s import

    return sqlalchemy.exc


def neuron_sdk() -> ModuleType:
    """The Neuron SDK's `neuronxcc.nki` (ImportError off a Trainium instance)."""
    from neuronxcc import nki  # lazy: the Neuron SDK exists only on a Trainium instance

    module: ModuleType = nki
    return module
