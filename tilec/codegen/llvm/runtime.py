"""The CPU runtime kernels link against: a persistent worker pool that shares cores politely.

``void tilec_parallel_for(void (*chunk)(ptr ctx, i64 c), ptr ctx, i64 n, i64 work)`` runs
``chunk(ctx, c)`` for every ``c`` in ``[0, n)`` and returns when all are done. ``work`` is the
loop's estimated work in units (iterations x a per-iteration estimate from the loop body,
tilec.codegen.llvm.work; < 0: unknown). Three paths, decided at every call:

* serially on the calling thread when ``work`` is below the serial threshold: parallelism
  cannot pay for a small job (a 32^3 GEMM, a 16x16 attention);
* on torch's OpenMP team when torch is loaded (`adopt_openmp`) and the work is unknown or at
  least the OpenMP threshold (about OPENMP_ABOVE_US of work): right after a torch op torch's
  workers spin for milliseconds, and on its own team the spinning workers take tilec's chunks
  instead of competing with tilec's threads for the cores;
* else on the own pool: the caller and the pool's workers (one per core beyond the caller,
  created on first use) claim chunks; the caller runs whatever is left unclaimed, so a worker
  the OS has parked costs at most the chunk it holds. Between jobs a worker spins for at most
  SPIN_US (``pause``, with a ``sched_yield`` every YIELD_EVERY polls, so on a busy core others
  run), fewer after jobs it was late for (the bound halves each time the caller ran a whole
  job alone, and doubles back as workers take part), then polls with SLEEP_US sleeps and exits
  after about a second without work. The caller waits for claimed chunks the same way: spins
  politely for at most WAIT_SPIN_US, then sleep-polls, which frees its core for a parked worker.
  One job runs at a time (a mutex); jobs do not nest.

Thresholds come from measurements, once per process (`calibrate`): what a parallel region costs
on the pool when every thread takes part (the cheapest of 60 regions whose chunks wait for each
other; measured again at every kernel load, so a moment's load at start-up does not decide for
the process), and what a work unit costs (a scalar load, multiply-add and store). A job runs in
parallel when its estimated time saved is PAYOFF times a region's cost. `thresholds`,
`runs_in_parallel` and `runs_on_openmp` report the decision; `set_thresholds` overrides it.

Claiming is generation-tagged: the job counter holds ``generation << 32 | next chunk`` and
is advanced by compare-and-swap only while it belongs to the claimer's job, so a worker that
saw an old job can neither run a chunk of a new one with stale arguments nor use up one of
its chunk numbers.
The module is compiled once per process from LLVM IR and its entry point registered with
the JIT's symbol resolver, so kernels loaded from the disk cache link to it by name.
``TILEC_OWN_THREADS=1`` keeps every parallel job off torch's OpenMP team.

Requires: llvmlite, an x86-64 host (``pause``, the cycle counter), pthreads. Guarantees: every
chunk runs exactly once per call, on whichever path; `ensure_runtime` returns the calibrated
engine for a core count.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir

from tilec.codegen.llvm.binding import LOCK, initialise_llvm, target_machine

ENTRY = "tilec_parallel_for"
SERIAL_FOR, POOL_FOR = "tilec_serial_for", "tilec_pool_for"  # its two paths besides OpenMP (same arguments)
I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
SPIN_US = 200  # longest a worker spins between jobs (pause + sched_yield) before it sleep-polls
WAIT_SPIN_US = 50  # longest the caller spins on claimed chunks (pause + sched_yield) before it sleep-polls
SLEEP_US = 100  # poll interval of a sleeping thread
IDLE_POLLS = 10_000  # sleeping polls (~1 s) before a worker exits
YIELD_EVERY = 16  # a spinning thread calls sched_yield once every this many polls, else pause
CHUNK_FN = ir.FunctionType(ir.VoidType(), [PTR, I64])
OPENMP_SLOT = "tilec_openmp_parallel"  # GOMP_parallel's address once adopted, else 0
SERIAL_BELOW = "tilec_serial_below"  # jobs with less estimated work run serially (work units)
OPENMP_ABOVE = "tilec_openmp_above"  # with OpenMP adopted, jobs with this much work (or unknown) run on it
SPIN_CYCLES = "tilec_spin_cycles"  # a worker's longest spin, in cycle-counter ticks (SPIN_US)
WAIT_CYCLES = "tilec_wait_cycles"  # the caller's longest spin, in ticks (WAIT_SPIN_US)
SPIN_NOW = "tilec_spin_now"  # the workers' current spin bound: halved after a job they were late for
GENERATION = "tilec_pool_jobs"  # the pool's job counter (each job's generation)
CYCLES, CALIBRATE = "tilec_cycles", "tilec_calibrate"
NOOP, MEET = "tilec_noop_chunk", "tilec_meet_chunk"
CALIBRATION_SLOTS = 64  # doubles the calibration loop updates
MEET_LIMIT_US = 200  # longest a calibration chunk waits for the others
REMEASURE_CALLS = 10  # regions measured again at each kernel load


class _Runtime:
    """The declarations and globals the runtime's functions share."""

    def __init__(self, m: ir.Module) -> None:
        self.m = m
        # pointers are kept as i64: llvmlite cannot type an atomic access to a pointer-typed global
        self.job_fn, self.job_ctx, self.job_n = (_global(m, x, I64) for x in ("job_fn", "job_ctx", "job_n"))
        self.ticket, self.done = _global(m, "job_ticket", I64), _global(m, "job_done", I64)
        self.generation, self.workers = _global(m, GENERATION, I64, True), _global(m, "workers", I64)
        self.mutex = _global(m, "job_mutex", ir.ArrayType(ir.IntType(8), 64))  # zeroed == PTHREAD_MUTEX_INITIALIZER
        self.openmp, self.serial_below = _global(m, OPENMP_SLOT, I64, True), _global(m, SERIAL_BELOW, I64, True)
        self.spin_cycles, self.wait_cycles = _global(m, SPIN_CYCLES, I64, True), _global(m, WAIT_CYCLES, I64, True)
        self.spin_now, self.openmp_above = _global(m, SPIN_NOW, I64, True), _global(m, OPENMP_ABOVE, I64, True)
        void = ir.FunctionType(ir.VoidType(), [])
        self.pause = ir.Function(m, void, "llvm.x86.sse2.pause")
        self.cycles = ir.Function(m, ir.FunctionType(I64, []), "llvm.readcyclecounter")
        self.sched_yield = ir.Function(m, ir.FunctionType(I32, []), "sched_yield")
        self.usleep = ir.Function(m, ir.FunctionType(I32, [I32]), "usleep")
        self.create = ir.Function(m, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]), "pthread_create")
        self.detach = ir.Function(m, ir.FunctionType(I32, [I64]), "pthread_detach")
        self.lock = ir.Function(m, ir.FunctionType(I32, [PTR]), "pthread_mutex_lock")
        self.unlock = ir.Function(m, ir.FunctionType(I32, [PTR]), "pthread_mutex_unlock")

    def load(self, b: ir.IRBuilder, g: ir.GlobalVariable) -> ir.Value:
        return b.load_atomic(g, "seq_cst", 8, typ=I64)

    def polite_pause(self, b: ir.IRBuilder, polls: ir.Value) -> None:
        """One poll of a spinning thread: `pause`, or every YIELD_EVERY polls `sched_yield`, so a
        thread that shares its core with others lets them run instead of burning its slice."""
        do_yield = b.icmp_unsigned("==", b.urem(polls, ir.Constant(I64, YIELD_EVERY)), ir.Constant(I64, 0))
        with b.if_else(do_yield) as (then, otherwise):
            with then:
                b.call(self.sched_yield, [])
            with otherwise:
                b.call(self.pause, [])


