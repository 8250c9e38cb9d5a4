"""`engine run --isolate`: other tasks, IRQs and unbound kernel work moved off the strategy core
while the run goes (engine/isolation.py), swept again every ISOLATE_SWEEP_S for tasks born since,
and put back at its end."""
import threading

from .progress import log

ISOLATE_SWEEP_S = 2.0  # --isolate: tasks born since the last sweep are moved off the core this often


class CoreIsolation:
    def __init__(self, core, name):
        from engine import isolation
        self.stop_flag, self.keeper, self.text = threading.Event(), None, None
        self.iso = isolation.Isolation(core, name)

    def start(self):
        """The first sweep (what it moved is said), then a thread that sweeps again."""
        iso = self.iso
        iso.sweep()
        log(f"isolate: {iso.describe()}")
        self.text = iso.describe()

        def keep():
            while not self.stop_flag.wait(ISOLATE_SWEEP_S):
                try:
                    iso.sweep()
                except OSError as e:  # the record could not be saved (a full disk): moves stay in memory
                    log(f"isolate: sweep failed ({e}); what was moved is still put back at exit")
                    return
        self.keeper = threading.Thread(target=keep, name="isolation", daemon=True)
        self.keeper.start()

    def restore(self):
        """Everything moved put back (a partial first sweep's too)."""
        self.stop_flag.set()
        if self.keeper is not None:
            self.keeper.join()
        done, kept = self.iso.restore()
        log(f"isolate: put back {done} tasks and IRQs" + (f"; {kept} changed by someone else since, left as they are"
                                                           if kept else ""))
