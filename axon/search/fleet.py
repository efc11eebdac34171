"""Sweeps on a fleet: any number of worker processes, on one machine or many, share one sweep.

The sweep's queue lives in the records store beside the records (SQLite on one machine, PostgreSQL
for many): one row per task, taken by one worker under a lease that its trials renew. A worker
takes the next task not done (or one whose holder died: a dead pid on this host at once, another
host's when its lease ran out), tunes it into the shared study and records, marks it done, and
goes on; whoever finds every task done first writes the summary and retrains the cost model. It
does not split one task's trials over workers: a sweep has at least as many tasks as workers.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from axon.errors import StoreError
from axon.measure.events import Callback, TrialLog
from axon.measure.stores import Records, open_records, records_location
from axon.search.sweep import SweepReport, _previous, summarize, tune_task
from axon.search.sweepconfig import SweepConfig, load_sweep
from axon.target import load_hw
from axon.track import Tracker
from axon.track.tracker import Run
from axon.workdir import Workdir, pid_alive

LEASE_S = 300.0  # a task's lease; each trial renews it, so it only runs out for a dead or hung worker


@dataclass(frozen=True)
class Fleet:
    """Where the workers of a sweep meet: the records store (which holds the queue), the Optuna
    storage and the MLflow tracking store; each defaults to the workdir's file."""

    workdir: Workdir
    storage: str | None = None
    records: str | None = None
    tracking_uri: str | None = None

    def open(self) -> Records:
        return open_records(records_location(self.records, self.storage, self.workdir.records))

    def tracker(self) -> Tracker:
        return Tracker(
            self.tracking_uri or self.workdir.tracking_uri, None if self.tracking_uri else self.workdir.artifact_root
        )


def me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def publish(config: SweepConfig, fleet: Fleet) -> str:
    """Put the sweep (its parent run and one queue row per task) in the store, once; its id.

    Publishing a sweep that is already there joins it; one that finished starts afresh.
    """
    sweep = f"{config.name}-{config.digest}"
    db, tracker = fleet.open(), fleet.tracker()
    found = db.execute("SELECT summarized_by FROM sweeps WHERE sweep=?", (sweep,))
    if found and found[0][0]:
        db.execute("DELETE FROM sweep_tasks WHERE sweep=?", (sweep,))
        db.execute("DELETE FROM sweeps WHERE sweep=?", (sweep,))
        found = []
    if not found:
        params = {"config": config.name, "config_digest": config.digest, "trials": config.trials, "hw": config.hw}
        parent = tracker.client.create_run(
            tracker.experiment_id,
            tags={"axon.sweep": config.name, "axon.kind": "sweep", "mlflow.runName": f"sweep {config.name}"},
            run_name=f"sweep {config.name}",
        ).info.run_id
        Run(tracker, parent).log_params(params)
        text = json.dumps(
            {"path": config.source, "yaml": Path(config.source).read_text(), "config": _overrides(config)}
        )
        db.execute("INSERT INTO sweeps VALUES (?, ?, ?, '') ON CONFLICT (sweep) DO NOTHING", (sweep, parent, text))
        if db.execute("SELECT parent FROM sweeps WHERE sweep=?", (sweep,))[0][0] != parent:  # another won
            tracker.client.set_terminated(parent, status="KILLED")
    machines = {hw: load_hw(config.hw_file(hw)) for hw in config.hw}
    for i, (hw, entry) in enumerate(config.tasks()):
        db.execute(
            "INSERT INTO sweep_tasks VALUES (?, ?, ?, 'pending', '', 0, '{}') ON CONFLICT (sweep, key) DO NOTHING",
            (sweep, entry.key(machines[hw].name), i),
        )
    db.close()
    return sweep


def _overrides(config: SweepConfig) -> dict[str, Any]:
    return {"trials": config.trials, "sampler": config.sampler}


def pending_sweeps(fleet: Fleet) -> list[str]:
    """The sweeps in the store not yet summarized, oldest first (what `axon worker` joins)."""
    db = fleet.open()
    try:
        return [row[0] for row in db.execute("SELECT sweep FROM sweeps WHERE summarized_by='' ORDER BY sweep")]
    finally:
        db.close()


class _Lease(Callback):
    """Renews the task's lease after every trial."""

    def __init__(self, db: Records, sweep: str, key: str) -> None:
        self.db, self.sweep, self.key = db, sweep, key

    def on_trial(self, trial: TrialLog) -> None:
        self.db.execute(
            "UPDATE sweep_tasks SET expires=? WHERE sweep=? AND key=? AND holder=?",
            (time.time() + LEASE_S, self.sweep, self.key, me()),
        )