def _global(module: ir.Module, name: str, t: ir.Type, visible: bool = False) -> ir.GlobalVariable:
    """A zero-initialised global; `visible` ones are set from Python (get_global_value_address)."""
    g = ir.GlobalVariable(module, t, name)
    g.initializer = ir.Constant(t, None)
    if not visible:
        g.linkage = "internal"
    return g


def build_module(cores: int) -> str:
    m = ir.Module(name="tilec_runtime")
    m.triple = initialise_llvm().get_process_triple()
    rt = _Runtime(m)
    run = _run_chunks(rt)
    _entry(rt, _serial_for(m), _pool_for(rt, run, _worker(rt, run), cores), _team(m))
    _calibration_functions(m)
    return str(m)


def _run_chunks(rt: _Runtime) -> ir.Function:
    """run_chunks(gen) -> chunks run: claim and run chunks of job `gen` until none is left. A claim
    is a compare-and-swap of the ticket, taken only while the ticket still belongs to `gen`: a
    worker that is late for a finished job must not use up a chunk number of the next one."""
    run = ir.Function(rt.m, ir.FunctionType(I64, [I64]), "run_chunks")
    run.linkage = "internal"
    b = ir.IRBuilder(run.append_basic_block("entry"))
    count = b.alloca(I64)
    b.store(ir.Constant(I64, 0), count)
    head, claim, body, out = (run.append_basic_block(n) for n in ("look", "claim", "run", "out"))
    b.branch(head)
    b.position_at_end(head)
    t = rt.load(b, rt.ticket)
    same_job = b.icmp_unsigned("==", b.lshr(t, ir.Constant(I64, 32)), run.args[0])
    c = b.and_(t, ir.Constant(I64, 0xFFFFFFFF))
    n = rt.load(b, rt.job_n)
    b.cbranch(b.and_(same_job, b.icmp_signed("<", c, n)), claim, out)
    b.position_at_end(claim)
    swapped = b.cmpxchg(rt.ticket, t, b.add(t, ir.Constant(I64, 1)), "seq_cst", "seq_cst")
    b.cbranch(b.extract_value(swapped, 1), body, head)
    b.position_at_end(body)
    fn = rt.load(b, rt.job_fn)
    ctx = b.inttoptr(rt.load(b, rt.job_ctx), PTR)
    b.call(b.inttoptr(fn, ir.PointerType(CHUNK_FN)), [ctx, c])
    b.atomic_rmw("add", rt.done, ir.Constant(I64, 1), "seq_cst")
    b.store(b.add(b.load(count, typ=I64), ir.Constant(I64, 1)), count)
    b.branch(head)
    b.position_at_end(out)
    b.ret(b.load(count, typ=I64))
    return run


