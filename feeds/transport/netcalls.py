"""numba intrinsics for a native reader thread (feeds/binance/pump.py): recv and poll called straight
from nogil code, and a read-only view of an array.

Each is the libc call itself, declared in the function's LLVM module: no ctypes object, no Python,
no GIL. Errors come back as -errno (as the kernel gives them), so the caller tells EAGAIN from a
dead socket without a second call.
"""
import errno

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic

MSG_DONTWAIT = 0x40
EAGAIN, EINTR = errno.EAGAIN, errno.EINTR
POLLIN, POLLERR, POLLHUP, POLLNVAL = 0x1, 0x8, 0x10, 0x20
_I8P, _I16, _I32, _I64 = ir.IntType(8).as_pointer(), ir.IntType(16), ir.IntType(32), ir.IntType(64)


def _int(context, builder, sig, args, i, to=_I64):
    v = context.cast(builder, args[i], sig.args[i], types.int64)
    return v if to is _I64 else builder.trunc(v, to)


def _or_errno(builder, r):
    """r, or -errno when r < 0."""
    loc = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32.as_pointer(), []), "__errno_location")
    neg = builder.icmp_signed("<", r, ir.Constant(r.type, 0))
    res = cgutils.alloca_once_value(builder, r)
    with builder.if_then(neg):  # (errno read only on failure)
        builder.store(builder.neg(builder.sext(builder.load(builder.call(loc, [])), r.type)), res)
    return builder.load(res)


@intrinsic
def recv_into(typingctx, fd, arr, off, n, flags):
    """recv(fd, &arr[off], n, flags): bytes read, 0 at end of stream, or -errno. The caller keeps
    off + n within arr."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint8 and arr.layout == "C" and arr.mutable):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[1])(context, builder, args[1]).data
        p = builder.bitcast(builder.gep(data, [_int(context, builder, sig, args, 2)]), _I8P)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I32, _I8P, _I64, _I32]), "recv")
        r = builder.call(fn, [_int(context, builder, sig, args, 0, _I32), p, _int(context, builder, sig, args, 3),
                              _int(context, builder, sig, args, 4, _I32)])
        return _or_errno(builder, r)
    return types.int64(fd, arr, off, n, flags), codegen


@intrinsic
def poll_two(typingctx, fd_a, fd_b, timeout_ms):
    """poll() on two fds for input, up to timeout_ms (-1: no limit): a bit mask, 1 when fd_a is
    readable (or has an error or hang-up, or is not open: the read that follows says which), 2 when
    fd_b is; 0 at the timeout; or -errno."""
    def codegen(context, builder, sig, args):
        pfd = ir.LiteralStructType([_I32, _I16, _I16])  # struct pollfd {int fd; short events, revents;}
        fds = cgutils.alloca_once(builder, pfd, size=2)
        for k in range(2):
            p = builder.gep(fds, [ir.Constant(_I32, k)])
            builder.store(_int(context, builder, sig, args, k, _I32), cgutils.gep_inbounds(builder, p, 0, 0))
            builder.store(ir.Constant(_I16, POLLIN), cgutils.gep_inbounds(builder, p, 0, 1))
            builder.store(ir.Constant(_I16, 0), cgutils.gep_inbounds(builder, p, 0, 2))
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [pfd.as_pointer(), _I64, _I32]), "poll")
        r = builder.sext(builder.call(fn, [fds, ir.Constant(_I64, 2), _int(context, builder, sig, args, 2, _I32)]), _I64)
        mask = ir.Constant(_I64, 0)
        for k in range(2):
            rev = builder.load(cgutils.gep_inbounds(builder, builder.gep(fds, [ir.Constant(_I32, k)]), 0, 2))
            hit = builder.icmp_unsigned("!=", builder.and_(rev, ir.Constant(_I16, POLLIN | POLLERR | POLLHUP | POLLNVAL)),
                                        ir.Constant(_I16, 0))
            mask = builder.or_(mask, builder.select(hit, ir.Constant(_I64, 1 << k), ir.Constant(_I64, 0)))
        got = builder.select(builder.icmp_signed(">", r, ir.Constant(_I64, 0)), mask, r)
        return _or_errno(builder, got)
    return types.int64(fd_a, fd_b, timeout_ms), codegen


@intrinsic
def readonly(typingctx, arr):
    """arr typed read-only (the same array, one more reference): so a writable buffer meets a
    function compiled for read-only input as that signature, not as a second compile."""
    if not isinstance(arr, types.Array):
        return None
    rt = arr.copy(readonly=True)

    def codegen(context, builder, sig, args):
        return impl_ret_borrowed(context, builder, sig.return_type, args[0])
    return rt(arr), codegen
