"""mbexp: ablation experiments for the parts of a modern decoder block."""

import argparse
import os
from pathlib import Path

__version__ = "0.1.0"
RERUN_ENV = "MBEXP_RERUN"  # set by a command that runs mbexp.train for the user: its own command, to rerun
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"  # the Hydra config tree: groups, experiments
RESULTS_DIR = "results"  # results_dir's and every command's --results default: runs, tables, figures, claims
INTERRUPTED = 130  # the exit code of every command stopped by Ctrl-C (128 + SIGINT), its work kept


def set_entry_defaults(argv: list[str]) -> str:
    """What an entry point sets before torch loads OpenMP, for its command line `argv`: OpenMP's wait policy
    (mbexp.wait_policy; yours if you set one); the processes it starts keep quiet about semaphores an
    interrupted joblib sweep leaves to their tracker. Returns the policy in force and why, in one line."""
    from mbexp import wait_policy

    choice = wait_policy.choose_here(argv, os.environ)
    wait_policy.apply(choice, os.environ)
    # a stopped joblib sweep: its workers' semaphores are cleaned up, and the warning would bury the error line
    os.environ.setdefault("PYTHONWARNINGS", "ignore::UserWarning:multiprocessing.resource_tracker")
    return f"OpenMP wait policy: {wait_policy.describe(choice.env)} ({choice.why})"


class Parser(argparse.ArgumentParser):
    """argparse for the commands and scripts: the description as laid out in the docstring, and a bad argument
    in one line naming --help (not the usage block), exit 2."""

    def __init__(self, **kwargs):
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {message}; see {self.prog} --help\n")
