"""numba intrinsics for the hot path: atomics with explicit ordering, pause, clock, calls.

A plain load in a spin loop may be hoisted out of the loop by LLVM and hang forever,
and plain stores may be reordered by the compiler. These emit LLVM atomic loads and
stores (acquire/release/monotonic) and fences, which compile to plain movs on x86
but pin the compiler's ordering.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I64 = ir.IntType(64)


def _elem_ptr(context, builder, arrty, arr, idx):
    ary = context.make_array(arrty)(context, builder, arr)
    return cgutils.get_item_pointer(context, builder, arrty, ary, [idx], wraparound=False)


def _elem_value(context, builder, sig, args, k=2):
    """The pointer to arr[idx] (args 0 and 1) and args[k] cast to the array's type."""
    ptr = _elem_ptr(context, builder, sig.args[0], args[0], args[1])
    return ptr, context.cast(builder, args[k], sig.args[k], sig.args[0].dtype)


def _check_int64_array(arr):
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype in (types.int64, types.uint64)):
        raise TypeError("atomics need a 1-d int64/uint64 array")


def _make_load(ordering):
    @intrinsic
    def _load(typingctx, arr, idx):
        _check_int64_array(arr)

        def codegen(context, builder, sig, args):
            ptr = _elem_ptr(context, builder, sig.args[0], args[0], args[1])
            return builder.load_atomic(ptr, ordering, 8)
        return arr.dtype(arr, idx), codegen
    return _load


def _make_store(ordering):
    @intrinsic
    def _store(typingctx, arr, idx, val):
        _check_int64_array(arr)

        def codegen(context, builder, sig, args):
            ptr, v = _elem_value(context, builder, sig, args)
            builder.store_atomic(v, ptr, ordering, 8)
            return context.get_dummy_value()
        return types.void(arr, idx, val), codegen
    return _store


load_acquire = _make_load("acquire")
load_relaxed = _make_load("monotonic")
store_release = _make_store("release")
store_relaxed = _make_store("monotonic")


@intrinsic
def fetch_add(typingctx, arr, idx, val):
    """Atomic add (seq_cst), returns the old value. Not for the per-tick path."""
    _check_int64_array(arr)

    def codegen(context, builder, sig, args):
        ptr, v = _elem_value(context, builder, sig, args)
        return builder.atomic_rmw("add", ptr, v, "seq_cst")
    return arr.dtype(arr, idx, val), codegen


@intrinsic
def compare_exchange(typingctx, arr, idx, expected, new):
    """Atomic CAS (seq_cst); returns True when it swapped."""
    _check_int64_array(arr)

    def codegen(context, builder, sig, args):
        ptr, e = _elem_value(context, builder, sig, args)
        n = context.cast(builder, args[3], sig.args[3], sig.args[0].dtype)
        res = builder.cmpxchg(ptr, e, n, "seq_cst", "seq_cst")
        return builder.extract_value(res, 1)
    return types.boolean(arr, idx, expected, new), codegen


def _make_fence(ordering):
    @intrinsic
    def _fence(typingctx):
        def codegen(context, builder, sig, args):
            builder.fence(ordering)
            return context.get_dummy_value()
        return types.void(), codegen
    return _fence


# On x86 acquire/release fences cost nothing at run time; they stop the compiler
# from moving loads/stores across them (the seqlock needs exactly that).
fence_acquire = _make_fence("acquire")
fence_release = _make_fence("release")


@intrinsic
def cpu_pause(typingctx):
    """x86 PAUSE in a spin loop (saves power, frees the SMT sibling); no-op elsewhere."""
    def codegen(context, builder, sig, args):
        import platform
        if platform.machine() in ("x86_64", "AMD64", "i686"):
            # the LLVM intrinsic, not inline asm: numba's JIT has no asm parser
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause"), [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()
    return types.void(), codegen


CLOCK_REALTIME, CLOCK_MONOTONIC = 0, 1


