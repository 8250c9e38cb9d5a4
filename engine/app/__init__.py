"""The application layer: the `engine` program built on everything below it.

cli/ (the command line, one module per command group), runner.py (`engine run`: a run as named
steps), daemon.py (the control plane: HTTP, zmq, the drain), doctor.py, config.py, report.py
(the end-of-run summary), prom.py, zpub.py, runtime_file.py, latency_plot.py.

May import the core (engine/*.py), feeds/, models/, replay/, fpga/, strategies/. Nothing outside
engine/app/ imports it, except the entry points (engine/__main__.py, pyproject's `engine`
script). tests/test_layers.py checks this.
"""
