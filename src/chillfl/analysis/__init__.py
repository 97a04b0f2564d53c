"""Analyses beyond a single run: temperature sweeps (FedChill Fig. 1), cache ratios and soft-label entropy (SCARLET Figs. 3-4)."""
