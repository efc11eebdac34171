"""Where a tuning run's search state comes from: the Optuna storage and the starting cost model."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from axon.errors import StoreError
from axon.search.costmodel import CostModel
from axon.search.guards import check_journal, corrupt_journal
from axon.track.tracker import load_registered_booster
from axon.workdir import Workdir


def journal_storage(workdir: Workdir, storage: str | None) -> Any:
    """The Optuna storage: a URL as given, else a journal file (default WORKDIR/optuna.log), checked first."""
    if storage and "://" in storage:
        return storage
    path = Path(storage) if storage else workdir.journal
    check_journal(path)
    try:
        return JournalStorage(JournalFileBackend(str(path)))
    except (AssertionError, KeyError, IndexError, TypeError, ValueError):  # lines that parse but do not replay
        raise StoreError(corrupt_journal(path, "an error replaying it")) from None


def load_cost_model(
    ref: str | None,
    seed: int,
    tracking_uri: str | None = None,
    hw: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> CostModel:
    """A new model, a saved JSON file, or a registered one (`models:/name@alias`).

    When the model was trained on another hardware file than `hw` (by its recorded `hw`, or for a
    registered model by its name `axon-costmodel-<hw>`), `warn` is told once.
    """
    if not ref:
        return CostModel(seed=seed)
    if ref.startswith("models:/"):
        model = CostModel.load(load_registered_booster(ref, tracking_uri, Path(tempfile.mkdtemp()) / "model.json"))
    else:
        model = CostModel.load(ref)
    trained_on = getattr(model, "hw", None) or _hw_from_name(ref)
    if hw and warn and trained_on and hw not in trained_on.split(","):
        warn(f"cost model {ref} was trained on {trained_on}, tuning on {hw}: its ranking may not transfer")
    return model


def _hw_from_name(ref: str) -> str | None:
    m = re.search(r"costmodel-([A-Za-z0-9_]+)", ref)
    return m.group(1) if m else None
