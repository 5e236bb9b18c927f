"""The run summary (summary.json): the contract between a run, which writes it, and `make table`, which reads it."""

import math
from dataclasses import dataclass, field, fields

from mbexp.io import is_number
from mbexp.run.migrate import SCHEMA

# flops_per_token's formula (mbexp.model.flops_terms counts its terms; tables and the bench print it)
FLOPS_FORMULA = "6*N_matmul + 12*n_layers*d_model*seq_len"
N_MATMUL = "N_matmul = every nn.Linear weight, the tied LM head included (embedding lookups and norm gains excluded)"


def _number():
    return field(default=None, metadata={"number": True})


@dataclass
class RunSummary:
    """One run's summary.json, schema SCHEMA (mbexp.run.migrate.upgrade reads older ones as this)."""

    status: str  # running, interrupted, failed, diverged or completed
    experiment: str
    variant: str
    row: str  # the table row's readable name
    row_id: str  # the config hash without the warm-up: runs of one row share it
    seed: int
    config_hash: str
    axes: dict  # norm, placement, ffn, hidden, warmup_steps
    steps: int | None = _number()  # the budget
    step: int | None = _number()  # the steps done
    # what the run built and how it computed (params, ..., compiled: known once the run started)
    params: int | None = _number()
    params_non_embedding: int | None = _number()
    params_ffn: int | None = _number()
    d_ff: int | None = _number()
    flops_per_token: int | None = _number()
    train_tokens: int | None = _number()
    precision: str | None = None  # fp32 or bf16, also in `identity`
    device: str | None = None
    compiled: bool | None = None
    wait_policy: str | None = None  # OpenMP's, as mbexp.wait_policy.describe says it: speed only, not identity
    identity: dict = field(default_factory=dict)  # the dotted config keys that decide the numbers
    early_step: int | None = _number()
    early_tokens: int | None = _number()
    early_val_loss: float | None = _number()
    early_val_bpb: float | None = _number()
    final_val_loss: float | None = _number()
    final_val_bpb: float | None = _number()
    final_test_loss: float | None = _number()
    final_test_bpb: float | None = _number()
    final_train_loss: float | None = _number()  # the mean train loss of the last log interval
    generalization_gap: float | None = _number()  # final train minus validation loss
    tokens_seen: int | None = _number()
    epochs: float | None = _number()
    wall_time_s: float | None = _number()
    compile_s: float | None = _number()
    tokens_per_s: float | None = _number()  # over the timed steps (compile warm-up excluded)
    tokens_per_s_median: float | None = _number()  # over log intervals
    git_commit: str = "unknown"  # the code commit the run was launched from
    git_clean: bool | None = None  # no change outside results/ at launch and every resume (None: not known)
    git_resumed: list = field(default_factory=list)  # later commits a resume ran on
    versions: dict = field(default_factory=dict)
    wandb_id: str = ""
    command: str | None = None  # the command that reruns this job alone
    declarations: dict = field(default_factory=dict)  # claim id -> digest of its declaration, recorded at launch
    branched: dict | None = None  # a budget branch: {step, wall_time_s} of the trunk it resumed from (its cost)
    error: str | None = None  # a failed run's error line
    schema: int = SCHEMA


NUMBERS = tuple(f.name for f in fields(RunSummary) if f.metadata.get("number"))
FIELDS = tuple(f.name for f in fields(RunSummary))


def lr_problem(identity: dict) -> str:
    """Why a run's identity names no learning rate ('' when it names one): a table tunes it, a study's scan
    chooses it, so a run without one cannot be read."""
    if "optim.lr" not in identity:
        return "its identity records no optim.lr"
    lr = identity["optim.lr"]
    return "" if is_number(lr) and 0 < lr < math.inf else f"identity optim.lr={lr!r} is not a learning rate"
