"""The Python API of the search, in one place: make a `TuneRequest`, call `tune`.

    from axon.search.api import TuneRequest, tune
    report = tune(TuneRequest.make("rmsnorm_matmul", preset="small", trials=8))
    print(report.summary())

`tune(request, callbacks)` runs the callbacks (`axon.measure.events.Callback`) after Axon's own on
every trial. The pieces live in their own modules: `tuning` (the run), `report`, `checks`
(numerics), `baselines`, `variants`, `storage`; MLflow artifacts in `axon.track.artifacts`.
"""

from axon.measure.events import Callback, OnTrial, StopTuning, TrialLog
from axon.search.baselines import baseline_latency, expert_latency
from axon.search.checks import AdversarialReport, NumericsCheck, adversarial_check, numerics_check
from axon.search.familyout import load_family
from axon.search.report import TuneReport
from axon.search.request import TuneRequest
from axon.search.storage import journal_storage, load_cost_model
from axon.search.tuning import TuneInterrupted, failure_summary, tune
from axon.search.variants import TUNING_EXCLUDED_MOVES, verified_variants, workload_graph

__all__ = [
    "TUNING_EXCLUDED_MOVES",
    "AdversarialReport",
    "Callback",
    "NumericsCheck",
    "OnTrial",
    "StopTuning",
    "TrialLog",
    "TuneInterrupted",
    "TuneReport",
    "TuneRequest",
    "adversarial_check",
    "baseline_latency",
    "expert_latency",
    "failure_summary",
    "journal_storage",
    "load_family",
    "load_cost_model",
    "numerics_check",
    "tune",
    "verified_variants",
    "workload_graph",
]
