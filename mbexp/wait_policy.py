"""OpenMP's wait policy: whether a run's idle OpenMP threads spin or sleep between parallel regions. It changes
speed, never numbers. The OpenMP runtime reads it once, when torch loads it, so an entry point chooses it
(`choose`) and sets it (`apply`) before torch is imported; docs/speed.md has the measurements behind the rule.

Torch's OpenMP runtime is GNU's libgomp (pip wheels) or Intel's / LLVM's (conda, MKL builds): libgomp bounds its
spin by GOMP_SPINCOUNT (spins), the others by KMP_BLOCKTIME (ms); each ignores the other's variable.
"""

import os
import re
from dataclasses import dataclass

POLICY_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")  # any one set by the user decides
PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}  # threads sleep at once: no stall beside other work
OPENMP_DEFAULT: dict = {}  # what a plain PyTorch loop gets: spin a while, then sleep
# A run alone spins as OpenMP's default does; a run beside others sleeps, as two spinning jobs stall each other.
ALONE, SHARED = OPENMP_DEFAULT, PASSIVE
# "Alone" also needs a quiet machine: a 1-minute load average at start below this many jobs per core.
ALONE_LOAD_PER_CORE = 1.0
RUNTIMES = {"libgomp": "GNU libgomp", "libiomp5": "Intel OpenMP", "libomp": "LLVM OpenMP"}  # file stem -> name


@dataclass(frozen=True)
class Choice:
    env: dict  # the variables of POLICY_ENV to set (none: OpenMP's default)
    why: str


def choose(*, user: dict, jobs: int, world_size: int, slurm_array: bool, load_avg: float, cores: int) -> Choice:
    """The wait policy for a command: the user's if they set any of POLICY_ENV (in `user`), else ALONE for a
    run alone (one job at a time, one rank, not a SLURM array task, a quiet machine) and SHARED otherwise."""
    if mine := {k: v for k, v in user.items() if k in POLICY_ENV and v}:
        return Choice(mine, "set in your environment")
    if jobs > 1:
        return Choice(SHARED, f"{jobs} jobs side by side")
    if world_size > 1:
        return Choice(SHARED, f"{world_size} ranks (torchrun)")
    if slurm_array:
        return Choice(SHARED, "a SLURM array, whose tasks may share a node")
    if load_avg >= ALONE_LOAD_PER_CORE * cores:
        return Choice(SHARED, f"load average {load_avg:.1f} on {cores} cores: other work is running")
    return Choice(ALONE, f"alone: one job at a time, load average {load_avg:.1f} on {cores} cores")


def launch(argv: list[str], cores: int) -> tuple[int, bool]:
    """What a `python -m mbexp.train` command line (-m as --multirun) launches: (how many of its jobs run at once
    on this machine, whether it submits a SLURM array). Joblib runs hydra.launcher.n_jobs at once (-1: one per
    core, -2: all but one); a value that is no number counts as one, for the pre-flight to refuse."""
    if "--multirun" not in argv:
        return 1, False
    values = dict(a.lstrip("+").partition("=")[::2] for a in argv if "=" in a)
    launcher, n = values.get("hydra/launcher"), values.get("hydra.launcher.n_jobs", "-1")
    if launcher != "joblib" or not n.lstrip("-").isdigit():
        return 1, launcher == "slurm"
    return (cores + 1 + int(n) if int(n) < 0 else int(n)), False


def choose_here(argv: list[str], environ: dict) -> Choice:
    """`choose` for a command line run in this environment, on this machine now."""
    cores = os.cpu_count() or 1
    jobs, array = launch(argv, cores)
    world = environ.get("WORLD_SIZE", "")  # torchrun's; the pre-flight refuses one that is no number
    return choose(user=environ, jobs=jobs, world_size=int(world) if world.isdigit() else 1,
                  slurm_array=array or "SLURM_ARRAY_TASK_ID" in environ, load_avg=os.getloadavg()[0], cores=cores)


def apply(choice: Choice, environ: dict) -> None:
    """Set the chosen policy in `environ` (before torch loads): the user's is left as it is."""
    for key in POLICY_ENV:
        if key in choice.env:
            environ[key] = choice.env[key]


def describe(env: dict) -> str:
    """The policy an environment holds, in words: its POLICY_ENV settings, or OpenMP's default."""
    return " ".join(f"{k}={env[k]}" for k in POLICY_ENV if k in env) or "OpenMP's default"


def in_force() -> str:
    """The policy this process's OpenMP runtime read at load (set before torch loads, as the entry points do)."""
    return describe(os.environ)


def runtime(maps: str) -> str:
    """The OpenMP runtime a process has loaded, from its /proc/<pid>/maps text ('unknown' when none shows)."""
    found = re.search(r"/(libgomp|libiomp5|libomp)[-.\w]*\.so", maps)
    return found.group(1) if found else "unknown"


def bounded_spins(runtime_name: str) -> list[dict]:
    """Two spins between PASSIVE and OpenMP's default, in the variable this runtime reads: libgomp's default
    spins 300,000 times, Intel's and LLVM's wait 200 ms."""
    if runtime_name == "libgomp":
        return [{"GOMP_SPINCOUNT": "3000"}, {"GOMP_SPINCOUNT": "30000"}]
    return [{"KMP_BLOCKTIME": "1"}, {"KMP_BLOCKTIME": "20"}]
