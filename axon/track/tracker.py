"""`Tracker`: every tuning run and sweep as an MLflow run, in a local SQLite store by default.

Runs carry params, per-trial metrics (with step), tags and artifacts; sweeps are parent runs with
nested children; cost models are logged with `mlflow.xgboost` and registered. MLflow is imported
lazily (it costs ~2 s). It is a view of `RecordDB`, never the source of truth. A new experiment
carries the saved view the MLflow UI opens on (`axon.track.view`).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import socket
import sys
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from axon.errors import StoreError
from axon.lazy import mlflow, xgboost
from axon.track.storefile import seed_sqlite_store
from axon.track.view import view_tags
from axon.workdir import Workdir

DEFAULT_EXPERIMENT = "axon"


def _reachable(tracking_uri: str, timeout_s: float = 5.0) -> None:
    """A tracking server (http[s]://host:port) that accepts no connection is a StoreError at once:
    MLflow's client would retry it with backoff for minutes before the tune even starts."""
    url = urllib.parse.urlsplit(tracking_uri)
    if url.scheme not in ("http", "https") or not url.hostname:
        return
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise StoreError(f"MLflow tracking server {tracking_uri} cannot be reached: {exc}") from None


@contextmanager
def mlflow_uris(tracking_uri: str) -> Iterator[Any]:
    """The mlflow module with its global tracking and registry URIs set to `tracking_uri` for the
    block, and restored after it (MLflow's fluent API reads only the globals)."""
    ml = mlflow()
    before = (ml.get_tracking_uri(), ml.get_registry_uri())
    ml.set_tracking_uri(tracking_uri)
    ml.set_registry_uri(tracking_uri)
    try:
        yield ml
    finally:
        ml.set_tracking_uri(before[0])
        ml.set_registry_uri(before[1])


def load_registered_booster(ref: str, tracking_uri: str | None, path: Path) -> Path:
    """Save the XGBoost model registered as `ref` (models:/name@alias) to `path`."""
    ml = mlflow()
    try:
        if tracking_uri:
            with mlflow_uris(tracking_uri):
                booster = ml.xgboost.load_model(ref)
        else:
            booster = ml.xgboost.load_model(ref)
    except Exception as exc:  # MLflow raises several types for a missing model
        raise StoreError(f"cost model {ref} cannot be loaded: {str(exc).splitlines()[0]}") from None
    booster.save_model(str(path))
    return path


# What MLflow prints to stderr when it registers a model: Axon says which version it registered itself.
_REGISTRY_CHATTER = ("Successfully registered model ", "Created version ", "Registered model ")


@contextmanager
def _registry_quiet() -> Iterator[None]:
    """Registering a model printed "Successfully registered model ..." and "Created version ..." to
    stderr, under `--quiet` too. The block's stderr is held and given back without those lines (all
    of it if the block raises). MLflow's own switch for its event lines is no use here: a step of
    `log_model` turns it back on."""
    held = io.StringIO()
    try:
        with redirect_stderr(held):
            yield
    except BaseException:
        sys.stderr.write(held.getvalue())
        raise
    kept = [line for line in held.getvalue().splitlines(keepends=True) if not line.startswith(_REGISTRY_CHATTER)]
    sys.stderr.write("".join(kept))


def _sqlite_file(tracking_uri: str) -> Path | None:
    """The database file of a SQLite store's URI; None for a tracking server or an in-memory store."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix) or tracking_uri == prefix + ":memory:":
        return None
    return Path(tracking_uri[len(prefix) :])


@contextmanager
def _store_lock(db: Path | None) -> Iterator[None]:
    """An exclusive lock between processes on a SQLite store (a `.lock` file beside it); no-op for
    a tracking server, which serializes its own writes."""
    if db is None:
        yield
        return
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, also if this process dies
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class Run:
    """A live MLflow run: log through it, it ends when its `with` block does."""

    tracker: Tracker
    run_id: str

    def log_params(self, params: Mapping[str, Any]) -> None:
        items = [mlflow().entities.Param(str(k), _short(v)) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.tracker.client.log_batch(self.run_id, params=items[i : i + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        Metric = mlflow().entities.Metric
        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None and v == v]
        if items:
            self.tracker.client.log_batch(self.run_id, metrics=items)

    def log_metric_history(self, name: str, values: list[float]) -> None:
        """A whole curve at once (steps 0..n-1), batched."""
        Metric = mlflow().entities.Metric
        now = int(time.time() * 1000)
        items = [Metric(name, float(v), now, i) for i, v in enumerate(values)]
        for i in range(0, len(items), 500):
            self.tracker.client.log_batch(self.run_id, metrics=items[i : i + 500])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        RunTag = mlflow().entities.RunTag
        self.tracker.client.log_batch(self.run_id, tags=[RunTag(k, _short(v)) for k, v in tags.items()])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.tracker.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.tracker.client.log_text(self.run_id, text, artifact_file)

    def log_dict(self, data: Any, artifact_file: str) -> None:
        self.tracker.client.log_text(
            self.run_id, json.dumps(data, indent=2, sort_keys=True, default=str), artifact_file
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that id
        return True
    return True


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:6000]


class Tracker:
    """MLflow runs for Axon.

    >>> import tempfile
    >>> t = Tracker.for_workdir(tempfile.mkdtemp())
    >>> with t.run("demo", params={"workload": "matmul"}) as run:
    ...     run.log_metrics({"latency_us": 12.5}, step=0)
    >>> t.client.get_run(run.run_id).data.metrics["latency_us"]
    12.5
    """

    def __init__(
        self, tracking_uri: str, artifact_root: str | None = None, experiment: str = DEFAULT_EXPERIMENT
    ) -> None:
        self.tracking_uri = tracking_uri
        self._orphans_closed = False
        _reachable(tracking_uri)
        try:
            # The first client of a fresh SQLite store creates its tables (MlflowClient() already
            # does); two processes at once fail ("table experiments already exists", "duplicate
            # column name"), so opening the store and creating the experiment take a file lock.
            db = _sqlite_file(tracking_uri)
            with _store_lock(db):
                if db is not None:
                    seed_sqlite_store(db)  # a new store: a copy of a migrated empty one, not MLflow's migrations
                self.client = mlflow().tracking.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
                self.experiment_id = self._experiment(experiment, artifact_root)
        except Exception as exc:  # MLflow raises many types; the user needs the store named
            raise StoreError(
                f"MLflow tracking store {tracking_uri} cannot be used: {str(exc).splitlines()[0]}"
            ) from None

    def _experiment(self, name: str, artifact_root: str | None) -> str:
        found = self.client.get_experiment_by_name(name)
        if found:
            return found.experiment_id
        tags = view_tags({}, int(time.time() * 1000))
        try:
            return self.client.create_experiment(name, artifact_location=artifact_root, tags=tags)
        except Exception:  # another worker created it first (on a tracking server, where no lock is held)
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def ensure_ui_view(self) -> None:
        """Give the experiment Axon's saved runs-table view, if it lacks it (one made by an older
        Axon or by hand); see `axon.track.view`."""
        existing = self.client.get_experiment(self.experiment_id).tags
        for key, value in view_tags(existing, int(time.time() * 1000)).items():
            self.client.set_experiment_tag(self.experiment_id, key, value)

    @classmethod
    def for_workdir(cls, workdir: str | Path | Workdir, experiment: str = DEFAULT_EXPERIMENT) -> Tracker:
        wd = Workdir.resolve(workdir)
        uri, root = wd.tracking_uri, wd.artifact_root
        return cls(uri, root, experiment)

    @contextmanager
    def run(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
        parent: Run | str | None = None,
        run_id: str | None = None,
    ) -> Iterator[Run]:
        """Start (or, with `run_id`, resume) a run; it ends FINISHED, FAILED, or KILLED on Ctrl-C."""
        self.close_orphans()
        owner = {"axon.host": socket.gethostname(), "axon.pid": str(os.getpid())}
        all_tags = {"mlflow.runName": name, **owner, **(tags or {})}
        if parent is not None:
            all_tags["mlflow.parentRunId"] = parent.run_id if isinstance(parent, Run) else parent
        if run_id is None:
            created = self.client.create_run(
                self.experiment_id, tags={k: _short(v) for k, v in all_tags.items()}, run_name=name
            )
            run = Run(self, created.info.run_id)
            if params:
                run.log_params(params)
        else:
            run = Run(self, run_id)
            self.client.update_run(run_id, status="RUNNING")
            run.set_tags(owner)
        try:
            yield run
        except KeyboardInterrupt:
            self.client.set_terminated(run.run_id, status="KILLED")
            raise
        except BaseException:
            self.client.set_terminated(run.run_id, status="FAILED")
            raise
        else:
            self.client.set_terminated(run.run_id, status="FINISHED")

    def close_orphans(self) -> int:
        """End as KILLED the runs still RUNNING whose process, on this host, is gone (kill -9, a crash,
        a lost machine's power): MLflow would list them as running for ever. Their end time is their
        last metric's. Runs of other hosts (fleet workers) are left to those hosts. Returns how many.
        Once per tracker, so that a sweep's child runs do not each search the store again."""
        if self._orphans_closed:
            return 0
        self._orphans_closed = True
        host = socket.gethostname().replace("'", "")
        found = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"attributes.status = 'RUNNING' and tags.`axon.host` = '{host}'",
            max_results=1000,
        )
        closed = 0
        for r in found:
            pid = int(r.data.tags.get("axon.pid", "0") or 0)
            if pid <= 0 or _alive(pid):
                continue
            last = max((m.timestamp for m in self._last_metrics(r)), default=r.info.start_time)
            # log_batch, not set_tag: two workers restarted on this host close the same orphan at once,
            # and MLflow's set_tag then fails one of them on the tag's key (IntegrityError, the worker
            # exits); its batch insert retries such a clash
            ended = mlflow().entities.RunTag("axon.ended", "its process was gone (killed or crashed)")
            self.client.log_batch(r.info.run_id, tags=[ended])
            self.client.set_terminated(r.info.run_id, status="KILLED", end_time=last)
            closed += 1
        return closed

    def _last_metrics(self, r: Any) -> list[Any]:
        return [m for name in r.data.metrics for m in self.client.get_metric_history(r.info.run_id, name)[-1:]]

    def children(self, parent_run_id: str) -> list[Any]:
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'", max_results=1000
        )

    def recent_runs(self, n: int = 20) -> list[Any]:
        return self.client.search_runs([self.experiment_id], order_by=["attributes.start_time DESC"], max_results=n)

    def log_cost_model(self, run: Run, model_path: str | Path, registered_name: str, accuracy: float | None) -> int:
        """Log an XGBoost model file with mlflow.xgboost, register it, and move the `champion`
        alias to it only if its held-out ranking accuracy did not drop; returns the version."""
        booster = xgboost().Booster()
        booster.load_model(str(model_path))
        with mlflow_uris(self.tracking_uri) as ml, _registry_quiet():
            with ml.start_run(run_id=run.run_id):
                info = ml.xgboost.log_model(
                    booster,
                    name="cost_model",
                    registered_model_name=registered_name,
                    pip_requirements=["xgboost-cpu>=2.1,<4"],
                    model_format="json",
                )
        version = int(info.registered_model_version)
        self.client.set_model_version_tag(registered_name, str(version), "heldout_pairwise", f"{accuracy}")
        if self._should_promote(registered_name, accuracy):
            self.client.set_registered_model_alias(registered_name, "champion", str(version))
        return version

    def _should_promote(self, name: str, accuracy: float | None) -> bool:
        try:
            champion = self.client.get_model_version_by_alias(name, "champion")
        except Exception:  # no champion yet
            return True
        try:
            prior = float(champion.tags.get("heldout_pairwise", "nan"))
        except ValueError:
            prior = float("nan")
        if accuracy is None or accuracy != accuracy:
            return prior != prior
        return not (prior == prior and accuracy < prior)
