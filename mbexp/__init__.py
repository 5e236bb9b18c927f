"""mbexp: ablation experiments for the parts of a modern decoder block."""

import os

# OpenMP threads that spin while they wait stall one another when the CPU is shared. `make bench`
# measured mbexp's step on 2 cores (docs/speed.md): beside a second job OpenMP's default wait policy
# ran 4.3x slower than PASSIVE, alone PASSIVE cost a third; sweeps and shared machines are the common
# case, so PASSIVE is the default. Set before torch loads OpenMP; an explicit setting of yours wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
