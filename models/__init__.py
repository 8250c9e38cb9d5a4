"""Data sets, XGBoost training, Treelite/TL2cgen compilation and verified model artifacts.

Layer: above the core and feeds/. Imports the engine core and feeds/ (data sets read sources);
never fpga/ (the fpga-sim back end registers itself with models/artifact.py), replay/ or the
application (app/). tests/test_layers.py checks this.
"""

NUMBA_CACHE_KEY = True  # these sources key the numba cache (engine/__init__.py): compiled code here inlines across modules
