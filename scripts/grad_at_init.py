"""Gradient norms of each layer's weights at initialisation, per placement (Xiong et al. 2020, §3).

Xiong et al. show that at initialisation the gradient of the FFN weights in a Post-LN
Transformer grows with the layer index (largest next to the output), while in a Pre-LN
Transformer it stays flat across layers; that is why Post-LN needs learning-rate warm-up.
This script measures the same quantity on the mbexp model for every placement (Pre, Post,
Peri-LN, output norm, DeepNorm), under mbexp's own GPT-2 init and under Xiong et al.'s
Xavier init (DeepNorm keeps its own Xavier gains under both): the LM loss on real validation windows of big.txt,
one backward pass, the Frobenius norm of each FFN weight's gradient, averaged over seeds.
Writes results/grad_at_init/grad_at_init.{csv,md}, each seed's norms (grad_at_init_seeds.csv) and
results/figures/grad_at_init.png.

    python scripts/grad_at_init.py [--layers 12] [--seeds 4]
    python scripts/grad_at_init.py --from-seeds results/grad_at_init/grad_at_init_seeds.csv --out DIR  # redraw
"""

from pathlib import Path

import matplotlib
import pandas as pd
import torch
from matplotlib.figure import Figure

from mbexp import RESULTS_DIR, Parser
from mbexp.config import compose_config, to_object
from mbexp.data import Batches, prepare
from mbexp.io import write_text
from mbexp.model import PLACEMENTS, DecoderLM, deepnorm_init_
from mbexp.trainer import make_learner

matplotlib.use("Agg")
WEIGHTS = {"ffn.w": "FFN W1", "ffn.w2": "FFN W2"}
INITS = ("mbexp", "xavier")


