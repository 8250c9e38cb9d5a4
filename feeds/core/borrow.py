"""Arrays without a reference count, for a parser's inner loop.

numba counts references to every array it hands on: each time a function (or an inlined one)
receives an array, or takes one out of a tuple, it increments the array's count with an atomic
instruction and decrements it later. In the ITCH parser these atomics were two thirds of the
time (perf: NRT_incref/NRT_decref). `borrow(a)` is `a` with no count (a null meminfo, as for an
array numba builds over a raw pointer): incref/decref of it do nothing (engine/intrinsics.py
defines it, as the host loop borrows its book too; the parser-only intrinsics are here).

Only for arrays the caller keeps alive for the whole call (a function's own arguments) and that
never escape it (not returned, not stored).

Under NUMBA_BOUNDSCHECK=1 (the fuzz tests, tests/test_fuzz.py) `data_ptr` hands back the array
itself and `load_u64` checks its 8 bytes, so a read past the input raises IndexError there as
every other index does, instead of reading on unseen.
"""
from llvmlite import ir
from numba import types
from numba.core import config
from numba.extending import intrinsic

from engine.intrinsics import borrow, borrow_all, borrowed_array  # noqa: F401  (the one definition)

BOUNDSCHECK = bool(config.BOUNDSCHECK)


@intrinsic
def data_ptr(typingctx, a):
    """A contiguous array's data as a bare pointer (indexable like the array, no bounds, no
    reference count, no negative-index wrap): for a parser's byte input, which it checks against
    its own end index anyway. Only while the caller keeps the array alive."""
    if not (isinstance(a, types.Array) and a.layout == "C"):
        return None
    if BOUNDSCHECK:  # the array, borrowed, its indexing checked; typed writable, as the pointer is
        # one type whatever the input's flags: one compiled parser for read-only and writable input
        rw = types.Array(a.dtype, a.ndim, a.layout)
        return rw(a), lambda context, builder, sig, args: borrowed_array(context, builder, rw, args[0])

    def codegen(context, builder, sig, args):
        return context.make_array(a)(context, builder, value=args[0]).data

    return types.CPointer(a.dtype)(a), codegen


def _word_at(context, builder, a, i, args, name):
    """The i64 pointer to a[i:i+8] (args: the array or pointer, the index), checked against the
    array's size under NUMBA_BOUNDSCHECK: load_u64's and store_u64's one address."""
    if isinstance(a, types.Array):
        ary = context.make_array(a)(context, builder, value=args[0])
        data = ary.data
        if BOUNDSCHECK:
            at = context.cast(builder, args[1], i, types.intp)
            end = builder.add(at, ir.Constant(at.type, 8))
            oob = builder.or_(builder.icmp_signed("<", at, ir.Constant(at.type, 0)),
                              builder.icmp_signed(">", end, ary.nitems))
            with builder.if_then(oob, likely=False):
                context.call_conv.return_user_exc(builder, IndexError, (f"{name}: index out of bounds",))
    else:
        data = args[0]
    return builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())


@intrinsic
def load_u64(typingctx, a, i):
    """The 8 bytes a[i:i+8] of a uint8 array or pointer as one little-endian uint64 (an unaligned
    load; the caller checks i + 8 <= len): a byte search reads a word at a time (SWAR)."""
    ok_a = (isinstance(a, types.Array) and a.dtype == types.uint8) or a == types.CPointer(types.uint8)
    if not (ok_a and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_word_at(context, builder, a, i, args, "load_u64"), align=1)

    return types.uint64(a, i), codegen


@intrinsic
def store_u64(typingctx, a, i, x):
    """a[i:i+8] = the 8 bytes of uint64 x, little-endian (an unaligned store; the caller checks
    i + 8 <= len): a copy a word at a time (SWAR), as load_u64 reads."""
    ok_a = (isinstance(a, types.Array) and a.dtype == types.uint8 and a.mutable) or a == types.CPointer(types.uint8)
    if not (ok_a and isinstance(i, types.Integer) and x == types.uint64):
        return None

    def codegen(context, builder, sig, args):
        builder.store(args[2], _word_at(context, builder, a, i, args, "store_u64"), align=1)
        return context.get_dummy_value()

    return types.none(a, i, x), codegen


@intrinsic
def ctz_u64(typingctx, x):
    """Count of trailing zero bits of a non-zero uint64 (one tzcnt/bsf): the index of the lowest
    set bit, so a SWAR match mask's first matching byte is ctz_u64(mask) >> 3."""
    if not (isinstance(x, types.Integer) and x.bitwidth == 64):
        return None

    def codegen(context, builder, sig, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return types.uint64(x), codegen


HANDLE_COLS = 3  # a handle: the array's data address and its (up to 2) dimensions


def handles(arrays):
    """The handle table of C-contiguous arrays of at most 2 dimensions (rows in order), for
    `arrays_at`: one small int64 array instead of dozens of arguments. numba's dispatcher types and
    unboxes every array of a call (~200 ns each): a parser state of ~45 arrays cost ~10 us a call,
    which at a live feed's one frame a call was the whole budget. The arrays must outlive every
    call made with the table and not be replaced (a grown array means a new table)."""
    import numpy as np
    H = np.zeros((len(arrays), HANDLE_COLS), np.int64)
    for i, a in enumerate(arrays):
        if not a.flags.c_contiguous or a.ndim > 2:
            raise ValueError("handles: C-contiguous arrays of 1 or 2 dimensions only")
        H[i, 0] = a.ctypes.data
        H[i, 1:1 + a.ndim] = a.shape
    return H


@intrinsic
def arrays_at(typingctx, H, start, T):
    """The tuple of borrowed arrays (types: the tuple type T, a TypeRef) whose handles are rows
    start, start + 1, ... of H (`handles`). No counts, no bounds on H: the caller built it."""
    tt = getattr(T, "instance_type", None)
    if not (isinstance(H, types.Array) and H.ndim == 2 and H.dtype == types.int64 and isinstance(tt, types.BaseTuple)
            and all(isinstance(a, types.Array) and a.layout == "C" and a.ndim in (1, 2) for a in tt)):
        return None

    def codegen(context, builder, sig, args):
        from numba.core import cgutils
        h = context.make_array(sig.args[0])(context, builder, value=args[0])
        row0 = context.cast(builder, args[1], sig.args[1], types.int64)
        i64 = ir.IntType(64)

        def cell(i, col):
            at = builder.add(builder.mul(builder.add(row0, ir.Constant(i64, i)), ir.Constant(i64, HANDLE_COLS)),
                             ir.Constant(i64, col))
            return builder.load(builder.gep(h.data, [at]))

        vals = []
        for i, a in enumerate(tt):
            ary = context.make_array(a)(context, builder)
            item = context.get_abi_sizeof(context.get_data_type(a.dtype))
            data = builder.inttoptr(cell(i, 0), ary.data.type)
            shape = [cell(i, 1 + d) for d in range(a.ndim)]
            strides = [ir.Constant(i64, item)] if a.ndim == 1 else [builder.mul(shape[1], ir.Constant(i64, item)),
                                                                     ir.Constant(i64, item)]
            context.populate_array(ary, data=data, shape=cgutils.pack_array(builder, shape),
                                   strides=cgutils.pack_array(builder, strides), itemsize=ir.Constant(i64, item),
                                   meminfo=None)
            vals.append(ary._getvalue())
        return context.make_tuple(builder, tt, vals)

    return tt(H, start, T), codegen
