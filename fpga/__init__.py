"""FPGA offload: exact fixed point and golden model, the HLS C++ and Verilog generators (their
text in fpga/templates/), emulation and RTL simulation, the card driver, the fpga-sim back end.

Layer: above models/ (it reads artifacts and registers its back end with models/artifact.py);
never imports the application (app/) or replay/. tests/test_layers.py checks this.
"""
