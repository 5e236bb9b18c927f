"""mbexp: ablation experiments for the parts of a modern decoder block."""

import os

__version__ = "0.1.0"
RERUN_ENV = "MBEXP_RERUN"  # set by a command that runs mbexp.train for the user: its own command, to rerun


def set_entry_defaults() -> None:
    """What an entry point sets before torch loads OpenMP, unless you set it yourself: OpenMP threads wait
    passively, as spinning ones stall each other on a shared CPU (docs/speed.md, "OpenMP's wait policy")."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