def _worker(rt: _Runtime, run: ir.Function) -> ir.Function:
    """worker(arg): run every new job; between jobs spin politely for at most the current spin
    bound (SPIN_NOW, cycle-counter ticks), then sleep-poll, and exit after IDLE_POLLS sleeps."""
    worker = ir.Function(rt.m, ir.FunctionType(PTR, [PTR]), "worker")
    worker.linkage = "internal"
    b = ir.IRBuilder(worker.append_basic_block("entry"))
    seen_slot, since_slot, polls_slot, sleeps_slot = (b.alloca(I64) for _ in range(4))
    b.store(rt.load(b, rt.generation), seen_slot)

    def idle_from_now(builder: ir.IRBuilder) -> None:
        builder.store(builder.call(rt.cycles, []), since_slot)
        builder.store(ir.Constant(I64, 0), polls_slot)
        builder.store(ir.Constant(I64, 0), sleeps_slot)

    idle_from_now(b)
    loop, work, wait, spin, sleep, leave = (worker.append_basic_block(x) for x in
                                            ("loop", "work", "wait", "spin", "sleep", "leave"))
    b.branch(loop)
    b.position_at_end(loop)
    g = rt.load(b, rt.generation)
    b.cbranch(b.icmp_unsigned("!=", g, b.load(seen_slot, typ=I64)), work, wait)
    b.position_at_end(work)
    b.store(g, seen_slot)
    b.call(run, [g])
    idle_from_now(b)
    b.branch(loop)
    b.position_at_end(wait)
    spun = b.sub(b.call(rt.cycles, []), b.load(since_slot, typ=I64))
    b.cbranch(b.icmp_unsigned("<", spun, rt.load(b, rt.spin_now)), spin, sleep)
    b.position_at_end(spin)
    polls = b.add(b.load(polls_slot, typ=I64), ir.Constant(I64, 1))
    b.store(polls, polls_slot)
    rt.polite_pause(b, polls)
    b.branch(loop)
    b.position_at_end(sleep)
    b.call(rt.usleep, [ir.Constant(I32, SLEEP_US)])
    sleeps = b.add(b.load(sleeps_slot, typ=I64), ir.Constant(I64, 1))
    b.store(sleeps, sleeps_slot)
    b.cbranch(b.icmp_unsigned("<", sleeps, ir.Constant(I64, IDLE_POLLS)), loop, leave)
    b.position_at_end(leave)
    # Leave only if no job started meanwhile; the caller recounts workers under the mutex.
    b.atomic_rmw("sub", rt.workers, ir.Constant(I64, 1), "seq_cst")
    b.ret(ir.Constant(PTR, None))
    return worker


def _field(builder: ir.IRBuilder, job: ir.Value, k: int) -> ir.Value:
    return builder.gep(job, [ir.Constant(I64, k)], source_etype=I64)


