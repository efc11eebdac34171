"""`simulate(trace, hw) -> Timing`: list scheduling of an NKI trace on one NeuronCore.

The model, and why:
- Each compute engine (Tensor, Vector, Scalar, GpSimd) is an in-order queue: an instruction starts
  when its engine is free, its inputs are ready and its outputs may be overwritten. That is how
  the hardware runs: four instruction streams synchronised by semaphores. The streams are the
  compiler's, though: inside an affine loop of several iterations its scheduler moves a ready
  instruction of a later iteration ahead of one still waiting for its inputs, so there an
  instruction takes the first gap of its engine at or after it is ready (e.g. the next k-step's
  TensorE transpose runs while VectorE copies this step's transpose out of PSUM for its matmul).
- Dependencies come from the memory each instruction reads and writes (RAW, WAR, WAW, by
  partition x byte overlap, see `memory.py`). A result is usable `access_overhead_cycles` after
  the producing instruction ends (the write-back through SBUF/PSUM); a consumer on another engine
  also waits `semaphore_latency_ns`; a consumer right behind its producer on the same engine pays
  `static_overhead_cycles` because nothing hides the pipeline drain - unless both sit in an
  affine loop of several iterations, whose independent work the compiler interleaves to hide
  the drain and write-back (so there the consumer may start when its producer ends).
- Costs are `axon.target.costs` (HARDWARE.md section 3) in the engine's cycles at its clock.
- A DMA transfer is spread over `ceil(partitions / partitions_per_engine)` of the 16 DMA engines
  modelled as one pool: the transfer books engines/16 of the pool's time in the first gap at or
  after it is ready (the engines' many queues let a ready load pass a store still waiting for
  its data, see `dmaqueue.py`) and lasts at least one engine's part; each engine pays
  `chunk_overhead_ns` per
  descriptor (one per partition row) plus bytes at its bandwidth (capped by the core's HBM
  bandwidth shared by all engines). The fixed cost (`fixed_cost_ns`, descriptor setup and the
  completion semaphore) is latency: a transfer completes no sooner than that after issue, but
  the many queues of every engine overlap it with other transfers.
- NC-v2 port conflicts: VectorE and GpSimd instructions that read SBUF exclude each other, as do
  VectorE and ScalarE instructions touching PSUM (`hw.ports`); NC-v3 has neither.
- Loops: iterations of an affine (or unrolled) loop overlap as far as the above allows (the Neuron
  compiler software-pipelines them); a tile allocated in the loop body gets
  `hw.memory.loop_tile_buffers` rotating buffers, so iteration i waits for iteration
  i - buffers to release its buffer (WAR on the shared slot). Iterations of a sequential loop are
  separated by a barrier: nothing of iteration i+1 starts before all of iteration i has ended.
- The compiler's side (`residency.py`): loads of bytes still resident in SBUF are dropped, and the
  spills and reloads of tiles that outgrow SBUF are booked in the DMA pool (a spill when the
  evicting instruction is ready; a reload is prefetched into `loop_tile_buffers` rotating buffers,
  each free once the instruction that read the reload it held before has ended).
  An instruction the kernel left unbound (`AUTO_ENGINE`) runs on VectorE or ScalarE, whichever
  would finish it first.
- A fixed `launch_overhead_ns` is added to the latency (kernel launch and teardown).
It deliberately ignores instruction fetch, SBUF bank conflicts and HBM page effects.
"""

from __future__ import annotations

from axon.errors import BackendError
from axon.sim.dmaqueue import EngineCalendar
from axon.sim.memory import RAW, WAW, MemoryState, buffer_slots
from axon.sim.residency import Residency, replay
from axon.sim.timing import COMPUTE_ENGINES, Timeline, Timing, critical_path
from axon.target import costs as C
from axon.target.hardware import HardwareSpec
from axon.target.isa import ISA, ISA_LIMITS
from axon.target.trace import AUTO_ENGINE, Instr, Trace


def simulate(trace: Trace, hw: HardwareSpec, residency: Residency | None = None) -> Timing:
    """Time `trace` on the NeuronCore `hw` (`residency`: `replay(trace, hw)`, if the caller has it).

    >>> from axon.target.trace import Access, Alloc, Instr, Trace
    >>> from axon.target import load_hw
    >>> t = Alloc(0, "sbuf", "t", (128, 512), "float32", 128, 2048, "k.py:1")
    >>> w = Access(0, "sbuf", 0, 128, 0, 2048, 128 * 2048)
    >>> ins = Instr(0, "memset", "vector", 128, 512, "float32", (), (w,), 1)
    >>> timing = simulate(Trace("k", "k.py", "trn1", (ins,), (t,)), load_hw("trn1"))
    >>> round(timing.busy_ns["vector"], 1)  # 512 cycles at 1.12 GHz
    457.1
    """
    return _schedule(trace, hw, residency if residency is not None else replay(trace, hw), None)[0]


