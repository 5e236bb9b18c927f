"""The typed config schemas: one dataclass per config group, each field with its one-line meaning, and their
registration in Hydra's ConfigStore (composition: mbexp.config.compose; the rules: mbexp.config.rules)."""

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from mbexp import RESULTS_DIR
from mbexp.names import NORM_DEFAULTS


@dataclass
class NormConfig:
    name: str = "layer"
    eps: float = NORM_DEFAULTS["eps"]
    bias: bool = NORM_DEFAULTS["bias"]  # LayerNorm only
    alpha_init: float = NORM_DEFAULTS["alpha_init"]  # DyT only: the initial value of its learnable scalar alpha


@dataclass
class PlacementConfig:
    name: str = "pre"


@dataclass
class FFNConfig:
    name: str = "relu"
    gelu: str = "exact"  # gelu and geglu only: exact, or tanh (the approximation GPT-2 and Gemma use)


@dataclass
class HiddenConfig:
    name: str = "matched"
    multiple_of: int = 1


@dataclass
class ModelConfig:
    name: str = "tiny"
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None  # grouped-query attention: this many key/value heads (None: n_heads)
    seq_len: int = 128
    pos: str = "rope"  # rope | learned | sinusoidal
    tie_embeddings: bool = True
    bias: bool = False  # biases in the attention and FFN Linears (GPT-2, the original Transformer)
    qk_norm: str = "none"  # none | head | proj: normalise q and k before RoPE, per head or over the projection
    emb_scale: bool = False  # embedding ~ N(0, 1/D) times a learnable scalar initialised to sqrt(D) (DyT's LLMs)
    rope_base: float = 10000.0  # RoPE's base: 10,000 (Su et al., Llama 1/2), 500,000 (Llama 3, OLMo 2)
    param: str = "sp"  # sp | mup: standard or maximal-update parametrisation (docs/model.md, "μP")
    init: str = "gpt2"  # gpt2: hidden matrices ~ N(0, 0.02) | fan_in: their std scaled with width as μP's
    base_d_model: int | None = None  # the base width of model.param=mup and model.init=fan_in
    logit_softcap: float | None = None  # cap * tanh(x / cap) on the LM head's logits (Gemma 2); None: off
    attn_softcap: float | None = None  # the same on attention scores, before the mask (Gemma 2); None: off
    zero_init_proj: bool = False  # attention and FFN output matrices start at 0 (modded-nanogpt)


@dataclass
class DataConfig:
    name: str = "bigtxt"
    path: str | None = None  # data=text: a file, a folder or a glob
    vocab_size: int = 4096
    min_frequency: int = 2
    val_fraction: float = 0.05
    test_fraction: float = 0.05  # held out for the final evaluation only (0: no test split)
    val_windows: int = 64  # fixed validation budget: this many seq_len windows
    max_docs: int | None = None  # cap for the large hub corpora
    cache_dir: str = "data_cache"
    # the corpus content's hash (bigtxt: pinned by its checksum), set by the trainer: an edited corpus is a new run
    fingerprint: str | None = None


@dataclass
class OptimConfig:
    name: str = "adamw"
    lr: float = 3e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # the global gradient norm is clipped to this; 0: no clipping (the norm still logged)
    warmup_steps: int = 30
    schedule: str = "cosine"
    min_lr_ratio: float = 0.1  # the schedule ends at lr * min_lr_ratio
    cooldown_fraction: float = 0.2  # schedule=wsd: the last fraction of the steps cools down
    cooldown_shape: str = "linear"  # schedule=wsd: linear | sqrt (1 - sqrt of the cool-down progress)
    adamw_lr: float | None = None  # optim=muon: the AdamW group's LR (None: lr, which is Muon's)
    adjust_lr_fn: str | None = None  # optim=muon: torch's Muon update scaling (original | match_rms_adamw)


@dataclass
class LoggerConfig:
    name: str = "wandb"
    project: str = "mbexp"
    entity: str | None = None
    mode: str = "offline"  # WANDB_MODE in the environment takes precedence
    dir: str = "."  # W&B writes into <dir>/wandb; $WANDB_DIR replaces the default "."
    init_timeout: float = 10.0  # online: seconds to wait for a server that answers the probe, then offline


@dataclass
class TrainConfig:
    steps: int = 300
    batch_size: int = 16
    eval_every: int = 100
    log_every: int = 10
    checkpoint_every: int = 100
    diverge_factor: float = 1.5  # a loss above diverge_factor * ln(vocab) counts as diverged
    budgets: list[int] | None = None  # optim.schedule=wsd: run these train.steps budgets from one trunk
    final_eval: str = "windows"  # the final val/test losses: on the fixed windows, or on the whole splits (full)
    z_loss: float = 0.0  # adds z_loss * log^2(sum exp logits), mean over tokens, to the training loss (PaLM)
    progress: bool = True


@dataclass
class SlurmConfig:
    """sbatch settings read by hydra/launcher=slurm; they do not change a run's numbers."""

    partition: str = "gpu"
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: int = 64
    timeout_min: int = 240
    array_parallelism: int = 32  # at most this many jobs of the array at once
    max_num_timeout: int = 10  # requeues after preemption or timeout


@dataclass
class Config:
    name: str = "default"  # the experiment: results/runs/<name>/...
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    compile: str = "auto"  # auto: when the run is long enough to pay it back on its device (docs/speed.md)
    force: bool = False  # rerun from scratch even if the run completed or has a checkpoint
    results_dir: str = RESULTS_DIR
    norm: NormConfig = field(default_factory=NormConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    ffn: FFNConfig = field(default_factory=FFNConfig)
    hidden: HiddenConfig = field(default_factory=HiddenConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


SCHEMA_NAME = "mbexp_schema"  # conf/config.yaml's first default


def register() -> None:
    """The schema in Hydra's ConfigStore, once per process: storing converts the dataclasses anew each time, and
    Hydra hands each compose a copy of what is stored."""
    store = ConfigStore.instance()
    if f"{SCHEMA_NAME}.yaml" not in store.repo:  # the store's key: the name with Hydra's suffix
        store.store(name=SCHEMA_NAME, node=Config)
