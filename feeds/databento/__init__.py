"""Databento: the DBN file reader (dbn:FILE) and the live gateway client (dbn-live://)."""
