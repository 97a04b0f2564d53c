"""Analyses of runs and result folders: temperature sweeps (FedChill Fig. 1), cache ratios and soft-label entropy (SCARLET Figs. 3-4),
calibration, layer-wise CKA, accuracy and entropy across aggregation, input-gradient norms (FLex&Chill Figs. 2, 9, 10, 12, 13; see docs/analysis.md)."""
