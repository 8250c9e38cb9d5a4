"""Data sets, XGBoost training, Treelite/TL2cgen compilation and verified model artifacts."""
