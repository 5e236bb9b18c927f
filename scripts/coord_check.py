"""Coordinate check of μP (Yang et al. 2022, Tensor Programs V): the mean |activation| of the embedding output,
each block's attention output, FFN output and attention scores (q·k times the scale), and the logits, after 0 to 3
Adam steps, at widths 64 to 512 with fixed depth and heads (the head size grows with width). Under μP no curve grows
with width; under SP the block outputs and the logits do. Writes results/figures/mup_coord_check.png (μP and SP
side by side) and prints each curve's slope of log mean |x| on log width.

    python scripts/coord_check.py [--widths 64,128,256,512,1024]
"""

import dataclasses
import math
from pathlib import Path

import matplotlib
import torch
from matplotlib.figure import Figure

from mbexp import RESULTS_DIR, Parser
from mbexp.config import Config, model_spec
from mbexp.model import DecoderLM
from mbexp.trainer import Learner, make_optimizer, train_step

matplotlib.use("Agg")
WIDTHS = (64, 128, 256, 512)
STEPS = 3
LR = 3e-2  # large enough that 3 steps move every coordinate past its initial size
SEEDS = 3  # each point: the mean over this many seeds
GROWS = 0.2  # μP: no coordinate grows faster than width^GROWS (x1.5 from 64 to 512); SP's grow as width^1 or so
SHAPE = dict(vocab_size=256, n_layers=2, n_heads=2, seq_len=32)  # heads fixed: head size = width / 2
BATCH = 4


class OneBatch:
    """The trainer's batches, reduced to one fixed batch of random tokens: every step sees it."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.randint(vocab_size, (BATCH, seq_len + 1), generator=gen)
        self.batch = tokens[:, :-1], tokens[:, 1:]

    def next_train(self):
        return self.batch


def coordinates(param: str, width: int, *, base: int = WIDTHS[0], steps: int = STEPS, lr: float = LR,
                seed: int = 0, **spec) -> dict[str, list[float]]:
    """Mean |x| of each recorded activation (embedding, block{i}.attn, block{i}.ffn, logits) before the first
    and after each of `steps` Adam steps of the trainer's train_step, for one width."""
    cfg = Config()
    cfg.optim.lr = lr
    s = dataclasses.replace(model_spec(cfg, SHAPE["vocab_size"]), **{**SHAPE, **spec}, d_model=width, param=param,
                            base_d_model=base if param == "mup" else None)
    torch.manual_seed(seed)
    model = DecoderLM(s)
    outputs = {"embedding": model.tok_emb, **{f"block{i}.{part}": getattr(block, part)
                                               for i, block in enumerate(model.blocks) for part in ("attn", "ffn")}}
    sizes: dict[str, list[float]] = {name: [] for name in [*outputs, "logits"]}
    sizes |= {f"block{i}.scores": [] for i in range(len(model.blocks))}
    for name, module in outputs.items():
        module.register_forward_hook(lambda _m, _i, out, name=name: sizes[name].append(mean_abs(out)))
    for i, block in enumerate(model.blocks):
        block.attn.register_forward_hook(lambda m, args, _o, i=i: sizes[f"block{i}.scores"].append(scores(m, *args)))
    batches = OneBatch(s.vocab_size, s.seq_len, seed)
    learner = Learner(model, make_optimizer(model, cfg.optim, torch.device("cpu")), batches, torch.device("cpu"),
                      "fp32")
    for step in range(steps + 1):
        with torch.no_grad():
            logits, _ = model(batches.batch[0])
        sizes["logits"].append(mean_abs(logits))
        if step < steps:
            train_step(learner, lr, grad_clip=0.0)
    # the hooks also fired in each training step's forward: keep the measuring passes only
    return {name: values[::2] if name != "logits" else values for name, values in sizes.items()}


def mean_abs(x: torch.Tensor) -> float:
    return x.detach().abs().mean().item()


def scores(attn, x: torch.Tensor) -> float:
    """Mean |q·k| times the attention's scale (SDPA's 1/√hd where it sets none), over every query-key pair."""
    q, k, _ = attn.heads(x.detach())
    scale = attn.scale if attn.scale is not None else attn.head_dim ** -0.5
    return mean_abs(q @ k.transpose(-2, -1) * scale)


def check(param: str, widths=WIDTHS, *, seeds: int = SEEDS, **kw) -> dict[int, dict[str, list[float]]]:
    """coordinates() at each width (base: the first), each value the mean over `seeds` seeds."""
    out = {}
    for w in widths:
        runs = [coordinates(param, w, base=widths[0], seed=seed, **kw) for seed in range(seeds)]
        out[w] = {name: [sum(r[name][t] for r in runs) / seeds for t in range(len(runs[0][name]))] for name in runs[0]}
    return out


def slopes(result: dict[int, dict[str, list[float]]]) -> dict[str, list[float]]:
    """For each activation and step: the least-squares slope of log mean |x| on log width (0: flat in width)."""
    xs = [math.log(w) for w in result]
    mx = sum(xs) / len(xs)
    out = {}
    for name, values in next(iter(result.values())).items():
        out[name] = []
        for t in range(len(values)):
            ys = [math.log(by_name[name][t]) for by_name in result.values()]
            my = sum(ys) / len(ys)
            out[name].append(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs))
    return out


def figure(results: dict[str, dict[int, dict[str, list[float]]]], path: Path, per_row: int = 3) -> None:
    """One panel per activation, mean |x| against width with a line per step; μP's panels left of SP's."""
    names = list(next(iter(next(iter(results.values())).values())))
    rows = math.ceil(len(names) / per_row)
    fig = Figure(figsize=(2.6 * per_row * len(results), 2.3 * rows))
    axes = fig.subplots(rows, per_row * len(results), squeeze=False)
    for col, (param, result) in enumerate(results.items()):
        widths = list(result)
        for k, name in enumerate(names):
            ax = axes[k // per_row][col * per_row + k % per_row]
            for t in range(len(result[widths[0]][name])):
                ax.plot(widths, [result[w][name][t] for w in widths], "o-", markersize=3, label=f"step {t}")
            ax.set(xscale="log", yscale="log")
            ax.set_title(f"{param}: {name}", fontsize=9)
            ax.set_xticks(widths, [str(w) for w in widths], fontsize=7)
            ax.set_xticks([], minor=True)
            ax.tick_params(axis="y", labelsize=7)
        axes[0][col * per_row].legend(fontsize=6)
        for k in range(len(names), rows * per_row):
            axes[k // per_row][col * per_row + k % per_row].set_axis_off()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, metadata={"Software": None})


def main() -> None:
    parser = Parser(prog="python scripts/coord_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--out", type=Path, default=Path(RESULTS_DIR))
    args = parser.parse_args()
    torch.set_num_threads(1)
    widths = tuple(int(w) for w in args.widths.split(","))
    results = {param: check(param, widths) for param in ("mup", "sp")}
    for param, result in results.items():
        print(f"{param}: slope of log mean |x| on log width {widths}, steps 0..{STEPS}")
        for name, values in slopes(result).items():
            print(f"  {name:14} " + "  ".join(f"{v:+6.2f}" for v in values))
    path = args.out / "figures" / "mup_coord_check.png"
    figure(results, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
