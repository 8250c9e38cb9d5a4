"""The defaults the core and the application share, each declared once. Plain numbers, no imports:
the command line reads them when it builds its parser without loading numba (app/run_options.py
turns them into the documented options; the core's functions take them as their defaults)."""

RING_CAPACITY = 1 << 18      # tick ring slots (a power of two): ~4 s of a busy day's burst at 64 B a tick
WARM_EVERY = 2048            # idle polls between two warm-up calls of the model (0 = never)
CONFLATE_MAX = 1024          # ticks folded before a conflation window is scored regardless
CROSSED_AFTER_S = 1.0        # a book crossed longer than this (exchange time) is counted (0 = never)
LEASE_NS = 3_000_000_000     # the loop stops by itself if the main thread goes quiet this long