def _team(m: ir.Module) -> ir.Function:
    """team(job): a member of an OpenMP team claims chunks of `job` = [fn, ctx, n, next] (i64s)."""
    team = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR]), "team")
    team.linkage = "internal"
    b = ir.IRBuilder(team.append_basic_block("entry"))
    look, run_one, leave_team = (team.append_basic_block(x) for x in ("look", "run", "leave"))
    b.branch(look)
    b.position_at_end(look)
    job = team.args[0]
    c = b.atomic_rmw("add", _field(b, job, 3), ir.Constant(I64, 1), "seq_cst")
    b.cbranch(b.icmp_signed("<", c, b.load(_field(b, job, 2), typ=I64)), run_one, leave_team)
    b.position_at_end(run_one)
    chunk_fn = b.inttoptr(b.load(_field(b, job, 0), typ=I64), ir.PointerType(CHUNK_FN))
    b.call(chunk_fn, [b.inttoptr(b.load(_field(b, job, 1), typ=I64), PTR), c])
    b.branch(look)
    b.position_at_end(leave_team)
    b.ret_void()
    return team


def _serial_for(m: ir.Module) -> ir.Function:
    """tilec_serial_for(fn, ctx, n, work): every chunk on the calling thread, in order."""
    serial = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64]), SERIAL_FOR)
    fn_arg, ctx_arg, n_arg, _ = serial.args
    b = ir.IRBuilder(serial.append_basic_block("entry"))
    with _counted_loop(b, n_arg) as c:
        b.call(b.inttoptr(b.ptrtoint(fn_arg, I64), ir.PointerType(CHUNK_FN)), [ctx_arg, c])
    b.ret_void()
    return serial


def _entry(rt: _Runtime, serial: ir.Function, pool: ir.Function, team: ir.Function) -> None:
    """tilec_parallel_for(fn, ctx, n, work): serially when `work` (estimated work units, < 0:
    unknown) is below SERIAL_BELOW; else on the OpenMP runtime's team when one is adopted (see
    `adopt_openmp`) and the work is unknown or at least OPENMP_ABOVE; else on this module's pool."""
    entry = ir.Function(rt.m, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64]), ENTRY)
    fn_arg, ctx_arg, n_arg, work_arg = entry.args
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    job = b.alloca(I64, size=4)
    small = b.and_(b.icmp_signed(">=", work_arg, ir.Constant(I64, 0)),
                   b.icmp_signed("<", work_arg, rt.load(b, rt.serial_below)))
    with b.if_then(small):  # parallelism cannot pay
        b.call(serial, entry.args)
        b.ret_void()
    omp = rt.load(b, rt.openmp)
    big = b.or_(b.icmp_signed("<", work_arg, ir.Constant(I64, 0)),
                b.icmp_signed(">=", work_arg, rt.load(b, rt.openmp_above)))
    with b.if_then(b.and_(b.icmp_unsigned("!=", omp, ir.Constant(I64, 0)), big)):
        for k, value in enumerate((b.ptrtoint(fn_arg, I64), b.ptrtoint(ctx_arg, I64), n_arg, ir.Constant(I64, 0))):
            b.store(value, _field(b, job, k))
        gomp_parallel = ir.FunctionType(ir.VoidType(), [PTR, PTR, I32, I32])  # GOMP_parallel(fn, data, threads, flags)
        zero32 = ir.Constant(I32, 0)
        b.call(b.inttoptr(omp, ir.PointerType(gomp_parallel)), [team, job, zero32, zero32])  # 0: the default team
        b.ret_void()
    b.call(pool, entry.args)
    b.ret_void()


