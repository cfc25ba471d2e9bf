"""The fil backend: XGBoost, LightGBM and Treelite forests as Triton's FIL backend serves them (CPU)."""
