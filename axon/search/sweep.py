"""Sweeps: tune every (entry, hardware) of a config under one MLflow parent run, then retrain and
register the cost model and report changes against the previous sweep of the same name.

A sweep is resumable: its state (parent run, finished tasks) lives in WORKDIR/sweeps/, each task's
Optuna study is named after the sweep and the task, and `RecordDB` never re-measures a kernel.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from axon.errors import AxonError, SpecError
from axon.measure.events import Callback, OnTrial
from axon.measure.records import RecordDB, code_version
from axon.measure.stores import Records
from axon.search.costmodel import CostModel
from axon.search.guards import preflight_sweep
from axon.search.request import TuneRequest
from axon.search.storage import check_cost_model
from axon.search.sweepconfig import SweepConfig, compare, load_sweep
from axon.search.tuning import tune
from axon.target import load_hw
from axon.track import Tracker
from axon.workdir import Workdir


@dataclass(frozen=True)
class SweepRow:
    key: str
    workload: str
    hw: str
    latency_ns: float | None
    unfused_ns: float | None
    expert_ns: float | None
    roofline_ns: float | None
    previous_ns: float | None
    run_id: str
    error: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.error)

    @property
    def change(self) -> float | None:
        if self.latency_ns is None or self.previous_ns is None:
            return None
        return self.latency_ns / self.previous_ns - 1


@dataclass(frozen=True)
class SweepReport:
    name: str
    parent_run_id: str
    rows: tuple[SweepRow, ...]
    regressions: tuple[str, ...]
    model_versions: dict[str, int]
    model_accuracy: dict[str, float | None]
    elapsed_s: float

    @property
    def failures(self) -> tuple[SweepRow, ...]:
        """The tasks that produced no kernel, with their reasons."""
        return tuple(r for r in self.rows if r.failed)

    def table(self) -> str:
        def us(ns):
            return "" if ns is None else f"{ns / 1e3:,.1f}"

        def ratio(a, b):
            return "" if a is None or b is None or not b else f"{a / b:.2f}x"

        header = ["task", "latency us", "vs unfused", "vs expert", "roofline", "previous us", "change", ""]
        lines = [header]
        for r in self.rows:
            flag = "REGRESSION" if r.key in self.regressions else ("FAILED" if r.error else "")
            change = "" if r.change is None else f"{r.change:+.1%}"
            roof = "" if r.latency_ns is None or r.roofline_ns is None else f"{r.roofline_ns / r.latency_ns:.0%}"
            lines.append(
                [
                    r.key,
                    us(r.latency_ns),
                    ratio(r.unfused_ns, r.latency_ns),
                    ratio(r.expert_ns, r.latency_ns),
                    roof,
                    us(r.previous_ns),
                    change,
                    flag,
                ]
            )
        widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines)

    def markdown(self) -> str:
        out = [
            f"# Sweep {self.name}",
            "",
            "| task | latency (us) | vs unfused | vs expert | roofline | previous (us) | change | flag |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            flag = "REGRESSION" if r.key in self.regressions else ("FAILED: " + r.error[:80] if r.error else "")
            out.append(
                "| "
                + " | ".join(
                    [
                        r.key,
                        "" if r.latency_ns is None else f"{r.latency_ns / 1e3:,.1f}",
                        "" if not (r.unfused_ns and r.latency_ns) else f"{r.unfused_ns / r.latency_ns:.2f}x",
                        "" if not (r.expert_ns and r.latency_ns) else f"{r.expert_ns / r.latency_ns:.2f}x",
                        "" if not (r.roofline_ns and r.latency_ns) else f"{r.roofline_ns / r.latency_ns:.0%}",
                        "" if r.previous_ns is None else f"{r.previous_ns / 1e3:,.1f}",
                        "" if r.change is None else f"{r.change:+.1%}",
                        flag,
                    ]
                )
                + " |"
            )
        return "\n".join(out) + "\n"

    def csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(
            [
                "task",
                "workload",
                "hw",
                "latency_ns",
                "unfused_ns",
                "expert_ns",
                "roofline_ns",
                "previous_ns",
                "change",
                "regression",
                "error",
            ]
        )
        for r in self.rows:
            w.writerow(
                [
                    r.key,
                    r.workload,
                    r.hw,
                    r.latency_ns,
                    r.unfused_ns,
                    r.expert_ns,
                    r.roofline_ns,
                    r.previous_ns,
                    r.change,
                    r.key in self.regressions,
                    r.error,
                ]
            )
        return buf.getvalue()


def _state_path(workdir: Workdir, config: SweepConfig) -> Path:
    return workdir.sweeps / f"{config.name}-{config.digest}.json"


def _previous(tracker: Any, name: str, exclude: str) -> dict[str, float | None]:
    """Latencies of the last finished sweep of this name (from its child runs' metrics)."""
    parents = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`axon.sweep` = '{name}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=20,
    )
    for parent in parents:
        if parent.info.run_id == exclude:
            continue
        out: dict[str, float | None] = {}
        for child in tracker.children(parent.info.run_id):
            key = child.data.tags.get("axon.sweep_key")
            if key:
                best = child.data.metrics.get("best_latency_us")
                out[key] = None if best is None else best * 1e3
        return out
    return {}