def simulate_with_prefix(trace: Trace, prefix: Trace, hw: HardwareSpec) -> tuple[Timing, Timing]:
    """`(simulate(trace, hw), simulate(prefix, hw))` for a `prefix` whose instructions are the first
    ones of `trace` (and whose allocations and loops are the first ones of its): one pass over
    `trace` that also builds the prefix's timing when the prefix was reached, where that is exact -
    the list scheduler sees only earlier instructions, so the two runs agree up to the prefix's end
    whenever the compiler's residency (which looks ahead) decides the same for the prefix's
    instructions in both; otherwise two passes.
    """
    m = len(prefix.instructions)
    if prefix.instructions != trace.instructions[:m]:
        raise ValueError("simulate_with_prefix: not a prefix of the trace")
    res, res_p = replay(trace, hw), replay(prefix, hw)
    same = (
        {i for i in res.elided if i < m} == res_p.elided
        and {i: v for i, v in res.before.items() if i < m} == res_p.before
        and {i: v for i, v in res.spills.items() if i < m} == res_p.spills
    )
    if not same or m == 0:
        return _schedule(trace, hw, res, None)[0], _schedule(prefix, hw, res_p, None)[0]
    whole, cut = _schedule(trace, hw, res, (prefix, res_p))
    assert cut is not None
    return whole, cut


