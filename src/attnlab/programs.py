"""The commands' names, one home for each (pyproject.toml's [project.scripts] installs them;
tests/test_import_graph.py checks that the two agree)."""

TRAIN = "attnlab-train"
EVAL = "attnlab-eval"
SWEEP = "attnlab-sweep"
COMPARE = "attnlab-compare"
ATTENTION = "attnlab-attention"
BENCH = "attnlab-bench"
