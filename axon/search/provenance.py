"""What a kernel file `axon tune` writes says about itself, and `axon verify FILE`, which checks it
again from that alone.

The file is the kernel that was measured and checked, with its shape assertion
(`axon.lower.emit.with_shape_guard`), then a comment block: the spec (a built-in name or the spec
file's absolute path), shape, dtype, hardware file (name, path, hash), discovery depth, the point,
the chosen variant's id and moves, and each move's proof certificate. `verify` traces the spec
again, discovers and proves its variants again (each move with Z3, as tune does), finds the variant
by id, lowers the point again and compares the code with the file's, byte for byte, then runs the
numerics and adversarial checks in the emulator. The block is written with the file, not part of
the kernel measured: the kernel's hash (records, the results table) is that of the code alone.
A family's kernel files carry it too, with the shape its variants were found at (`variants_shape`).
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from axon.errors import AxonError, SpecError
from axon.lower.emit import with_shape_guard
from axon.search.checks import adversarial_check, numerics_check
from axon.search.problem import LoweredProblem
from axon.search.variants import verified_variants, workload_graph
from axon.target import load_hw
from axon.workloads import get

MARKER = "# --- written by axon tune: how this kernel was made (`axon verify FILE` checks it again) ---"


def spec_ref(workload: str) -> str:
    """A built-in name as is; a spec file `path.py:function` with the file's absolute path."""
    path, colon, function = workload.rpartition(":")
    if colon and Path(path).expanduser().is_file():
        return f"{Path(path).expanduser().resolve()}:{function}"
    return workload


def delivered(
    cand: Any, problem: LoweredProblem, point: dict[str, Any], request: Any, variants_shape: dict | None = None
) -> str:
    """The kernel file's text: the kernel with its shape assertion, then the block `verify` reads.
    `variants_shape`: the shape the variants were discovered at when not the kernel's (a family's
    kernels are its variants, found once at the range's largest shape, bound to each served shape)."""
    variant = problem.variants[int(point.get("variant", 0))]
    info = {
        "workload": spec_ref(request.workload),
        "preset": request.preset,
        "shape": dict(problem.shapes),
        "dtype": problem.dtype,
        "hw": problem.hw.name,
        # absolute, as the spec's: `--hw myhw.yaml` was written as given, so verify from another
        # directory said the file was "gone or has changed since"
        "hw_file": str(Path(problem.hw.source).resolve()),
        "hw_hash": problem.hw.file_hash,
        "depth": request.depth,
        "point": dict(point),
        "variant": variant.hash,
        "moves": [m.name for m in variant.moves],
    }
    if variants_shape is not None and dict(variants_shape) != info["shape"]:
        info["variants_shape"] = dict(variants_shape)
    lines = [MARKER, "# " + json.dumps(info, sort_keys=True)]
    for move, proof in zip(variant.moves, variant.proofs):
        cert = " ".join(str(proof.certificate).split())[:400]
        lines.append(f"# proved {move.name} ({proof.method}, {proof.time_s * 1e3:.1f} ms): {cert}")
    return with_shape_guard(cand.source, cand.kernel, cand.inputs).rstrip("\n") + "\n\n\n" + "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Verdict:
    lines: tuple[str, ...]  # what was checked, one line each
    failures: tuple[str, ...]  # what did not hold (empty: the kernel verifies)

    @property
    def ok(self) -> bool:
        return not self.failures


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot be read: {exc}") from None
    code, sep, block = text.partition("\n\n\n" + MARKER + "\n")
    if not sep:
        raise SpecError(
            f"{path}: not a kernel file axon tune wrote (no '{MARKER[2:40]}...' block): "
            "only those say how they were made (a family's are its kernels/*.py files)"
        )
    try:
        info = json.loads(block.splitlines()[0][2:])
        info["point"], info["shape"], info["workload"] = dict(info["point"]), dict(info["shape"]), str(info["workload"])
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise SpecError(f"{path}: its axon block is damaged ({exc}): the kernel cannot be checked again") from None
    # counts verify reads with int(): a hand-edited "x" was a ValueError traceback, -1 indexed from the end
    for field, value in (("depth", info.get("depth")), ("point.variant", info["point"].get("variant", 0))):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(
                f"{path}: its axon block is damaged (field {field} must be a non-negative integer, got {value!r}): "
                "the kernel cannot be checked again"
            )
    return code, info


