"""Host driver for a real card: the `engine_tree_mm` kernel of an xclbin built from DIR/hls.

Through XRT's Python bindings (pyxrt), imported only when a card is used. Two modes:
- batched: `predict(X)` sends rows in batches of `batch`, one kernel run each, synchronously;
- streaming: `stream(batches)` keeps two buffer sets in flight (double buffering): batch k+1 is
  transferred and started while batch k computes and comes back.
A single host call over PCIe costs 50-100 us of runtime overhead, so a batch of one loses to the
CPU back ends (0.6 us a row here); batches of thousands, streaming, or the kernel on a
NIC-attached card's data path (engine_tree_stream, 10-16 cycles) are the real uses.
Tests drive this class with a fake runtime that checks the call sequence and buffer contents.
"""
import numpy as np


def _runtime(name):
    if name == "pyxrt":
        try:
            import pyxrt
        except ImportError:
            raise RuntimeError("pyxrt (XRT's Python bindings) is not installed: source /opt/xilinx/xrt/setup.sh") from None
        return pyxrt
    raise RuntimeError(f"unknown FPGA runtime {name!r} (pyxrt)")


class _Buffers:
    def __init__(self, rt, device, kernel, batch, nf):
        self.rows = rt.bo(device, batch * nf * 4, rt.bo.normal, kernel.group_id(0))
        self.scores = rt.bo(device, batch * 4, rt.bo.normal, kernel.group_id(1))
        self.run = None
        self.n = 0


class CardPredictor:
    def __init__(self, xclbin, n_features, batch=4096, device_index=0, runtime="pyxrt",
                 kernel_name="engine_tree_mm"):
        rt = runtime if not isinstance(runtime, str) else _runtime(runtime)
        self.rt, self.nf, self.batch = rt, n_features, batch
        self.device = rt.device(device_index)
        self.uuid = self.device.load_xclbin(rt.xclbin(str(xclbin)))
        self.kernel = rt.kernel(self.device, self.uuid, kernel_name, rt.kernel.cu_access_mode.shared)
        self.sets = [_Buffers(rt, self.device, self.kernel, batch, n_features) for _ in range(2)]

    def _start(self, b, X):
        n = len(X)
        data = np.ascontiguousarray(X, np.float32).tobytes()
        b.rows.write(data, 0)
        b.rows.sync(self.rt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, len(data), 0)
        b.run = self.kernel(b.rows, b.scores, n)
        b.n = n

    def _finish(self, b):
        b.run.wait()
        b.scores.sync(self.rt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE, b.n * 4, 0)
        out = np.frombuffer(bytes(b.scores.read(b.n * 4, 0)), np.float32).copy()
        b.run = None
        return out

    def _chunks(self, X):
        X = np.asarray(X, np.float32)
        if X.ndim != 2 or X.shape[1] != self.nf:
            raise ValueError(f"rows must be float32 [n, {self.nf}], got {X.shape}")
        for i in range(0, len(X), self.batch):
            yield X[i:i + self.batch]

    def predict(self, X):
        """Batched, synchronous: one kernel run per batch."""
        outs = []
        b = self.sets[0]
        for chunk in self._chunks(X):
            self._start(b, chunk)
            outs.append(self._finish(b))
        return np.concatenate(outs) if outs else np.zeros(0, np.float32)

    def stream(self, batches):
        """Double-buffered: yields each batch's scores, in order, while the next one computes."""
        inflight = []  # buffer sets in submission order
        k = 0
        for X in batches:
            for chunk in self._chunks(X):
                b = self.sets[k % 2]
                if b.run is not None:  # the oldest batch in flight is on this set: collect it first
                    yield self._finish(inflight.pop(0))
                self._start(b, chunk)
                inflight.append(b)
                k += 1
        while inflight:
            yield self._finish(inflight.pop(0))
