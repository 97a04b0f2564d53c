"""The papers ``chillfl reproduce`` reproduces, by the name its PAPER argument takes.

Why its own module: the command line's parser offers them as choices at every start-up, and :mod:`chillfl.reproduce`,
which holds each paper's claims, imports torch and the sweeps (seconds); a second copy of the names in the parser drifts.
"""

PAPERS = ("flexchill", "fedchill", "pa3fed", "scarlet")
