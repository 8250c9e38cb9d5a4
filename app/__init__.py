"""The application layer: the `engine` program, the top folder of the layers (README "Layout").

cli/ (the command line, one module per command group), live.py (`engine run`: a run as named
steps), daemon.py (the control plane: HTTP, zmq, the drain), recorder.py (`engine record`),
doctor.py, config.py, run_summary.py (the end-of-run summary), prom.py, zpub.py,
runtime_file.py, latency_plot.py.

May import the core (engine/), feeds/, models/, replay/, fpga/, strategies/. Nothing else
imports it; its entry points are pyproject's `engine` script and `python -m app`.
tests/test_layers.py checks this.
"""