def run_sweep(
    config_path: str | Path,
    workdir: str | Path | Workdir,
    *,
    fail_on_regression: bool = False,
    cost_model: str | None = None,
    tracking_uri: str | None = None,
    on_task: Callable[[str, int, int], None] | None = None,
    on_trial: Callable[[Any], None] | None = None,
    trials: int | None = None,
    sampler: str | None = None,
    extra_config: dict[str, Any] | None = None,
    callbacks: Sequence[Callback] = (),
) -> SweepReport:
    """Run (or resume) the sweep of `config_path` in `workdir`; `callbacks` see every task's tune.

    Every entry is checked before the first is tuned (workload, shapes, hardware file, resource
    guards; a relative spec path is taken from the config file's directory): a bad entry raises
    SpecError naming it. An entry that fails while tuning is a row with its error
    (`SweepReport.failures`); a resumed sweep tunes failed entries again.
    """
    if trials is not None and trials < 1:
        raise SpecError(f"--trials must be at least 1, got {trials}")
    config = load_sweep(config_path)
    if trials is not None or sampler is not None:
        config = replace(config, trials=trials or config.trials, sampler=sampler or config.sampler)
    workdir = Workdir.resolve(workdir)
    preflight_sweep(config, workdir)
    check_cost_model(cost_model, config.seed, tracking_uri or workdir.tracking_uri)
    machines = {hw: load_hw(config.hw_file(hw)) for hw in config.hw}  # each hardware file read once
    tracker = Tracker(tracking_uri or workdir.tracking_uri, None if tracking_uri else workdir.artifact_root)
    state_path = _state_path(workdir, config)
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    resume = state.get("status") == "running"
    start = time.perf_counter()
    params = {
        "config": config.name,
        "config_file": config.source,
        "config_digest": config.digest,
        "trials": config.trials,
        "sampler": config.sampler,
        "seed": config.seed,
        "hw": list(config.hw),
        "entries": len(config.entries),
    }
    with tracker.run(
        f"sweep {config.name}",
        params=None if resume else params,
        tags={"axon.sweep": config.name, "axon.kind": "sweep"},
        run_id=state.get("parent") if resume else None,
    ) as parent:
        if not resume:
            state = {"parent": parent.run_id, "status": "running", "done": {}}
            state_path.parent.mkdir(parents=True, exist_ok=True)
            state_path.write_text(json.dumps(state))
        previous = _previous(tracker, config.name, parent.run_id)
        tasks = config.tasks()
        for i, (hw, entry) in enumerate(tasks):
            machine = machines[hw]
            key = entry.key(machine.name)  # by the file's machine name: a recalibrated trn1 is still trn1
            # ... but its study is its own: trials measured on another file are not this task's
            study = f"sweep:{config.name}:{key}:{machine.file_hash[:12]}"
            if on_task:
                on_task(key, i, len(tasks))
            if key in state["done"] and not state["done"][key].get("error"):
                continue
            args = (config, machine, entry, study, workdir, parent, cost_model, tracking_uri)
            done = tune_task(*args, on_trial=on_trial, callbacks=callbacks)
            state["done"][key] = {**done, "workload": entry.workload, "hw": hw}
            state_path.write_text(json.dumps(state))
        report = summarize(config, workdir, tracker, parent, machines, state["done"], previous, start)
        state["status"] = "finished"
        state_path.write_text(json.dumps(state))
    return report