def _pool_for(rt: _Runtime, run: ir.Function, worker: ir.Function, cores: int) -> ir.Function:
    """tilec_pool_for(fn, ctx, n, work): the chunks on this module's pool (the caller claims
    chunks too; it then waits for those workers claimed, spinning politely, then sleep-polling)."""
    entry = ir.Function(rt.m, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64]), POOL_FOR)
    fn_arg, ctx_arg, n_arg, _ = entry.args
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    handle, polls_slot, since_slot = b.alloca(I64), b.alloca(I64), b.alloca(I64)
    b.call(rt.lock, [rt.mutex])
    # start missing workers (they exit after a long idle time; restart them here)
    check, start, publish = (entry.append_basic_block(x) for x in ("check", "start", "publish"))
    b.branch(check)
    b.position_at_end(check)
    live = rt.load(b, rt.workers)
    b.cbranch(b.icmp_signed("<", live, ir.Constant(I64, cores - 1)), start, publish)
    b.position_at_end(start)
    b.atomic_rmw("add", rt.workers, ir.Constant(I64, 1), "seq_cst")
    rc = b.call(rt.create, [handle, ir.Constant(PTR, None), worker, ir.Constant(PTR, None)])
    ok, failed = entry.append_basic_block("created"), entry.append_basic_block("not_created")
    b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), ok, failed)
    b.position_at_end(ok)
    b.call(rt.detach, [b.load(handle, typ=I64)])
    b.branch(check)
    b.position_at_end(failed)  # no thread to be had: the caller runs every chunk itself
    b.atomic_rmw("sub", rt.workers, ir.Constant(I64, 1), "seq_cst")
    b.branch(publish)
    b.position_at_end(publish)
    new_gen = b.add(rt.load(b, rt.generation), ir.Constant(I64, 1))
    b.store_atomic(b.ptrtoint(fn_arg, I64), rt.job_fn, "seq_cst", 8)
    b.store_atomic(b.ptrtoint(ctx_arg, I64), rt.job_ctx, "seq_cst", 8)
    b.store_atomic(n_arg, rt.job_n, "seq_cst", 8)
    b.store_atomic(ir.Constant(I64, 0), rt.done, "seq_cst", 8)
    b.store_atomic(b.shl(new_gen, ir.Constant(I64, 32)), rt.ticket, "seq_cst", 8)
    b.store_atomic(new_gen, rt.generation, "seq_cst", 8)
    mine = b.call(run, [new_gen])  # the caller claims chunks too: a late worker costs only what it claimed
    _adapt_spin(rt, b, mine, n_arg)
    b.store(ir.Constant(I64, 0), polls_slot)
    b.store(b.call(rt.cycles, []), since_slot)
    wait_all, finished = entry.append_basic_block("wait_all"), entry.append_basic_block("finished")
    spin_more, sleep_more = entry.append_basic_block("spin_more"), entry.append_basic_block("sleep_more")
    b.branch(wait_all)
    b.position_at_end(wait_all)  # chunks claimed by workers: spin politely, then sleep-poll
    all_done = b.icmp_signed(">=", rt.load(b, rt.done), n_arg)
    waiting = entry.append_basic_block("waiting")
    b.cbranch(all_done, finished, waiting)
    b.position_at_end(waiting)
    spun = b.sub(b.call(rt.cycles, []), b.load(since_slot, typ=I64))
    b.cbranch(b.icmp_unsigned("<", spun, rt.load(b, rt.wait_cycles)), spin_more, sleep_more)
    b.position_at_end(spin_more)
    polls = b.add(b.load(polls_slot, typ=I64), ir.Constant(I64, 1))
    b.store(polls, polls_slot)
    rt.polite_pause(b, polls)
    b.branch(wait_all)
    b.position_at_end(sleep_more)  # the worker holding a chunk is descheduled: free this core for it
    b.call(rt.usleep, [ir.Constant(I32, SLEEP_US // 4)])
    b.branch(wait_all)
    b.position_at_end(finished)
    b.call(rt.unlock, [rt.mutex])
    b.ret_void()
    return entry


def _adapt_spin(rt: _Runtime, b: ir.IRBuilder, mine: ir.Value, n: ir.Value) -> None:
    """The workers' spin bound: halved when the caller ran every chunk of a job with several (the
    workers were late: descheduled or asleep, so spinning buys nothing on this machine now),
    doubled (up to SPIN_CYCLES) when a worker took a chunk."""
    now = rt.load(b, rt.spin_now)
    late = b.and_(b.icmp_signed(">=", mine, n), b.icmp_signed(">", n, ir.Constant(I64, 1)))
    grown = b.add(b.mul(now, ir.Constant(I64, 2)), ir.Constant(I64, 1))
    top = rt.load(b, rt.spin_cycles)
    grown = b.select(b.icmp_unsigned("<", grown, top), grown, top)
    b.store_atomic(b.select(late, b.lshr(now, ir.Constant(I64, 1)), grown), rt.spin_now, "seq_cst", 8)


class _counted_loop:
    """``with _counted_loop(b, n) as i:`` emits the body once per i in [0, n) at b's position."""

    def __init__(self, b: ir.IRBuilder, n: ir.Value) -> None:
        self.b, self.n = b, n

    def __enter__(self) -> ir.Value:
        b, fn = self.b, self.b.function
        self.pre = b.block
        self.head, self.body, self.out = (fn.append_basic_block(x) for x in ("count", "count_body", "count_end"))
        b.branch(self.head)
        b.position_at_end(self.head)
        self.i = b.phi(I64)
        self.i.add_incoming(ir.Constant(I64, 0), self.pre)
        b.cbranch(b.icmp_signed("<", self.i, self.n), self.body, self.out)
        b.position_at_end(self.body)
        return self.i

    def __exit__(self, *exc: object) -> None:
        b = self.b
        self.i.add_incoming(b.add(self.i, ir.Constant(I64, 1)), b.block)
        b.branch(self.head)
        b.position_at_end(self.out)


def _calibration_functions(m: ir.Module) -> None:
    """tilec_cycles() -> the cycle counter; tilec_noop_chunk(ctx, c): an empty chunk;
    tilec_meet_chunk(ctx, c), ctx = [arrived, n, limit]: counts itself in and waits (at most
    `limit` cycle-counter ticks) until all n chunks have started, so a parallel region of them
    costs what it takes every thread to join and leave; tilec_calibrate(n): n units of scalar work
    (a load, a multiply-add and a store each), to convert work units to time."""
    cycles = ir.Function(m, ir.FunctionType(I64, []), CYCLES)
    b = ir.IRBuilder(cycles.append_basic_block("entry"))
    b.ret(b.call(m.get_global("llvm.readcyclecounter"), []))
    noop = ir.Function(m, CHUNK_FN, NOOP)
    ir.IRBuilder(noop.append_basic_block("entry")).ret_void()
    _meet_chunk(m, cycles)
    slots = _global(m, "calibration_slots", ir.ArrayType(ir.DoubleType(), CALIBRATION_SLOTS))
    calibrate = ir.Function(m, ir.FunctionType(ir.VoidType(), [I64]), CALIBRATE)
    b = ir.IRBuilder(calibrate.append_basic_block("entry"))
    with _counted_loop(b, calibrate.args[0]) as i:
        slot = b.gep(slots, [ir.Constant(I64, 0), b.and_(i, ir.Constant(I64, CALIBRATION_SLOTS - 1))])
        double = ir.DoubleType()
        value = b.fadd(b.fmul(b.load_atomic(slot, "monotonic", 8, typ=double), ir.Constant(double, 0.5)),
                       ir.Constant(double, 1.0))
        b.store_atomic(value, slot, "monotonic", 8)
    b.ret_void()


def _meet_chunk(m: ir.Module, cycles: ir.Function) -> None:
    meet = ir.Function(m, CHUNK_FN, MEET)
    ctx = meet.args[0]
    b = ir.IRBuilder(meet.append_basic_block("entry"))
    b.atomic_rmw("add", _field(b, ctx, 0), ir.Constant(I64, 1), "seq_cst")
    start = b.call(cycles, [])
    look, more, out = (meet.append_basic_block(x) for x in ("look", "more", "out"))
    b.branch(look)
    b.position_at_end(look)
    everyone = b.icmp_signed(">=", b.load_atomic(_field(b, ctx, 0), "seq_cst", 8, typ=I64), b.load(_field(b, ctx, 1), typ=I64))
    b.cbranch(everyone, out, more)
    b.position_at_end(more)
    waited = b.sub(b.call(cycles, []), start)
    b.call(m.get_global("llvm.x86.sse2.pause"), [])
    b.cbranch(b.icmp_unsigned("<", waited, b.load(_field(b, ctx, 2), typ=I64)), look, out)
    b.position_at_end(out)
    b.ret_void()


_ENGINES: dict[int, Any] = {}  # cores -> the runtime's engine, alive for the whole process
PAYOFF = 2.0  # run in parallel only where the time saved is this many times a region's measured cost
# With torch's OpenMP team adopted, jobs estimated to take at least this long run on it, smaller ones
# on the own pool: an OpenMP region waits for every team thread, and a thread the OS has parked
# (another process busy) costs a scheduler time slice, milliseconds, which only a long job can
# absorb; the own pool's caller claims what late threads have not, and so never waits for them.
OPENMP_ABOVE_US = 1000


@dataclass(frozen=True)
class Calibration:
    """What this process measured of its runtime (`calibrate`): an empty parallel region's cost
    beyond a serial call, one work unit's time, the cycle counter's rate, and so the threshold."""

    region_ns: float
    unit_ns: float
    ticks_per_us: float
    serial_below: int  # work units
    openmp_above: int  # work units


_CALIBRATIONS: dict[int, Calibration] = {}  # engine id -> its calibration
_PINNED: set[int] = set()  # engines whose thresholds were set by hand (set_thresholds)


def ensure_runtime(cores: int) -> Any:
    """Compile the runtime once per process and register `tilec_parallel_for` for kernels to link;
    calibrate it, and measure its parallel regions again at each later call (each kernel load), so
    the threshold follows the cheapest region seen, not a moment's load at start-up; adopt torch's
    OpenMP team once torch is loaded."""
    from tilec.target import host_cpu

    with LOCK:  # one runtime, even when two threads compile their first kernels at once
        engine = _ENGINES.get(cores)
        if engine is None:
            llvm = initialise_llvm()
            module = llvm.parse_assembly(build_module(cores))
            module.verify()
            engine = llvm.create_mcjit_compiler(module, target_machine(host_cpu()))
            engine.finalize_object()
            _CALIBRATIONS[id(engine)] = calibrate(engine, cores)
            llvm.add_symbol(ENTRY, engine.get_function_address(ENTRY))
            _ENGINES[cores] = engine
        else:
            _remeasure(engine, cores)
        adopt_openmp(engine)
        return engine


def calibrate(engine: Any, cores: int) -> Calibration:
    """Measure the runtime on this machine, now, and set its spin bounds and thresholds: a job runs
    in parallel only where `cores` threads would save PAYOFF times what a parallel region costs,
    i.e. its work exceeds PAYOFF * region * cores / (cores - 1) in time (`_thresholds`)."""
    ticks = _ticks_per_us(engine)
    _slot(engine, SPIN_CYCLES).value = _slot(engine, SPIN_NOW).value = int(SPIN_US * ticks)
    _slot(engine, WAIT_CYCLES).value = int(WAIT_SPIN_US * ticks)
    region, unit = _region_ns(engine, cores, ticks), _unit_ns(engine)
    return _thresholds(engine, cores, region, unit, ticks)


def _remeasure(engine: Any, cores: int) -> None:
    """A few more regions; the thresholds follow when one was cheaper than any before."""
    old = _CALIBRATIONS[id(engine)]
    region = _region_ns(engine, cores, old.ticks_per_us, calls=REMEASURE_CALLS)
    if region < old.region_ns and id(engine) not in _PINNED:
        _CALIBRATIONS[id(engine)] = _thresholds(engine, cores, region, old.unit_ns, old.ticks_per_us)


def _thresholds(engine: Any, cores: int, region: float, unit: float, ticks: float) -> Calibration:
    below = int(PAYOFF * region * cores / max(1, cores - 1) / unit) if cores > 1 else 0
    above = max(below, int(OPENMP_ABOVE_US * 1e3 / unit))
    _slot(engine, SERIAL_BELOW).value, _slot(engine, OPENMP_ABOVE).value = below, above
    return Calibration(region, unit, ticks, below, above)


def _slot(engine: Any, name: str) -> ctypes.c_int64:
    return ctypes.c_int64.from_address(engine.get_global_value_address(name))


def _ticks_per_us(engine: Any) -> float:
    """The cycle counter's ticks per microsecond (0 where the target has no counter: spinning
    threads then sleep-poll at once)."""
    cycles = ctypes.CFUNCTYPE(ctypes.c_int64)(engine.get_function_address(CYCLES))
    c0, t0 = cycles(), time.perf_counter_ns()
    time.sleep(0.002)
    c1, t1 = cycles(), time.perf_counter_ns()
    return max(0.0, (c1 - c0) * 1e3 / max(1, t1 - t0))


def _region_ns(engine: Any, cores: int, ticks_per_us: float, calls: int = 60) -> float:
    """What a parallel region on the pool costs when every thread takes part: its `cores` chunks
    wait for each other (at most MEET_LIMIT_US), less the same chunks, empty, run serially (both
    called from Python, whose call overhead cancels). The cheapest of `calls` regions: the cost
    when the threads are on their cores; a moment's load (the machine may be shared) should not
    decide for the whole process, and the pool copes with late threads as they come (the caller
    claims the chunks they have not, so a late thread costs at most the chunk it holds)."""
    signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    pool, serial = (signature(engine.get_function_address(name)) for name in (POOL_FOR, SERIAL_FOR))
    noop, meet = engine.get_function_address(NOOP), engine.get_function_address(MEET)
    ctx = (ctypes.c_int64 * 3)(0, cores, int(MEET_LIMIT_US * ticks_per_us))

    def timed(run: Any, chunk: int) -> int:
        ctx[0] = 0
        t0 = time.perf_counter_ns()
        run(chunk, ctx, cores, 0)
        return time.perf_counter_ns() - t0

    timed(pool, meet)  # start the workers
    region = min(timed(pool, meet) for _ in range(calls))
    return max(1.0, region - min(timed(serial, noop) for _ in range(calls)))


def _unit_ns(engine: Any, units: int = 100_000, rounds: int = 5) -> float:
    """The time of one work unit (tilec.codegen.llvm.work): the fastest of `rounds` runs of the
    calibration loop."""
    work = ctypes.CFUNCTYPE(None, ctypes.c_int64)(engine.get_function_address(CALIBRATE))
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        work(units)
        best = min(best, time.perf_counter_ns() - t0)
    return max(1e-3, best / units)


def _engine(cores: int | None) -> Any:
    """The runtime for `cores` (default: the host's), built if need be (not measured again)."""
    from tilec.target import host_cpu

    cores = cores or host_cpu().cores
    return _ENGINES.get(cores) or ensure_runtime(cores)


def thresholds(cores: int | None = None) -> tuple[int, int]:
    """(serial below, OpenMP from) in work units (tilec.codegen.llvm.work), in the runtime for
    `cores` (default: the host's): a parallel loop with less estimated work than the first runs
    on the calling thread; with torch's OpenMP team adopted, one with at least the second (or
    unknown work) runs on that team, the others on the own pool."""
    engine = _engine(cores)
    return int(_slot(engine, SERIAL_BELOW).value), int(_slot(engine, OPENMP_ABOVE).value)


def set_thresholds(serial_below: int | None = None, openmp_above: int | None = None,
                   cores: int | None = None) -> tuple[int, int]:
    """Set either threshold (None: keep it; serial_below 0: every parallel loop runs in parallel),
    for the rest of the process; returns the previous pair."""
    engine = _engine(cores)
    previous = thresholds(cores)
    _PINNED.add(id(engine))  # measurements no longer move them
    for name, value in ((SERIAL_BELOW, serial_below), (OPENMP_ABOVE, openmp_above)):
        if value is not None:
            _slot(engine, name).value = int(value)
    return previous


def runs_in_parallel(work: int, cores: int | None = None) -> bool:
    """Whether a parallel loop of estimated `work` units (< 0: unknown) runs in parallel: the
    runtime's own decision, made again at every call."""
    return work < 0 or work >= thresholds(cores)[0]


def runs_on_openmp(work: int, cores: int | None = None) -> bool:
    """Whether a parallel loop of estimated `work` units runs on torch's OpenMP team (adopted, and
    the work unknown or at least the OpenMP threshold) rather than serially or on the own pool."""
    big = work < 0 or work >= thresholds(cores)[1]
    return id(_engine(cores)) in _ADOPTED and big and runs_in_parallel(work, cores)


def pool_jobs(cores: int | None = None) -> int:
    """How many jobs the own pool has run in this process (jobs run serially or on OpenMP are not counted)."""
    return int(_slot(_engine(cores), GENERATION).value)


def calibration(cores: int | None = None) -> Calibration:
    """The runtime's current calibration (see `calibrate`)."""
    return _CALIBRATIONS[id(_engine(cores))]


_ADOPTED: set[int] = set()  # engines running their parallel loops on torch's OpenMP team


def adopt_openmp(engine: Any) -> bool:
    """Run long parallel loops on torch's OpenMP threads when torch is loaded in this process.

    torch's OpenMP workers spin for milliseconds after every torch op; a tilec kernel that runs its
    own threads meanwhile shares the cores with them (measured: a 3x3 conv gradient at 14^2 right
    after a torch op took 16-18 ms instead of 8.6; on torch's team the spinning workers take
    tilec's chunks). But an OpenMP region waits for every thread of the team, and a sleeping team
    thread that must wait for a core (another process busy) cost a tiny attention call 8 ms
    instead of 0.01: so only jobs with at least OPENMP_ABOVE_US of estimated work (or unknown
    work) run there; smaller ones on the own pool or serially (`tilec_parallel_for`). The team size
    is torch's (torch.set_num_threads). Returns whether the runtime uses OpenMP; checked again at
    each kernel load until torch shows up."""
    if id(engine) in _ADOPTED:
        return True
    address = _torch_gomp_parallel()
    if address is None:
        return False
    ctypes.c_int64.from_address(engine.get_global_value_address(OPENMP_SLOT)).value = address
    _ADOPTED.add(id(engine))
    return True


def _torch_gomp_parallel() -> int | None:
    """The address of GOMP_parallel in the OpenMP runtime torch loaded, or None."""
    from tilec.config import options

    if "torch" not in sys.modules or options.own_threads:
        return None
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/torch/lib/lib" in line and "omp" in line}
    except OSError:
        return None
    for path in sorted(paths):
        if not os.path.basename(path).startswith(("libgomp", "libiomp5")):
            continue
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
            return ctypes.cast(lib.GOMP_parallel, ctypes.c_void_p).value
        except (OSError, AttributeError):
            continue
    return None