def _hardware(info: dict[str, Any], path: Path) -> Any:
    for ref in (info.get("hw"), info.get("hw_file")):
        try:
            hw = load_hw(str(ref))
        except AxonError:
            continue
        if hw.file_hash == info.get("hw_hash"):
            return hw
    raise SpecError(
        f"{path}: was tuned on hardware file {info.get('hw_file')} (hash {info.get('hw_hash')}), which is "
        "gone or has changed since: its kernel cannot be checked against it"
    )


def verify(path: str | Path) -> Verdict:
    """Check a kernel file `axon tune` wrote again from what it says about itself (see the module).
    A refusal while checking (a spec gone, a point that no longer lowers) names the kernel file: the
    spec, shape and point it names come from the file's block, not from the command line."""
    path = Path(path).expanduser()
    try:
        return _verify(path)
    except AxonError as exc:
        if not str(exc).startswith(str(path)):
            exc.args = (f"{path}: {exc}", *exc.args[1:])
        raise


def _verify(path: Path) -> Verdict:
    code, info = _read(path)
    hw = _hardware(info, path)
    w = get(info["workload"])
    found_at = info.get("variants_shape") or info["shape"]
    graph = workload_graph(w, info["preset"], info["dtype"], found_at)
    # no time budget (a tune's discovery cut at its 50 s on a busy machine would make a kernel found late
    # "not found again" on a slower one): the search stops at the variant, which it reaches in the order
    # the tune did
    variants = verified_variants(graph, int(info["depth"]), budget_s=math.inf, until=str(info["variant"]))
    lines, failures = [f"spec {info['workload']} at {info['shape']} {info['dtype']} on {hw.name}"], []
    point = info["point"]
    index = int(point.get("variant", 0))
    if index >= len(variants) or variants[index].hash != info["variant"]:
        failures.append(_not_found(info, [v.hash for v in variants], index))
        return Verdict(tuple(lines), tuple(failures))
    if found_at != info["shape"]:  # a family's kernel: the variants bound to its shape, as the family does
        graph = graph.bind(**info["shape"])
        variants = [replace(v, graph=v.graph.bind(**info["shape"])) for v in variants]
    variant = variants[index]
    for move, proof in zip(variant.moves, variant.proofs):
        lines.append(f"proved again: {move.name} ({proof.method}, {proof.time_s * 1e3:.1f} ms)")
    if not variant.moves:
        lines.append("variant: the spec as written (no move to prove)")
    problem = LoweredProblem(w.name, graph, hw, variants, info["dtype"])
    cand = problem.build(point)
    if with_shape_guard(cand.source, cand.kernel, cand.inputs).rstrip("\n") != code.rstrip("\n"):
        failures.append("the kernel's code is not what Axon emits for this variant at this point (edited?)")
        return Verdict(tuple(lines), tuple(failures))
    lines.append(f"code: what Axon emits for this variant at this point (kernel {cand.kernel_hash[:8]})")
    with tempfile.TemporaryDirectory(prefix="axon-verify-") as kernels:
        numerics = numerics_check(problem, point, seed=0, directory=kernels)
        adversarial = adversarial_check(problem, point, kernels, seed=0)
    lines.append(f"numerics: max rel err {numerics.max_rel_err:.2e} {numerics.describe()} {numerics.verdict()}")
    if not numerics.ok:
        failures.append(f"numerics: max rel err {numerics.max_rel_err:.2e} over {numerics.tolerance:.0e}")
    lines.append(f"adversarial: {adversarial.verdict() if adversarial.ok else adversarial.failure()}")
    if not adversarial.ok:
        failures.append(f"adversarial: {adversarial.failure()}")
    return Verdict(tuple(lines), tuple(failures))


def _not_found(info: dict[str, Any], hashes: list[str], index: int) -> str:
    """Why the block's variant is not the point's: found at another index (the point was edited: it
    said "the spec traces to another graph" naming the block's own variant), or not found at all."""
    named = f"variant {info['variant'][:8]} ({' + '.join(info['moves']) or 'as written'})"
    if info["variant"] in hashes:
        return f"{named} is variant {hashes.index(info['variant'])} here, the point says variant {index} (edited?)"
    # the spec as written is variant 0 whatever the search finds: another hash is another spec
    edited = "" if info["moves"] else f": the spec traces to another graph ({hashes[0][:8]}), edited since?"
    return f"{named} is not found again{edited}"