def _schedule(
    trace: Trace, hw: HardwareSpec, res: Residency, prefix: tuple[Trace, Residency] | None
) -> tuple[Timing, Timing | None]:
    """The list scheduler; with `prefix`, also the timing of that prefix of `trace` (its own residency)."""
    n = len(trace.instructions)
    stop = len(prefix[0].instructions) if prefix is not None else -1
    cut: Timing | None = None
    mem = MemoryState(buffer_slots(trace.allocs, hw.memory.loop_tile_buffers))
    clocks = {e: hw.engines[e].clock_ghz for e in COMPUTE_ENGINES}
    access_ns = {e: hw.memory.access_overhead_cycles / clocks[e] for e in COMPUTE_ENGINES}
    static_ns = {e: hw.costs.static_overhead_cycles / clocks[e] for e in COMPUTE_ENGINES}
    sem_ns = hw.costs.semaphore_latency_ns
    share_sbuf, share_psum = hw.ports.vector_gpsimd_share_sbuf, hw.ports.vector_scalar_share_psum
    port_partner = {"vector": "gpsimd", "gpsimd": "vector"}
    psum_partner = {"vector": "scalar", "scalar": "vector"}

    eng_free = {e: 0.0 for e in COMPUTE_ENGINES}
    eng_last = {e: -1 for e in COMPUTE_ENGINES}
    cal = {e: EngineCalendar() for e in COMPUTE_ENGINES}  # each engine's busy intervals
    sbuf_port = {"vector": (0.0, -1), "gpsimd": (0.0, -1)}
    psum_port = {"vector": (0.0, -1), "scalar": (0.0, -1)}
    n_dma = hw.dma.engines
    dma_pool = EngineCalendar()
    busy = {e: 0.0 for e in (*COMPUTE_ENGINES, "dma")}
    counts = {e: 0 for e in (*COMPUTE_ENGINES, "dma")}
    seq_state: dict[tuple, list] = {}
    loop_keys: dict[tuple, list[tuple[tuple, int]]] = {}

    # affine loops with several iterations: independent work the compiler can interleave
    pipelined = {lp.id for lp in trace.loops if lp.kind == "affine" and lp.trip_count > 1}
    in_pipe: dict[tuple, bool] = {}  # by an instruction's loops
    starts = [0.0] * n
    ends = [0.0] * n
    lanes = [""] * n
    pred = [-1] * n
    dma_bytes = 0
    flops = 0.0
    elided, before, spills = res.elided, res.before, res.spills
    spill_end: dict[int, float] = {}  # unit id -> when its spilled copy is in HBM
    reloaded_by: dict[str, list[int]] = {}  # engine -> the instructions its reloads were for, in order
    n_buf = hw.memory.loop_tile_buffers

    def transfer(ready: float, nbytes: int, parts: int) -> float:
        """Book a compiler-added transfer (spill or reload) in the DMA pool; return its end."""
        cost = C.spill_cost(nbytes, parts, hw)
        share = cost.engine_ns * cost.engines / n_dma
        s = dma_pool.place(ready, share)
        busy["dma"] += cost.engine_ns * cost.engines
        return max(s + share, ready + cost.engine_ns, ready + cost.fixed_ns)

    # One loop over locals on purpose: it runs once per instruction (100k in ~1 s), and CPython is
    # fastest on local variables; each step is commented instead of split into methods.
    for i, ins in enumerate(trace.instructions):
        dma = C.is_dma(ins)
        eng = "dma" if dma else ins.engine
        if AUTO_ENGINE in ins.attrs:  # the compiler's choice: the engine that would finish it first
            ins, eng = _balance(ins, hw, eng_free, clocks)
        if not dma and eng not in eng_free:
            raise BackendError(
                f"trace {trace.kernel}: instruction {i} ({ins.opcode}, line {ins.line}) "
                f"is on unknown engine {ins.engine!r}"
            )
        # In an affine loop of several iterations? (the compiler interleaves their independent work)
        piped = in_pipe.get(ins.loops)
        if piped is None:
            piped = in_pipe[ins.loops] = _in_pipelined_loop(ins.loops, pipelined)
        # Earliest start from dependencies.
        ready, who = 0.0, -1
        last_same = eng_last.get(eng, -2)
        for rec, kind in mem.producers(ins.reads, ins.writes):
            t = rec[4]
            if rec[5] != eng:
                t += sem_ns
            elif eng == "tensor" or kind == WAW:
                # TensorE accumulates into PSUM in issue order, and an in-order engine orders its own
                # writes: neither waits for the write-back.
                t = rec[7]
            elif kind == RAW and not dma:
                if piped:
                    t = rec[7]  # the compiler interleaves another iteration's work behind the drain
                elif rec[6] == last_same:
                    t += static_ns[eng]  # nothing hides the pipeline drain of the instruction just before
            if t > ready:
                ready, who = t, rec[6]
        # Sequential loops: a barrier between iterations.
        seq = _seq_keys(ins, loop_keys) if ins.loops else ()
        for key, it in seq:
            st = seq_state.get(key)
            if st is None:
                st = seq_state[key] = [it, 0.0, 0.0, -1, -1]  # iteration, max end, barrier, who ends last, barrier who
            elif st[0] != it:
                st[0], st[2], st[4] = it, st[1], st[3]
            if st[2] > ready:
                ready, who = st[2], st[4]
        if i in before:  # tiles the compiler evicted: reloaded into rotating buffers, prefetched
            last = eng_last.get(eng, -1)
            early = starts[last] if last >= 0 else 0.0
            used = reloaded_by.setdefault(eng, [])
            for uid, nbytes, parts, _ in before[i]:
                # its buffer is the one of the reload `n_buf` before it on this engine, free once that
                # reload's consumer has ended (this instruction itself: when the engine's last one starts)
                c = used[-n_buf] if len(used) >= n_buf else -1
                slot = 0.0 if c < 0 else (early if c == i else ends[c])
                t = transfer(max(slot, spill_end.get(uid, 0.0)), nbytes, parts)
                used.append(i)
                if t > ready:
                    ready, who = t, i - 1
        if i in spills:  # tiles written to HBM to make room, once this instruction may run
            for uid, nbytes, parts, _ in spills[i]:
                spill_end[uid] = transfer(ready, nbytes, parts)
        if dma and i in elided:  # the bytes are already in SBUF: the compiler issues no load
            start = end = result_ready = ready
            lanes[i] = "dma0"
            dma_bytes += C.dma_cost(ins, hw).nbytes  # the kernel's own DMA bytes (HBM traffic: `res`)
        elif dma:
            cost = C.dma_cost(ins, hw)
            # The 16 engines as one pool: the transfer takes its share (engines/16) of the pool's
            # time in the first gap after it is ready, and lasts at least one engine's part.
            share = cost.engine_ns * cost.engines / n_dma
            s = dma_pool.place(ready, share)
            end = max(s + share, ready + cost.engine_ns, ready + cost.fixed_ns)
            start = ready
            if s > ready and s + share >= end:
                who = dma_pool.last_index
            if s + share >= dma_pool.free_at():
                dma_pool.last_index = i
            lane = counts["dma"] % n_dma  # display lane only
            busy["dma"] += cost.engine_ns * cost.engines
            dma_bytes += cost.nbytes
            lanes[i] = f"dma{lane}"
            result_ready = end
        else:  # a compute engine: after its previous instruction (or in a gap, see below) and any port holder
            dur = C.engine_cycles(ins, hw) / clocks[eng]
            uses_sbuf = share_sbuf and eng in port_partner and any(a.buffer == "sbuf" for a in ins.reads)
            uses_psum = share_psum and eng in psum_partner and any(a.buffer == "psum" for a in ins.reads + ins.writes)
            # In a pipelined affine loop the compiler's scheduler moves a ready instruction of a later
            # iteration ahead of one still waiting for its inputs: it takes the first gap of its engine
            # at or after it is ready. Elsewhere the engine's stream is in order.
            calendar = cal[eng]
            start = ready
            while True:
                if piped:
                    s = calendar.earliest(start, dur)
                else:
                    s = eng_free[eng] if eng_free[eng] > start else start
                if s > start:
                    start, who = s, eng_last[eng]
                if uses_sbuf and sbuf_port[port_partner[eng]][0] > start:
                    start, who = sbuf_port[port_partner[eng]]
                elif uses_psum and psum_port[psum_partner[eng]][0] > start:
                    start, who = psum_port[psum_partner[eng]]
                else:
                    break
            end = start + dur
            calendar.book(start, end)
            if end > eng_free[eng]:
                eng_free[eng], eng_last[eng] = end, i
            if uses_sbuf and end > sbuf_port[eng][0]:
                sbuf_port[eng] = (end, i)
            if uses_psum and end > psum_port[eng][0]:
                psum_port[eng] = (end, i)
            busy[eng] += dur
            lanes[i] = eng
            result_ready = end + access_ns[eng]
            if ins.opcode == "nc_matmul":
                moving, stationary = C.matmul_free_sizes(ins, hw)
                flops += 2.0 * ins.partitions * stationary * moving
        counts[eng] += 1
        starts[i], ends[i], pred[i] = start, end, who
        for key, _ in seq:
            st = seq_state[key]
            if end > st[1]:
                st[1], st[3] = end, i
        mem.record(ins.reads, ins.writes, end, result_ready, eng, i)
        if i + 1 == stop:
            assert prefix is not None
            p, pres = prefix
            cut = Timing.build(
                p,
                hw,
                Timeline.from_lists(p, starts[:stop], ends[:stop], lanes[:stop]),
                dict(busy),
                dict(counts),
                dma_bytes,
                (pres.read_bytes, pres.write_bytes),
                flops,
                critical_path(ends[:stop], pred[:stop]),
            )

    timeline = Timeline.from_lists(trace, starts, ends, lanes)
    timing = Timing.build(
        trace,
        hw,
        timeline,
        busy,
        counts,
        dma_bytes,
        (res.read_bytes, res.write_bytes),
        flops,
        critical_path(ends, pred),
    )
    return timing, cut