def _clock_ns(clock_id):
    def codegen(context, builder, sig, args):
        ts_t = ir.LiteralStructType([_I64, _I64])
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ts_t.as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "clock_gettime")
        ts = cgutils.alloca_once(builder, ts_t)
        builder.call(fn, [ir.Constant(ir.IntType(32), clock_id), ts])
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(sec, ir.Constant(_I64, 1_000_000_000)), nsec)
    return codegen


@intrinsic
def monotonic_ns(typingctx):
    """clock_gettime(CLOCK_MONOTONIC) in ns through the vDSO (about 20-30 ns, no syscall).

    CLOCK_MONOTONIC is what Python's time.monotonic_ns() reads, so timestamps taken
    here, in another process's numba code and in Python all compare directly.
    """
    return types.int64(), _clock_ns(CLOCK_MONOTONIC)


@intrinsic
def realtime_ns(typingctx):
    """clock_gettime(CLOCK_REALTIME) in ns (wall clock, as time.time_ns()), through the vDSO."""
    return types.int64(), _clock_ns(CLOCK_REALTIME)


@intrinsic
def sched_yield(typingctx):
    """sched_yield(2): give the core to another runnable thread of our priority, if any."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, "sched_yield"), [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def sleep_ns(typingctx, ns):
    """clock_nanosleep(CLOCK_MONOTONIC, relative): park the calling thread for about `ns` (plus the
    thread's timer slack, which the strategy thread sets to 1 us)."""
    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.int64)
        ts_t = ir.LiteralStructType([_I64, _I64])
        ts = cgutils.alloca_once(builder, ts_t)
        billion = ir.Constant(_I64, 1_000_000_000)
        builder.store(builder.sdiv(v, billion), cgutils.gep_inbounds(builder, ts, 0, 0))
        builder.store(builder.srem(v, billion), cgutils.gep_inbounds(builder, ts, 0, 1))
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(32), ts_t.as_pointer(), ts_t.as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "clock_nanosleep")
        null = ir.Constant(ts_t.as_pointer(), None)
        builder.call(fn, [ir.Constant(ir.IntType(32), CLOCK_MONOTONIC), ir.Constant(ir.IntType(32), 0), ts, null])
        return context.get_dummy_value()
    return types.void(ns), codegen


@intrinsic
def call_predict(typingctx, addr, row, out):
    """Call `void predict(const float* row, float* out)` at a run-time address.

    The address is data, not a compile-time constant, so swapping the model never
    recompiles the loop.
    """
    if not (isinstance(row, types.Array) and row.dtype == types.float32 and
            isinstance(out, types.Array) and out.dtype == types.float32):
        raise TypeError("call_predict(addr, float32[:], float32[:])")

    def codegen(context, builder, sig, args):
        fptr_t = ir.PointerType(ir.FloatType())
        fnty = ir.FunctionType(ir.VoidType(), [fptr_t, fptr_t])
        a = context.cast(builder, args[0], sig.args[0], types.int64)
        fn = builder.inttoptr(a, fnty.as_pointer())
        r = context.make_array(sig.args[1])(context, builder, args[1]).data
        o = context.make_array(sig.args[2])(context, builder, args[2]).data
        builder.call(fn, [builder.bitcast(r, fptr_t), builder.bitcast(o, fptr_t)])
        return context.get_dummy_value()
    return types.void(addr, row, out), codegen


@intrinsic
def call_predict_rows(typingctx, addr, rows, n, out):
    """Call `void predict_rows(const float* rows, int64_t n, float* out)` (models/templates/flat.c.tpl
    engine_predict_rows: n rows of a C-contiguous float32 [n, features] array scored in one call)
    at a run-time address."""
    if not (isinstance(rows, types.Array) and rows.dtype == types.float32 and rows.layout == "C" and
            isinstance(out, types.Array) and out.dtype == types.float32):
        raise TypeError("call_predict_rows(addr, float32[:, ::1], n, float32[:])")

    def codegen(context, builder, sig, args):
        fptr_t = ir.PointerType(ir.FloatType())
        fnty = ir.FunctionType(ir.VoidType(), [fptr_t, _I64, fptr_t])
        a = context.cast(builder, args[0], sig.args[0], types.int64)
        fn = builder.inttoptr(a, fnty.as_pointer())
        r = context.make_array(sig.args[1])(context, builder, args[1]).data
        k = context.cast(builder, args[2], sig.args[2], types.int64)
        o = context.make_array(sig.args[3])(context, builder, args[3]).data
        builder.call(fn, [builder.bitcast(r, fptr_t), k, builder.bitcast(o, fptr_t)])
        return context.get_dummy_value()
    return types.void(addr, rows, n, out), codegen


