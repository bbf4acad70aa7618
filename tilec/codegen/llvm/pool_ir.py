"""The LLVM IR of the CPU runtime (tilec.codegen.llvm.runtime): its pool, paths and probes.

`build_module(cores)` returns the module's text. Exported functions (all ``void``, arguments ``(ptr fn, ptr ctx,
i64 n, i64 work)`` unless said): ENTRY (`tilec_parallel_for`, one more ``i64 kernel_work``: serial, OpenMP or
pool, decided per call from the work, the kernel's and the thresholds), SERIAL_FOR and POOL_FOR (those two paths
alone, for the calibration), CYCLES (``i64 ()``: the cycle counter), NOOP and MEET (chunks: empty; waiting for
all n chunks to start), CALIBRATE (``(i64 units)``: that much scalar work).
Exported globals (i64, zero until Python sets them): OPENMP_SLOT, OPENMP_THREADS_SLOT, SERIAL_BELOW, OPENMP_ABOVE,
OPENMP_WARM_CYCLES, OPENMP_ENDED (when the last OpenMP region ended), SPIN_CYCLES, WAIT_CYCLES, SPIN_NOW, GENERATION (the pool's job count).

Requires: llvmlite.ir, an x86-64 target (``pause``), pthreads and libc (``usleep``, ``sched_yield``) at link
time. Guarantees: every chunk of a call runs exactly once, on whichever path; claims are generation-tagged.
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilec.codegen.llvm.binding import initialise_llvm

I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
ENTRY = "tilec_parallel_for"
SERIAL_FOR, POOL_FOR = "tilec_serial_for", "tilec_pool_for"  # its two paths besides OpenMP (same arguments)
SPIN_US = 200  # longest a worker spins between jobs (pause + sched_yield) before it sleep-polls
WAIT_SPIN_US = 50  # longest the caller spins on claimed chunks (pause + sched_yield) before it sleep-polls
SLEEP_US = 100  # poll interval of a sleeping thread (a worker's first; the caller's is a quarter)
MAX_SLEEP_US = 400  # a worker's sleeps double up to this: a job started during a nap waits at most this for it
IDLE_POLLS = 10_000  # a worker exits after SLEEP_US * IDLE_POLLS (1 s) asleep
YIELD_EVERY = 16  # a spinning thread calls sched_yield once every this many polls, else pause
CHUNK_FN = ir.FunctionType(ir.VoidType(), [PTR, I64])
OPENMP_SLOT = "tilec_openmp_parallel"  # GOMP_parallel's address once adopted, else 0
OPENMP_THREADS_SLOT = "tilec_openmp_threads"  # omp_get_max_threads' address once adopted, else 0
SERIAL_BELOW = "tilec_serial_below"  # jobs with less estimated work run serially (work units)
OPENMP_ABOVE = "tilec_openmp_above"  # with OpenMP adopted, jobs with this much work (or unknown) run on it
# ... and so does any parallel job this soon (ticks) after the last region there ended (the cycle counter then)
OPENMP_WARM_CYCLES, OPENMP_ENDED = "tilec_openmp_warm_cycles", "tilec_openmp_ended"
SPIN_CYCLES = "tilec_spin_cycles"  # a worker's longest spin, in cycle-counter ticks (SPIN_US)
WAIT_CYCLES = "tilec_wait_cycles"  # the caller's longest spin, in ticks (WAIT_SPIN_US)
SPIN_NOW = "tilec_spin_now"  # the workers' current spin bound: halved after a job they were late for
GENERATION = "tilec_pool_jobs"  # the pool's job counter (each job's generation)
CYCLES, CALIBRATE = "tilec_cycles", "tilec_calibrate"
NOOP, MEET = "tilec_noop_chunk", "tilec_meet_chunk"
CALIBRATION_SLOTS = 64  # doubles the calibration loop updates


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
        self.openmp_threads = _global(m, OPENMP_THREADS_SLOT, I64, True)
        self.openmp_warm, self.openmp_ended = _global(m, OPENMP_WARM_CYCLES, I64, True), _global(m, OPENMP_ENDED, I64, True)
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

    def spin_or_sleep(self, b: ir.IRBuilder, since_slot: ir.Value, polls_slot: ir.Value, bound: ir.GlobalVariable,
                      back: ir.Block, asleep: ir.Block) -> None:
        """End the current block with a wait: while fewer cycle-counter ticks than `bound` have passed
        since `since_slot`, one polite poll (counted in `polls_slot`) and back to `back`; then on to `asleep`."""
        spin = b.function.append_basic_block("spin")
        spun = b.sub(b.call(self.cycles, []), b.load(since_slot, typ=I64))
        b.cbranch(b.icmp_unsigned("<", spun, self.load(b, bound)), spin, asleep)
        b.position_at_end(spin)
        polls = b.add(b.load(polls_slot, typ=I64), ir.Constant(I64, 1))
        b.store(polls, polls_slot)
        self.polite_pause(b, polls)
        b.branch(back)


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
    bound (SPIN_NOW, cycle-counter ticks), then sleep-poll (sleeps doubling from SLEEP_US to
    MAX_SLEEP_US; `sleeps_slot` holds the microseconds slept), and exit after 1 s asleep."""
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
    loop, work, wait, sleep, leave = (worker.append_basic_block(x) for x in ("loop", "work", "wait", "sleep", "leave"))
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
    rt.spin_or_sleep(b, since_slot, polls_slot, rt.spin_now, loop, sleep)
    b.position_at_end(sleep)  # sleeps of SLEEP_US, doubling up to MAX_SLEEP_US: a long-idle worker wakes rarely
    slept = b.load(sleeps_slot, typ=I64)
    nap = b.select(b.icmp_unsigned("<", slept, ir.Constant(I64, SLEEP_US)), ir.Constant(I64, SLEEP_US), slept)
    nap = b.select(b.icmp_unsigned("<", nap, ir.Constant(I64, MAX_SLEEP_US)), nap, ir.Constant(I64, MAX_SLEEP_US))
    b.call(rt.usleep, [b.trunc(nap, I32)])
    slept = b.add(slept, nap)
    b.store(slept, sleeps_slot)
    b.cbranch(b.icmp_unsigned("<", slept, ir.Constant(I64, SLEEP_US * IDLE_POLLS)), loop, leave)
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
    """tilec_parallel_for(fn, ctx, n, work, kernel_work): serially when `work` (estimated units, < 0:
    unknown) is below SERIAL_BELOW, or an adopted OpenMP runtime allows one thread; else on its team
    when `work` or `kernel_work` (the calling kernel's largest parallel loop: a kernel's small loops
    run where its main one does) is unknown or at least OPENMP_ABOVE, or one of these regions ended
    less than OPENMP_WARM_CYCLES ago (its threads still spin); else on this module's pool."""
    entry = ir.Function(rt.m, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64, I64]), ENTRY)
    fn_arg, ctx_arg, n_arg, work_arg, kernel_arg = entry.args  # the serial and pool paths take the first four
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    job = b.alloca(I64, size=4)
    small = b.and_(b.icmp_signed(">=", work_arg, ir.Constant(I64, 0)),
                   b.icmp_signed("<", work_arg, rt.load(b, rt.serial_below)))
    with b.if_then(small):  # parallelism cannot pay
        b.call(serial, entry.args[:4])
        b.ret_void()
    max_threads = rt.load(b, rt.openmp_threads)
    with b.if_then(b.icmp_unsigned("!=", max_threads, ir.Constant(I64, 0))):
        allowed = b.call(b.inttoptr(max_threads, ir.PointerType(ir.FunctionType(I32, []))), [])
        with b.if_then(b.icmp_signed("<=", allowed, ir.Constant(I32, 1))):  # the user asked for one thread
            b.call(serial, entry.args[:4])
            b.ret_void()
    omp = rt.load(b, rt.openmp)
    big = b.or_(*(b.or_(b.icmp_signed("<", w, ir.Constant(I64, 0)), b.icmp_signed(">=", w, rt.load(b, rt.openmp_above)))
                  for w in (work_arg, kernel_arg)))
    warm = b.icmp_unsigned("<", b.sub(b.call(rt.cycles, []), rt.load(b, rt.openmp_ended)), rt.load(b, rt.openmp_warm))
    with b.if_then(b.and_(b.icmp_unsigned("!=", omp, ir.Constant(I64, 0)), b.or_(big, warm))):
        for k, value in enumerate((b.ptrtoint(fn_arg, I64), b.ptrtoint(ctx_arg, I64), n_arg, ir.Constant(I64, 0))):
            b.store(value, _field(b, job, k))
        gomp_parallel = ir.FunctionType(ir.VoidType(), [PTR, PTR, I32, I32])  # GOMP_parallel(fn, data, threads, flags)
        b.call(b.inttoptr(omp, ir.PointerType(gomp_parallel)), [team, job, *[ir.Constant(I32, 0)] * 2])  # 0: the default team
        b.store_atomic(b.call(rt.cycles, []), rt.openmp_ended, "seq_cst", 8)
        b.ret_void()
    b.call(pool, entry.args[:4])
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
    sleep_more = entry.append_basic_block("sleep_more")
    b.branch(wait_all)
    b.position_at_end(wait_all)  # chunks claimed by workers: spin politely, then sleep-poll
    all_done = b.icmp_signed(">=", rt.load(b, rt.done), n_arg)
    waiting = entry.append_basic_block("waiting")
    b.cbranch(all_done, finished, waiting)
    b.position_at_end(waiting)
    rt.spin_or_sleep(b, since_slot, polls_slot, rt.wait_cycles, wait_all, sleep_more)
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


__all__ = ["CALIBRATE", "CYCLES", "ENTRY", "GENERATION", "IDLE_POLLS", "MEET", "NOOP", "OPENMP_ABOVE", "OPENMP_ENDED", "OPENMP_SLOT", "OPENMP_THREADS_SLOT", "OPENMP_WARM_CYCLES",
           "POOL_FOR", "SERIAL_BELOW", "SERIAL_FOR", "SLEEP_US", "SPIN_CYCLES", "SPIN_NOW", "SPIN_US", "WAIT_CYCLES",
           "WAIT_SPIN_US", "build_module"]