def _take(db: Records, sweep: str) -> tuple[str, int] | None:
    """The next task not done, leased to this worker; None when no task can be taken now."""
    host = socket.gethostname()
    for (holder,) in db.execute(
        "SELECT DISTINCT holder FROM sweep_tasks WHERE sweep=? AND status='running' AND holder LIKE ?",
        (sweep, host + ":%"),
    ):
        if not pid_alive(int(holder.rsplit(":", 1)[1])):  # killed on this host: no need to wait out the lease
            db.execute("UPDATE sweep_tasks SET expires=0 WHERE sweep=? AND holder=?", (sweep, holder))
    free = "(status='pending' OR (status='running' AND expires<?))"
    while True:
        now = time.time()
        rows = db.execute(
            f"UPDATE sweep_tasks SET status='running', holder=?, expires=? WHERE sweep=? AND {free} AND key=("
            f"SELECT key FROM sweep_tasks WHERE sweep=? AND {free} ORDER BY position LIMIT 1) RETURNING key, position",
            (me(), now + LEASE_S, sweep, now, sweep, now),
        )
        if rows:
            return str(rows[0][0]), int(rows[0][1])
        left = db.execute(f"SELECT COUNT(*) FROM sweep_tasks WHERE sweep=? AND {free}", (sweep, now))
        if not left[0][0]:
            return None  # (another worker took the row between the two selects: try again)


def work(
    fleet: Fleet,
    sweep: str,
    *,
    cost_model: str | None = None,
    on_task: Callable[[str, int, int], None] | None = None,
    on_trial: Callable[[Any], None] | None = None,
    poll_s: float = 1.0,
    callbacks: Sequence[Callback] = (),
) -> SweepReport | None:
    """Work on `sweep` until every task is done; the report when this worker summarized it.
    `callbacks` see every task's tune (its warnings: else Python's, with a source line)."""
    db, tracker = fleet.open(), fleet.tracker()
    found = db.execute("SELECT parent, config FROM sweeps WHERE sweep=?", (sweep,))
    if not found:
        raise StoreError(f"no sweep {sweep} in the records store: start it with axon sweep CONFIG --workers N")
    parent, config = Run(tracker, found[0][0]), _load(found[0][1], fleet.workdir, sweep)
    machines = {hw: load_hw(config.hw_file(hw)) for hw in config.hw}
    tasks = config.tasks()
    start = time.perf_counter()
    while True:
        got = _take(db, sweep)
        if got is None:
            left = db.execute("SELECT COUNT(*) FROM sweep_tasks WHERE sweep=? AND status<>'done'", (sweep,))[0][0]
            if not left:
                break
            time.sleep(poll_s)  # others hold the rest: wait to take over any whose holder dies
            continue
        key, position = got
        hw, entry = tasks[position]
        machine = machines[hw]
        if on_task:
            on_task(key, position, len(tasks))
        done = tune_task(
            config,
            machine,
            entry,
            f"sweep:{config.name}:{key}:{machine.file_hash[:12]}",
            fleet.workdir,
            parent,
            cost_model,
            fleet.tracking_uri,
            storage=fleet.storage,
            records=fleet.records,
            on_trial=on_trial,
            callbacks=[_Lease(db, sweep, key), *callbacks],
        )
        result = json.dumps({**done, "workload": entry.workload, "hw": hw, "position": position})
        db.execute(
            "UPDATE sweep_tasks SET status='done', result=? WHERE sweep=? AND key=? AND holder=?",
            (result, sweep, key, me()),
        )
    if not db.execute(
        "UPDATE sweeps SET summarized_by=? WHERE sweep=? AND summarized_by='' RETURNING sweep", (me(), sweep)
    ):
        db.close()
        return None
    rows = db.execute("SELECT key, result FROM sweep_tasks WHERE sweep=? ORDER BY position", (sweep,))
    done_rows = {key: json.loads(result) for key, result in rows}
    previous = _previous(tracker, config.name, parent.run_id)
    report = summarize(config, fleet.workdir, tracker, parent, machines, done_rows, previous, start, db)
    tracker.client.set_terminated(parent.run_id, status="FINISHED")
    db.close()
    return report


def _load(text: str, workdir: Workdir, sweep: str) -> SweepConfig:
    """The sweep's config: its file when this machine has it unchanged, else the stored copy."""
    data = json.loads(text)
    path = Path(data["path"])
    if not (path.exists() and path.read_text() == data["yaml"]):
        path = workdir.sweeps / f"{sweep}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data["yaml"])
    return replace(load_sweep(path), **data["config"])