def tune_task(
    config: SweepConfig,
    machine: Any,
    entry: Any,
    study: str,
    workdir: Workdir,
    parent: Any,
    cost_model: str | None,
    tracking_uri: str | None,
    *,
    storage: str | None = None,
    records: str | None = None,
    on_trial: Callable[[Any], None] | None = None,
    callbacks: Sequence[Callback] = (),
) -> dict[str, Any]:
    """Tune one task of a sweep under `parent`: its row's figures, or its error (never raises AxonError)."""
    key = entry.key(machine.name)
    try:
        request = TuneRequest.make(
            config.workload(entry),
            shape=entry.dims,
            preset=entry.preset,
            dtype=entry.dtype,
            hw=machine,
            backend=config.backend,
            trials=config.trials,
            sampler=config.sampler,
            seed=config.seed,
            cost_model=cost_model,
            workdir=workdir,
            study=study,
            storage=storage,
            records=records,
            tracking_uri=tracking_uri,
            parent_run=parent,
        )
        tuned = tune(request, [*([OnTrial(on_trial)] if on_trial else []), *callbacks])
        parent.tracker.client.set_tag(tuned.run_id, "axon.sweep_key", key)
        return {
            "latency_ns": tuned.best_latency_ns,
            "unfused_ns": tuned.unfused_ns,
            "expert_ns": tuned.expert_ns,
            "roofline_ns": tuned.roofline_ns,
            "run_id": tuned.run_id,
            "error": "",
        }
    except AxonError as exc:
        return {
            "latency_ns": None,
            "unfused_ns": None,
            "expert_ns": None,
            "roofline_ns": None,
            "run_id": "",
            "error": str(exc),
        }


def summarize(
    config: SweepConfig,
    workdir: Workdir,
    tracker: Any,
    parent: Any,
    machines: dict[str, Any],
    done: dict[str, dict[str, Any]],
    previous: dict[str, float | None],
    start: float,
    db: Records | None = None,
) -> SweepReport:
    """After the last task: the report against the previous sweep, the retrained cost models, the
    summary logged to the parent run."""
    rows = tuple(
        SweepRow(
            key,
            d["workload"],
            d["hw"],
            d["latency_ns"],
            d["unfused_ns"],
            d["expert_ns"],
            d["roofline_ns"],
            previous.get(key),
            d["run_id"],
            d["error"],
        )
        for key, d in done.items()
    )
    _, regressions = compare({r.key: r.latency_ns for r in rows}, previous, config.regression_threshold)
    versions, accuracy = _retrain(config, workdir, tracker, parent, machines, db or RecordDB(workdir.records))
    report = SweepReport(
        config.name,
        parent.run_id,
        rows,
        tuple(c.key for c in regressions),
        versions,
        accuracy,
        time.perf_counter() - start,
    )
    parent.log_text(report.markdown(), "summary.md")
    parent.log_text(report.csv(), "summary.csv")
    parent.log_metrics({"regressions": len(regressions), "tasks": len(rows), "failed": sum(1 for r in rows if r.error)})
    return report


def _retrain(
    config: SweepConfig, workdir: Workdir, tracker: Any, parent: Any, machines: dict[str, Any], db: Records
) -> tuple[dict[str, int], dict[str, float | None]]:
    """Retrain one cost model per hardware file (by its bytes: an edited copy may keep the name trn1),
    log and register it: on every tuned-kernel record of the full search space this code version
    wrote (their stored features are this code's) on that file."""
    versions, accuracy = {}, {}
    version = code_version()
    for hw in config.hw:
        hw_name = machines[hw].name
        same = (machines[hw].file_hash, config.backend, "kernel", version)
        records = [
            r for r in db.records(hw=hw_name) if (r.hw_hash, r.backend, r.kind, r.code_version) == same and not r.label
        ]
        model = CostModel(seed=config.seed)
        acc = model.fit(records, holdout=0.2)
        if not model.is_trained:
            continue
        path = model.save(workdir.models / f"costmodel-{hw_name}.json")
        name = config.registered_model.format(hw=hw_name)
        accuracy[hw_name] = None if acc is None else acc.pairwise
        versions[hw_name] = tracker.log_cost_model(parent, path, name, accuracy[hw_name])
        parent.log_metrics(
            {
                f"cost_model_{hw_name}_pairwise": acc.pairwise if acc else float("nan"),
                f"cost_model_{hw_name}_records": len(records),
            }
        )
    return versions, accuracy