# Engines the Neuron compiler balances an unbound instruction over (it leaves GpSimd alone: the
# measured kernels keep it ~1% busy).
_BALANCED = ("vector", "scalar")


def _balance(ins: Instr, hw: HardwareSpec, eng_free: dict[str, float], clocks: dict[str, float]) -> tuple[Instr, str]:
    """The engine that would finish an unbound instruction first: the one the emulator gave it (an
    unbound nc_transpose is TensorE's) or VectorE/ScalarE where the instruction can run there (a
    VectorE transpose only up to 32x32, as the emulator enforces for a bound one)."""
    best, best_end = ins, -1.0
    for e in _BALANCED if ins.engine in _BALANCED else (ins.engine, *_BALANCED):
        if e not in ISA[ins.opcode].engines or not _fits(ins, e):
            continue
        cand = ins if e == ins.engine else _on_engine(ins, e)
        end = eng_free[e] + C.engine_cycles(cand, hw) / clocks[e]
        if best_end < 0 or end < best_end:
            best, best_end = cand, end
    return best, best.engine


def _fits(ins: Instr, engine: str) -> bool:
    """Whether `ins` may move to `engine` within that engine's size limits."""
    if ins.opcode == "nc_transpose" and engine == "vector":
        return max(ins.partitions, ins.free_size) <= ISA_LIMITS["vector_transpose_max"]
    return True


def _on_engine(ins: Instr, engine: str) -> Instr:
    """`dataclasses.replace(ins, engine=engine)`, built directly: it runs for most instructions of
    kernels that leave the engine to the compiler, where `replace` was a few percent of a tune."""
    return Instr(
        ins.index, ins.opcode, engine, ins.partitions, ins.free_size, ins.dtype, ins.reads, ins.writes, ins.line,
        ins.loops, ins.attrs,
    )  # fmt: skip


def _in_pipelined_loop(loops: tuple, pipelined: set[int]) -> bool:
    for lid, _kind, _it in loops:
        if lid in pipelined:
            return True
    return False


def _seq_keys(ins: Instr, cache: dict[tuple, list[tuple[tuple, int]]]) -> list[tuple[tuple, int]]:
    """(barrier key, iteration) for each sequential loop around `ins`; the key names the loop and
    the iterations of the loops outside it, so separate entries of an inner loop do not collide."""
    loops = ins.loops
    hit = cache.get(loops)
    if hit is None:
        hit = []
        for j, (lid, kind, it) in enumerate(loops):
            if kind == "sequential":
                hit.append(((lid, tuple(x[2] for x in loops[:j])), it))
        cache[loops] = hit
    return hit
