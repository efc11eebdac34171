"""How the MLflow UI shows Axon's runs: the classic ML runs table with Axon's columns.

MLflow 3's UI opens on a GenAI overview and shows no metric column by default, and its server has
no option for either. Its UI does read two things we can set: the `workflowType` URL parameter
(GenAI or classic ML navigation) and saved views, experiment tags `mlflow.sharedViewState.<id>`
holding the runs table's state (visible columns, order, widths), opened by `?viewStateShareKey=<id>`.
Both are conventions of the UI, not of MLflow's API: checked against MLflow 3.17.2's UI, and
tests/track/test_ui_render.py renders the page where Chromium is installed. This module builds
both; it talks to no server and starts none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

VIEW_ID = "axon-tuning-runs"
VIEW_NAME = "Axon tuning runs"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
# The experiment type MLflow's UI otherwise infers (and writes back) from the experiment's contents.
KIND_TAG = ("mlflow.experimentKind", "custom_model_development")

# (column type, key, width in px), in display order: what a tuning run is judged by, then what it
# ran on (the run name, `tune <workload>`, says what it tuned).
COLUMNS = (
    ("metrics", "best_latency_us", 135),
    ("metrics", "speedup_vs_unfused", 155),
    ("metrics", "speedup_vs_expert", 145),
    ("metrics", "roofline_fraction", 140),
    ("params", "hw", 70),
    ("params", "shapes", 170),
    ("params", "dtype", 80),
)


def column_id(kind: str, key: str) -> str:
    """The UI's id of a runs-table column (its "canonical sort key": type.`key`)."""
    return f"{kind}.`{key}`"


def view_state() -> dict:
    """The runs table's UI state of the saved view (fields of MLflow's ExperimentPageUIState)."""
    ids = [column_id(kind, key) for kind, key, _ in COLUMNS]
    return {
        "selectedColumns": ids,
        "columnOrder": ids,
        "columnWidths": {column_id(kind, key): width for kind, key, width in COLUMNS},
    }


def view_tags(existing: Mapping[str, str], created_ms: int) -> dict[str, str]:
    """The experiment tags to set so the UI opens on Axon's runs table (empty when all are there).

    The saved view is MLflow's envelope: plain-JSON `name` and `createdAt` (listed in the UI's
    "Views" menu) around the serialized `state` (MLflow writes it deflate-compressed and reads
    plain JSON too). It is rewritten when its columns differ from these; the experiment kind is set
    only where none is, so a kind chosen in the UI stays."""
    tags = {}
    try:
        current = json.loads(json.loads(existing[VIEW_TAG])["state"]) == view_state()
    except (KeyError, ValueError, TypeError):
        current = False
    if not current:
        envelope = {"name": VIEW_NAME, "createdAt": created_ms, "state": json.dumps(view_state(), sort_keys=True)}
        tags[VIEW_TAG] = json.dumps(envelope)
    if KIND_TAG[0] not in existing:
        tags[KIND_TAG[0]] = KIND_TAG[1]
    return tags


def runs_url(base_url: str, experiment_id: str) -> str:
    """The UI page of an experiment's runs table, classic ML navigation, Axon's saved view.

    >>> runs_url("http://127.0.0.1:5000", "1")
    'http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning&viewStateShareKey=axon-tuning-runs'
    """
    return f"{base_url}/#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={VIEW_ID}"
