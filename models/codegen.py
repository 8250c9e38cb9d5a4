"""Templates for the code generators (the flat C kernel here, HLS C++ and Verilog in fpga/): the
checked-template mechanism itself lives in the core, engine/render.py, because the host loop's
generated header is rendered by it too (the core imports nothing above it)."""
from engine.render import CodeTemplate, TemplateError, placeholders, render

__all__ = ["CodeTemplate", "TemplateError", "placeholders", "render"]