@intrinsic
def clz64(typingctx, v):
    """Count leading zeros of a 64-bit integer (lzcnt/bsr)."""
    def codegen(context, builder, sig, args):
        val = context.cast(builder, args[0], sig.args[0], types.int64)
        return builder.ctlz(val, ir.Constant(ir.IntType(1), 0))
    return types.int64(v), codegen


@intrinsic
def f32_bits(typingctx, x):
    """The IEEE-754 bits of a float32 as int64 (zero-extended), for packing records."""
    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.float32)
        bits = builder.bitcast(v, ir.IntType(32))
        return builder.zext(bits, _I64)
    return types.int64(x), codegen


# --- arrays without a reference count ---------------------------------------------------------
# numba counts references to every array it hands on: each time a function (or an inlined one)
# receives an array, or takes one out of a tuple, it increments the array's count with an atomic
# instruction and decrements it later. `borrow(a)` is `a` with no count (a null meminfo, as for an
# array numba builds over a raw pointer): incref/decref of it do nothing. Only for arrays the
# caller keeps alive for the whole call and that never escape it (not returned, not stored).
# Users: the feed parsers (feeds/core/borrow.py), the host loops (engine/host_template.py: the book, and
# every argument group at the top of a loop).


def borrowed_array(context, builder, a, value):
    """The array `value` (numba type `a`) as a struct with no meminfo nor parent."""
    src = context.make_array(a)(context, builder, value=value)
    dst = context.make_array(a)(context, builder)
    dst.meminfo = cgutils.get_null_value(dst.meminfo.type)
    dst.parent = cgutils.get_null_value(dst.parent.type)
    dst.nitems = src.nitems
    dst.itemsize = src.itemsize
    dst.data = src.data
    dst.shape = src.shape
    dst.strides = src.strides
    return dst._getvalue()


@intrinsic
def borrow(typingctx, a):
    if not isinstance(a, types.Array):
        return None

    def codegen(context, builder, sig, args):
        return borrowed_array(context, builder, a, args[0])  # no incref: the result owns nothing

    return a(a), codegen


@intrinsic
def borrow_ro(typingctx, a):
    """borrow(a) typed read-only: what the loops give on_tick of their tick (engine/host_template.py
    host_step). A backtest's tick comes read-only from the mapped file, the live loops' from a
    writable buffer: so the strategy's functions see one type and are compiled once, not once per
    loop kind, and a write to the tick fails to compile in every loop alike. No code, no count."""
    if not isinstance(a, types.Array):
        return None
    ro = a.copy(readonly=True)

    def codegen(context, builder, sig, args):
        return borrowed_array(context, builder, a, args[0])  # (the same struct: readonly is a typing flag)

    return ro(a), codegen


def _borrowed(context, builder, t, value):
    """`value` (numba type t) with every array in it borrowed: an array, or a tuple (plain, named,
    nested) of them and of other values (kept as they are)."""
    if isinstance(t, types.Array):
        return borrowed_array(context, builder, t, value)
    if isinstance(t, types.BaseTuple):
        vals = [_borrowed(context, builder, x, builder.extract_value(value, i)) for i, x in enumerate(t)]
        return context.make_tuple(builder, t, vals)
    return value


@intrinsic
def borrow_all(typingctx, t):
    """borrow() of every array in a tuple (named or nested; its other values as they are). At the
    top of a function that is called (not inlined) with such tuples: its arrays then have no count
    to keep, where otherwise every inlined helper taking one costs two calls into the runtime (half
    of a handler's time, perf)."""
    if not isinstance(t, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        return _borrowed(context, builder, t, args[0])

    return t(t), codegen
