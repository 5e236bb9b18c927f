"""Shared fixtures. Each fixture is self-contained; keep names specific to what they build."""

import contextlib
import os
from pathlib import Path

# Every test process, and each run it starts, computes on one thread: tiny tensors gain nothing from a second, and
# the two test workers of `make test` (pytest -n 2) would otherwise oversubscribe two cores. Set before torch loads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from mbexp.config import DataConfig
from mbexp.data import TokenData, prepare

BIGTXT_TEST_VOCAB = 512  # small enough to build in a few seconds, big enough to be a real BPE
BIGTXT_TEST_SEQ_LEN = 32


def bigtxt_test_config(cache_dir) -> DataConfig:
    """The DataConfig of the `bigtxt_tokens` fixture, for tests (and subprocesses) that rebuild it."""
    return DataConfig(name="bigtxt", vocab_size=BIGTXT_TEST_VOCAB, cache_dir=str(cache_dir))


@pytest.fixture(scope="session")
def bigtxt_tokens(cache) -> TokenData:
    """big.txt with a 512-token BPE (tests/tiny.py's smoke runs use the same), built once into the shared cache."""
    return prepare(bigtxt_test_config(cache), seq_len=BIGTXT_TEST_SEQ_LEN)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only add contention on a busy machine (x40 slower seen on 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# the modules whose code writes a token cache (scripts/mutation_score.py TOKEN_CODE): their mutants build their own
TOKEN_BUILDERS = ("mbexp.data.", "mbexp.corpus.", "mbexp.corpus_check.", "mbexp.token_cache.", "mbexp.io.")


def shared_token_cache(environ) -> Path | None:
    """MBEXP_TEST_TOKEN_CACHE (set by scripts/mutation_score.py, which runs one pytest session per mutant): a token
    cache shared across sessions, unless the mutant under test is in the code that builds it."""
    shared = environ.get("MBEXP_TEST_TOKEN_CACHE")
    return Path(shared) if shared and not environ.get("MUTANT_UNDER_TEST", "").startswith(TOKEN_BUILDERS) else None


@pytest.fixture(scope="session")
def cache(tmp_path_factory, worker_id):
    """One token cache for every test that trains with tests/tiny.py's settings, shared by the session's test
    workers: the first to need a corpus builds it under the cache's lock, the others wait and read it."""
    shared = shared_token_cache(os.environ)
    if shared:
        shared.mkdir(parents=True, exist_ok=True)
        return shared
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if worker_id != "master" else base) / "token_cache"  # xdist: the workers' common folder
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def no_shared_wandb_service():
    """A test that logs to W&B in this process starts a W&B service and exports WANDB_SERVICE; the
    `python -m mbexp.train` processes of later tests would inherit it and share one service (and
    the runs a killed process left open in it). Stop it after the test, as a fresh shell would have."""
    yield
    if "WANDB_SERVICE" in os.environ:
        import wandb

        wandb.teardown()
        os.environ.pop("WANDB_SERVICE", None)


def pytest_collection_modifyitems(config, items):
    """The long tests (golden, then slow) run first: xdist hands each worker a contiguous share and balances by
    stealing from the ends of the queues, so a long test left near the end runs alone while the other worker idles.
    Under mutmut (scripts/mutation_score.py), a mutant's tests run the earlier killers of its function's mutants
    first, then its module's, then fastest first: with -x the first failing test ends a killed mutant's run."""
    if not mutated_function():
        items.sort(key=lambda item: 0 if item.get_closest_marker("golden") else 1 if item.get_closest_marker("slow")
                   else 2)
        return
    import json

    stats = Path("mutmut-stats.json")  # mutmut runs the tests from its store, mutants/
    durations = json.loads(stats.read_text()).get("duration_by_test", {}) if stats.exists() else {}
    function = mutated_function()
    module = function.rpartition(".")[0]
    kills, module_kills = {}, {}
    for line in KILLERS.read_text().splitlines() if KILLERS.exists() else []:
        with contextlib.suppress(ValueError):  # a line a killed job left half-written
            f, test = json.loads(line)
            kills[test] = kills.get(test, 0) + (f == function)
            module_kills[test] = module_kills.get(test, 0) + (f.rpartition(".")[0] == module)
    items.sort(key=lambda item: (-kills.get(item.nodeid, 0), -module_kills.get(item.nodeid, 0),
                                 durations.get(item.nodeid, float("inf"))))


KILLERS = Path("mutmut-killers.jsonl")  # under mutmut: [mutated function, test] per failing test, one per line


def mutated_function() -> str:
    return os.environ.get("MUTANT_UNDER_TEST", "").rpartition("__mutmut_")[0]


def pytest_runtest_logreport(report):
    """Under mutmut, the test that failed a mutant is kept, so the next mutants of its function run it first."""
    if report.failed and report.when == "call" and mutated_function():
        import json

        with KILLERS.open("a") as f:  # one short line per write: the two jobs' appends do not interleave
            f.write(json.dumps([mutated_function(), report.nodeid]) + "\n")
