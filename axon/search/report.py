"""`TuneReport`: what a tuning run found, as text (`summary`) and as data (`as_dict`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from axon.search.checks import AdversarialReport, NumericsCheck


@dataclass(frozen=True)
class TuneReport:
    workload: str
    shapes: dict[str, int]
    dtype: str
    hw: str
    backend: str
    sampler: str
    seed: int
    best_latency_ns: float | None
    best_point: dict[str, Any]
    best_description: str
    kernel_path: str
    moves: tuple[str, ...]
    unfused_ns: float | None
    expert_ns: float | None
    roofline_ns: float
    numerics: NumericsCheck | None
    measured: int
    reused: int
    failed: int
    elapsed_s: float
    study: str
    run_id: str = ""
    curve: tuple[float, ...] = field(default_factory=tuple)
    adversarial: AdversarialReport | None = None  # the chosen kernel on the adversarial input classes
    fp_rejected: tuple[str, ...] = ()  # proved variants not offered: floating-point hazard, and why
    variant_id: str = ""  # the chosen variant's hash, as `axon variants` lists it
    turned_down: tuple[str, ...] = ()  # faster measured kernels that failed the checks, fastest first, and why
    resumed: int = 0  # trials an earlier run of the same study had finished (this run went on from them)
    outdated: tuple[int, int] = (0, 0)  # points the study measured before an upgrade; of them measured again

    def summary(self) -> str:
        def us(ns: float | None) -> str:  # under 0.1 us in ns: a tiny problem's roofline printed as 0.0 us
            return "n/a" if ns is None else f"{ns / 1e3:,.1f} us" if ns >= 100 else f"{ns:.3g} ns"

        best = self.best_latency_ns
        lines = [
            f"{self.workload} {self.shapes} {self.dtype} on {self.hw} ({self.backend}): best {us(best)} "
            f"after {self.measured} measured / {self.reused} reused / {self.failed} failed trials "
            f"in {self.elapsed_s:.1f} s"
            + (f" (resumed: {self.resumed} trials done by an earlier run)" if self.resumed else "")
            + (
                f" ({self.outdated[0]} earlier points not counted, measured before an upgrade or an edit of the "
                f"spec, or their records lost; the best {self.outdated[1]} measured again)"
                if self.outdated[0]
                else ""
            ),
            f"  kernel: {self.kernel_path}",
            f"  variant: {' + '.join(self.moves) or 'as written'}; {self.best_description}"
            + (f" [id {self.variant_id[:8]}]" if self.variant_id else ""),
        ]
        for name, ns in (("unfused", self.unfused_ns), ("expert", self.expert_ns)):
            if ns is not None and best:
                lines.append(f"  vs {name:8s} {us(ns):>14}  speedup {ns / best:5.2f}x")
            elif name == "unfused" and best:  # the line was missing without a word (M=1, N=65536: SBUF)
                lines.append(f"  vs {name:8s} {'n/a':>14}  (the op-by-op kernel does not lower at this shape)")
        if best:
            lines.append(
                f"  roofline {us(self.roofline_ns):>14}  achieved {_percent(self.roofline_ns / best)} of the bound"
            )
        if self.numerics is not None:
            lines.append(
                f"  numerics: emulator vs float64 reference at {self.numerics.dims}: max rel err "
                f"{self.numerics.max_rel_err:.2e} {self.numerics.describe()} {self.numerics.verdict()}"
            )
        if self.adversarial is not None:
            lines.append(
                f"  adversarial: emulator in {self.adversarial.dtype} at {self.adversarial.dims}, "
                f"worst rel err per input class: {self.adversarial.summary()} {self.adversarial.verdict()}"
            )
        for text in self.turned_down:
            lines.append(f"  turned down (checks): {text}")
        for text in self.fp_rejected:
            lines.append(f"  not offered (floating point): {text}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["numerics_ok"] = None if self.numerics is None else self.numerics.ok
        return data


def _percent(fraction: float) -> str:
    """`fraction` as a percentage; below 0.1% with two significant digits, never a bare 0.0%."""
    return f"{fraction:6.1%}" if fraction >= 0.001 or fraction == 0 else f"{fraction * 100:.2g}%"
