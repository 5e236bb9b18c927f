"""mbexp: ablation experiments for the parts of a modern decoder block."""

import os

# On a CPU shared with other jobs, OpenMP threads that spin while they wait stall one another
# (training steps 20x slower were measured on 2 cores, see scripts/bench.py); waiting threads
# that sleep avoid it. Set before torch loads OpenMP; an explicit setting of yours wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
