"""mbexp: ablation experiments for the parts of a modern decoder block."""

import argparse
import os
from pathlib import Path

__version__ = "0.1.0"
RERUN_ENV = "MBEXP_RERUN"  # set by a command that runs mbexp.train for the user: its own command, to rerun
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"  # the Hydra config tree: groups, experiments
RESULTS_DIR = "results"  # results_dir's and every command's --results default: runs, tables, figures, claims
INTERRUPTED = 130  # the exit code of every command stopped by Ctrl-C (128 + SIGINT), its work kept


def set_entry_defaults() -> None:
    """What an entry point sets before torch loads OpenMP, unless you set it yourself: OpenMP threads wait
    passively, as spinning ones stall each other on a shared CPU (docs/speed.md, "OpenMP's wait policy"); the
    processes it starts keep quiet about semaphores an interrupted joblib sweep leaves to their tracker."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # a stopped joblib sweep: its workers' semaphores are cleaned up, and the warning would bury the error line
    os.environ.setdefault("PYTHONWARNINGS", "ignore::UserWarning:multiprocessing.resource_tracker")


class Parser(argparse.ArgumentParser):
    """argparse for the commands and scripts: the description as laid out in the docstring, and a bad argument
    in one line naming --help (not the usage block), exit 2."""

    def __init__(self, **kwargs):
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {message}; see {self.prog} --help\n")
