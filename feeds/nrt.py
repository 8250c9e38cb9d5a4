"""Arrays without a reference count, for a parser's inner loop.

numba counts references to every array it hands on: each time a function (or an inlined one)
receives an array, or takes one out of a tuple, it increments the array's count with an atomic
instruction and decrements it later. In the ITCH parser these atomics were two thirds of the
time (perf: NRT_incref/NRT_decref). `borrow(a)` is `a` with no count (a null meminfo, as for an
array numba builds over a raw pointer): incref/decref of it do nothing.

Only for arrays the caller keeps alive for the whole call (a function's own arguments) and that
never escape it (not returned, not stored).
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def borrow(typingctx, a):
    if not isinstance(a, types.Array):
        return None

    def codegen(context, builder, sig, args):
        src = context.make_array(a)(context, builder, value=args[0])
        dst = context.make_array(a)(context, builder)
        dst.meminfo = cgutils.get_null_value(dst.meminfo.type)
        dst.parent = cgutils.get_null_value(dst.parent.type)
        dst.nitems = src.nitems
        dst.itemsize = src.itemsize
        dst.data = src.data
        dst.shape = src.shape
        dst.strides = src.strides
        return dst._getvalue()  # no incref: the result owns nothing

    return a(a), codegen


@intrinsic
def borrow_readonly(typingctx, a):
    """borrow(a), typed read-only: a parser compiled for read-only input (bytes) takes a buffer
    of its own through the same machine code instead of a second specialization."""
    if not isinstance(a, types.Array):
        return None
    ro = a.copy(readonly=True)

    def codegen(context, builder, sig, args):
        src = context.make_array(a)(context, builder, value=args[0])
        dst = context.make_array(ro)(context, builder)
        dst.meminfo = cgutils.get_null_value(dst.meminfo.type)
        dst.parent = cgutils.get_null_value(dst.parent.type)
        dst.nitems = src.nitems
        dst.itemsize = src.itemsize
        dst.data = src.data
        dst.shape = src.shape
        dst.strides = src.strides
        return dst._getvalue()

    return ro(a), codegen


@intrinsic
def load_u64(typingctx, a, i):
    """The 8 bytes a[i:i+8] of a uint8 array as one little-endian uint64 (an unaligned load; the
    caller checks i + 8 <= len): a byte search reads a word at a time (SWAR)."""
    if not (isinstance(a, types.Array) and a.dtype == types.uint8 and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        arr = context.make_array(a)(context, builder, value=args[0])
        p = builder.gep(arr.data, [args[1]])
        q = builder.bitcast(p, ir.IntType(64).as_pointer())
        return builder.load(q, align=1)

    return types.uint64(a, i), codegen
