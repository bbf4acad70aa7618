"""The CPU runtime kernels link against: a persistent, spinning worker pool.

``void tilec_parallel_for(void (*chunk)(ptr ctx, i64 c), ptr ctx, i64 n)`` runs
``chunk(ctx, c)`` for every ``c`` in ``[0, n)`` on the calling thread and the pool's
workers, and returns when all are done. Workers are created on first use (one per core
beyond the caller), spin (with ``pause``) between jobs so back-to-back parallel regions
start in microseconds on warm cores, then poll with short sleeps, and exit after about a
second without work. One job runs at a time (a mutex); jobs do not nest.

Claiming is generation-tagged: the job counter holds ``generation << 32 | next chunk`` and
is advanced by compare-and-swap only while it belongs to the claimer's job, so a worker that
saw an old job can neither run a chunk of a new one with stale arguments nor use up one of
its chunk numbers.
The module is compiled once per process from LLVM IR and its entry point registered with
the JIT's symbol resolver, so kernels loaded from the disk cache link to it by name.

When torch is loaded in the process, ``tilec_parallel_for`` runs its chunks on torch's OpenMP
team instead (``GOMP_parallel``, found in the library torch loaded; `adopt_openmp`): torch's
workers spin for milliseconds after each torch op, and two pools spinning on the same cores
made each side wait for the other. ``TILEC_OWN_THREADS=1`` keeps the own pool.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

import llvmlite.ir as ir

from tilec.codegen.llvm.binding import LOCK, initialise_llvm, target_machine

ENTRY = "tilec_parallel_for"
I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
SPIN_ROUNDS = 20_000  # pause-loops (~0.5 ms) before a worker starts sleeping between polls
SLEEP_US = 100  # poll interval of a sleeping worker
IDLE_POLLS = 10_000  # sleeping polls (~1 s) before a worker exits
CHUNK_FN = ir.FunctionType(ir.VoidType(), [PTR, I64])
OPENMP_SLOT = "tilec_openmp_parallel"  # GOMP_parallel's address once adopted, else 0


def _global(module: ir.Module, name: str, t: ir.Type) -> ir.GlobalVariable:
    g = ir.GlobalVariable(module, t, name)
    g.initializer = ir.Constant(t, None)
    g.linkage = "internal"
    return g


def build_module(cores: int) -> str:
    m = ir.Module(name="tilec_runtime")
    m.triple = initialise_llvm().get_process_triple()
    # pointers are kept as i64: llvmlite cannot type an atomic access to a pointer-typed global
    job_fn, job_ctx, job_n = _global(m, "job_fn", I64), _global(m, "job_ctx", I64), _global(m, "job_n", I64)
    ticket, done = _global(m, "job_ticket", I64), _global(m, "job_done", I64)
    generation, workers = _global(m, "job_generation", I64), _global(m, "workers", I64)
    mutex = _global(m, "job_mutex", ir.ArrayType(ir.IntType(8), 64))  # zeroed == PTHREAD_MUTEX_INITIALIZER
    pause = ir.Function(m, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
    usleep = ir.Function(m, ir.FunctionType(I32, [I32]), "usleep")
    create = ir.Function(m, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]), "pthread_create")
    detach = ir.Function(m, ir.FunctionType(I32, [I64]), "pthread_detach")
    lock = ir.Function(m, ir.FunctionType(I32, [PTR]), "pthread_mutex_lock")
    unlock = ir.Function(m, ir.FunctionType(I32, [PTR]), "pthread_mutex_unlock")

    # -- run_chunks(gen): claim and run chunks of job `gen` until none is left. A claim is a
    # compare-and-swap of the ticket, taken only while the ticket still belongs to `gen`: a
    # worker that is late for a finished job must not use up a chunk number of the next one.
    run = ir.Function(m, ir.FunctionType(ir.VoidType(), [I64]), "run_chunks")
    run.linkage = "internal"
    b = ir.IRBuilder(run.append_basic_block("entry"))
    head, claim, body, out = (run.append_basic_block(n) for n in ("look", "claim", "run", "out"))
    b.branch(head)
    b.position_at_end(head)
    t = b.load_atomic(ticket, "seq_cst", 8, typ=I64)
    same_job = b.icmp_unsigned("==", b.lshr(t, ir.Constant(I64, 32)), run.args[0])
    c = b.and_(t, ir.Constant(I64, 0xFFFFFFFF))
    n = b.load_atomic(job_n, "seq_cst", 8, typ=I64)
    b.cbranch(b.and_(same_job, b.icmp_signed("<", c, n)), claim, out)
    b.position_at_end(claim)
    swapped = b.cmpxchg(ticket, t, b.add(t, ir.Constant(I64, 1)), "seq_cst", "seq_cst")
    b.cbranch(b.extract_value(swapped, 1), body, head)
    b.position_at_end(body)
    fn = b.load_atomic(job_fn, "seq_cst", 8, typ=I64)
    ctx = b.inttoptr(b.load_atomic(job_ctx, "seq_cst", 8, typ=I64), PTR)
    b.call(b.inttoptr(fn, ir.PointerType(CHUNK_FN)), [ctx, c])
    b.atomic_rmw("add", done, ir.Constant(I64, 1), "seq_cst")
    b.branch(head)
    b.position_at_end(out)
    b.ret_void()

    # -- worker(arg): run every new job; spin, then sleep-poll, then exit when idle for long
    worker = ir.Function(m, ir.FunctionType(PTR, [PTR]), "worker")
    worker.linkage = "internal"
    b = ir.IRBuilder(worker.append_basic_block("entry"))
    seen_slot, idle_slot = b.alloca(I64), b.alloca(I64)
    b.store(b.load_atomic(generation, "seq_cst", 8, typ=I64), seen_slot)
    b.store(ir.Constant(I64, 0), idle_slot)
    loop, work, wait, spin, sleep, leave = (worker.append_basic_block(x) for x in
                                            ("loop", "work", "wait", "spin", "sleep", "leave"))
    b.branch(loop)
    b.position_at_end(loop)
    g = b.load_atomic(generation, "seq_cst", 8, typ=I64)
    b.cbranch(b.icmp_unsigned("!=", g, b.load(seen_slot, typ=I64)), work, wait)
    b.position_at_end(work)
    b.store(g, seen_slot)
    b.store(ir.Constant(I64, 0), idle_slot)
    b.call(run, [g])
    b.branch(loop)
    b.position_at_end(wait)
    idle = b.add(b.load(idle_slot, typ=I64), ir.Constant(I64, 1))
    b.store(idle, idle_slot)
    b.cbranch(b.icmp_unsigned("<", idle, ir.Constant(I64, SPIN_ROUNDS)), spin, sleep)
    b.position_at_end(spin)
    b.call(pause, [])
    b.branch(loop)
    b.position_at_end(sleep)
    b.call(usleep, [ir.Constant(I32, SLEEP_US)])
    b.cbranch(b.icmp_unsigned("<", idle, ir.Constant(I64, SPIN_ROUNDS + IDLE_POLLS)), loop, leave)
    b.position_at_end(leave)
    # Leave only if no job started meanwhile; the caller recounts workers under the mutex.
    b.atomic_rmw("sub", workers, ir.Constant(I64, 1), "seq_cst")
    b.ret(ir.Constant(PTR, None))

    # -- team(job): a member of an OpenMP team claims chunks of `job` = [fn, ctx, n, next] (i64s)
    team = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR]), "team")
    team.linkage = "internal"
    b = ir.IRBuilder(team.append_basic_block("entry"))
    look, run_one, leave_team = (team.append_basic_block(x) for x in ("look", "run", "leave"))
    zero32 = ir.Constant(I32, 0)

    def field(builder: ir.IRBuilder, job: ir.Value, k: int) -> ir.Value:
        return builder.gep(job, [ir.Constant(I64, k)], source_etype=I64)

    b.branch(look)
    b.position_at_end(look)
    job = team.args[0]
    c = b.atomic_rmw("add", field(b, job, 3), ir.Constant(I64, 1), "seq_cst")
    b.cbranch(b.icmp_signed("<", c, b.load(field(b, job, 2), typ=I64)), run_one, leave_team)
    b.position_at_end(run_one)
    chunk_fn = b.inttoptr(b.load(field(b, job, 0), typ=I64), ir.PointerType(CHUNK_FN))
    b.call(chunk_fn, [b.inttoptr(b.load(field(b, job, 1), typ=I64), PTR), c])
    b.branch(look)
    b.position_at_end(leave_team)
    b.ret_void()

    # -- tilec_parallel_for(fn, ctx, n): on the OpenMP runtime's team when one is adopted (see
    # `adopt_openmp`), else on this module's pool
    openmp = ir.GlobalVariable(m, I64, OPENMP_SLOT)
    openmp.initializer = ir.Constant(I64, 0)
    entry = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64]), ENTRY)
    fn_arg, ctx_arg, n_arg = entry.args
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    handle = b.alloca(I64)
    job = b.alloca(I64, size=4)
    omp = b.load_atomic(openmp, "seq_cst", 8, typ=I64)
    use_omp, own_pool = entry.append_basic_block("openmp"), entry.append_basic_block("pool")
    b.cbranch(b.icmp_unsigned("!=", omp, ir.Constant(I64, 0)), use_omp, own_pool)
    b.position_at_end(use_omp)
    for k, value in enumerate((b.ptrtoint(fn_arg, I64), b.ptrtoint(ctx_arg, I64), n_arg, ir.Constant(I64, 0))):
        b.store(value, field(b, job, k))
    gomp_parallel = ir.FunctionType(ir.VoidType(), [PTR, PTR, I32, I32])  # GOMP_parallel(fn, data, threads, flags)
    b.call(b.inttoptr(omp, ir.PointerType(gomp_parallel)), [team, job, zero32, zero32])  # 0: the default team
    b.ret_void()
    b.position_at_end(own_pool)
    b.call(lock, [mutex])
    # start missing workers (they exit after a long idle time; restart them here)
    check, start, publish = (entry.append_basic_block(x) for x in ("check", "start", "publish"))
    b.branch(check)
    b.position_at_end(check)
    live = b.load_atomic(workers, "seq_cst", 8, typ=I64)
    b.cbranch(b.icmp_signed("<", live, ir.Constant(I64, cores - 1)), start, publish)
    b.position_at_end(start)
    b.atomic_rmw("add", workers, ir.Constant(I64, 1), "seq_cst")
    rc = b.call(create, [handle, ir.Constant(PTR, None), worker, ir.Constant(PTR, None)])
    ok, failed = entry.append_basic_block("created"), entry.append_basic_block("not_created")
    b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), ok, failed)
    b.position_at_end(ok)
    b.call(detach, [b.load(handle, typ=I64)])
    b.branch(check)
    b.position_at_end(failed)  # no thread to be had: the caller runs every chunk itself
    b.atomic_rmw("sub", workers, ir.Constant(I64, 1), "seq_cst")
    b.branch(publish)
    b.position_at_end(publish)
    new_gen = b.add(b.load_atomic(generation, "seq_cst", 8, typ=I64), ir.Constant(I64, 1))
    b.store_atomic(b.ptrtoint(fn_arg, I64), job_fn, "seq_cst", 8)
    b.store_atomic(b.ptrtoint(ctx_arg, I64), job_ctx, "seq_cst", 8)
    b.store_atomic(n_arg, job_n, "seq_cst", 8)
    b.store_atomic(ir.Constant(I64, 0), done, "seq_cst", 8)
    b.store_atomic(b.shl(new_gen, ir.Constant(I64, 32)), ticket, "seq_cst", 8)
    b.store_atomic(new_gen, generation, "seq_cst", 8)
    b.call(run, [new_gen])
    wait_all, finished = entry.append_basic_block("wait_all"), entry.append_basic_block("finished")
    b.branch(wait_all)
    b.position_at_end(wait_all)
    all_done = b.icmp_signed(">=", b.load_atomic(done, "seq_cst", 8, typ=I64), n_arg)
    spin_more = entry.append_basic_block("spin_more")
    b.cbranch(all_done, finished, spin_more)
    b.position_at_end(spin_more)
    b.call(pause, [])
    b.branch(wait_all)
    b.position_at_end(finished)
    b.call(unlock, [mutex])
    b.ret_void()
    return str(m)


_ENGINES: dict[int, Any] = {}  # cores -> the runtime's engine, alive for the whole process


def ensure_runtime(cores: int) -> Any:
    """Compile the runtime once per process and register `tilec_parallel_for` for kernels to link."""
    from tilec.target import host_cpu

    with LOCK:  # one runtime, even when two threads compile their first kernels at once
        engine = _ENGINES.get(cores)
        if engine is None:
            llvm = initialise_llvm()
            module = llvm.parse_assembly(build_module(cores))
            module.verify()
            engine = llvm.create_mcjit_compiler(module, target_machine(host_cpu()))
            engine.finalize_object()
            llvm.add_symbol(ENTRY, engine.get_function_address(ENTRY))
            _ENGINES[cores] = engine
        adopt_openmp(engine)
        return engine


_ADOPTED: set[int] = set()  # engines running their parallel loops on torch's OpenMP team


def adopt_openmp(engine: Any) -> bool:
    """Run parallel loops on torch's OpenMP threads when torch is loaded in this process.

    torch's OpenMP workers spin for milliseconds after every torch op; a tilec kernel that starts
    its own threads meanwhile shares the cores with them, and its parallel regions wait on
    whichever thread the OS parks (measured: a 3x3 conv gradient at 14^2 right after a torch op
    took 16-18 ms instead of 8.6). On torch's own team there is no contention: the spinning
    workers take tilec's chunks. The team size is torch's (torch.set_num_threads). Returns whether
    the runtime uses OpenMP; checked again at each kernel build until torch shows up."""
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