def xavier_init(model: DecoderLM) -> None:
    """Xiong et al.'s setting: Xavier-normal matrices, unit-variance token embeddings (fairseq's
    N(0, 1/D) scaled by sqrt(D)) and an untied Xavier head, instead of mbexp's GPT-2 init."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.xavier_normal_(module.weight)
    torch.nn.init.normal_(model.tok_emb.weight, std=1.0)
    if model.spec.placement == "deepnorm":  # DeepNet's own init is Xavier, with its gains
        for block in model.blocks:
            deepnorm_init_(block, model.spec.n_layers)


def grad_norms(placement: str, init: str, *, layers: int, seed: int, batch, cfg, data) -> list[dict]:
    """One backward pass of a freshly initialised model (the trainer's, at `seed`): the gradient norm of every
    block weight."""
    cfg.placement.name, cfg.model.n_layers, cfg.model.tie_embeddings = placement, layers, init == "mbexp"
    cfg.seed = seed
    model = make_learner(cfg, data, torch.device("cpu"), "fp32").model
    if init == "xavier":
        xavier_init(model)
    for name, parameter in model.named_parameters():  # only the FFN weights' gradients are read: the rest is skipped
        parameter.requires_grad_(name.endswith(tuple(f"{w}.weight" for w in WEIGHTS)))
    _, loss = model(*batch)
    loss.backward()
    rows = []
    for layer, block in enumerate(model.blocks, start=1):
        for name, label in WEIGHTS.items():
            rows.append({"init": init, "placement": placement, "layer": layer, "weight": label, "seed": seed,
                         "grad_norm": block.get_submodule(name).weight.grad.norm().item()})
    return rows


def markdown_table(table: pd.DataFrame) -> str:
    lines = ["| layer | " + " | ".join(table.columns) + " |", "|---:|" + "---:|" * len(table.columns)]
    lines += [f"| {layer} | " + " | ".join(f"{v:.3g}" for v in row) + " |" for layer, row in table.iterrows()]
    return "\n".join(lines)


def main() -> None:
    parser = Parser(prog="python scripts/grad_at_init.py", description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path(RESULTS_DIR))
    parser.add_argument("--from-seeds", type=Path, metavar="CSV",
                        help="no model: the table and figure from a grad_at_init_seeds.csv this script wrote")
    args = parser.parse_args()
    if args.from_seeds:
        try:
            norms = pd.read_csv(args.from_seeds)
        except (OSError, pd.errors.ParserError, UnicodeDecodeError) as err:
            parser.error(f"--from-seeds {args.from_seeds}: {err}")
        if missing := [c for c in ("init", "placement", "layer", "weight", "seed", "grad_norm") if c not in norms]:
            parser.error(f"--from-seeds {args.from_seeds}: no column {', '.join(missing)}; give the "
                         "grad_at_init_seeds.csv this script writes")
        if pd.to_numeric(norms["grad_norm"], errors="coerce").isna().any():
            parser.error(f"--from-seeds {args.from_seeds}: a grad_norm that is not a number")
        print(write_outputs(norms, args.out))
        return
    torch.set_num_threads(1)  # one summation order: the committed numbers reproduce exactly
    cfg = to_object(compose_config(["model=tiny", "ffn=relu", "norm=layer"]))
    data = prepare(cfg.data, seq_len=cfg.model.seq_len)
    batches = Batches(data, seq_len=cfg.model.seq_len, batch_size=16, seed=0, val_windows=16)
    batch = next(batches.val_batches(16))  # real text: the first 16 fixed validation windows
    rows = [r for init in INITS for placement in PLACEMENTS for seed in range(args.seeds)
            for r in grad_norms(placement, init, layers=args.layers, seed=seed, batch=batch, cfg=cfg, data=data)]
    print(write_outputs(pd.DataFrame(rows), args.out))


def write_outputs(norms: pd.DataFrame, out: Path) -> str:
    """From each seed's norms (grad_norms' rows): grad_at_init_seeds.csv (those rows, every digit), the table of
    seed means (.csv, .md) and the figure; returns the markdown. The means read the rows alone, so the committed
    seeds' file regenerates the table and figure without a model."""
    out_dir = out / "grad_at_init"
    write_text(out_dir / "grad_at_init_seeds.csv", norms.to_csv(index=False))
    seeds, layers = norms["seed"].nunique(), norms["layer"].max()
    table = norms[norms.weight.isin(["FFN W1", "FFN W2"])]
    table = table.groupby(["layer", "init", "placement", "weight"], sort=False)["grad_norm"].mean()
    table = table.map(lambda v: float(f"{v:.3g}")).unstack(["init", "placement", "weight"])
    table.columns = [f"{init} {placement}-LN {weight}" for init, placement, weight in table.columns]
    write_text(out_dir / "grad_at_init.csv", table.to_csv())
    note = (f"Gradient norm ||dL/dW||_F of the FFN weights at initialisation per layer (1 = nearest the input), "
            f"mean of {seeds} seeds; model=tiny with {layers} layers, LayerNorm, ReLU FFN, 16 validation "
            "windows of big.txt. mbexp: the trainer's GPT-2 init (std 0.02, tied head); xavier: Xiong et al.'s "
            "setting (Xavier-normal, unit-variance embeddings, untied head); DeepNorm keeps its Xavier gains under "
            "both.\n")
    markdown = note + "\n" + markdown_table(table) + "\n"
    write_text(out_dir / "grad_at_init.md", markdown)
    figure_path = out / "figures" / "grad_at_init.png"
    figure_path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(11, 4.2))
    for ax, init in zip(fig.subplots(1, 2), INITS):
        for placement, style in zip(PLACEMENTS, ("o-", "s--", "^-", "v-.", "d:")):
            values = table[f"{init} {placement}-LN FFN W2"]
            ax.plot(values.index, values.values, style, label=f"{placement}-LN")
        ax.set(title=f"FFN W2 gradient norm at init ({init} init)", xlabel="layer", ylabel="||grad||_F",
               yscale="log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(figure_path, dpi=100, metadata={"Software": None})
    return f"{markdown}wrote {out_dir}/grad_at_init_seeds.csv, grad_at_init.csv, .md and {figure_path}"


if __name__ == "__main__":
    main()
