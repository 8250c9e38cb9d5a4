"""The kill switch: one word of the control block (engine/control.py CTL_KILL) that the loop obeys,
pulled by the control plane (a command, --kill-file, a feed down too long) and by the paper
trader's limits (--kill-loss, --kill-drawdown)."""
from engine import control as C
from engine import risk

from .progress import log


def kill_switch(ctl, code, name):
    """Put the loop in the killed state (engine/control.py CTL_KILL) for reason `code`, once: the
    first reason stands until resume-after-kill. From the control plane (command, file, feed down)
    and the paper trader's thread (loss, drawdown): one word, written once."""
    if int(ctl[C.CTL_KILL]) == 0:
        ctl[C.CTL_KILL] = code
        ctl[C.L_KILLS + code] += 1
        log(f"KILLED ({risk.kill_reason(code)}): every instrument's target goes flat; no new exposure until "
            f"`engine ctl resume --after-kill --name {name}`")

