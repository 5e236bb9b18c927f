"""What a table's losses mean to a reader: the n-gram baselines of its corpus (mbexp.ngram) and its scale line."""

import dataclasses
import json
from functools import cache
from pathlib import Path

import pandas as pd

from mbexp.analysis.table import Table
from mbexp.config import DataConfig
from mbexp.corpus import CorpusError

DATA_KEYS = tuple(f"data.{f.name}" for f in dataclasses.fields(DataConfig) if f.name in
                  ("name", "path", "max_docs", "vocab_size", "min_frequency", "val_fraction", "test_fraction"))


def data_config(identity: dict, cache_dir: str) -> DataConfig:
    """The DataConfig a run's identity records (the defaults for keys it lacks), its cache under `cache_dir`."""
    given = {k.removeprefix("data."): identity[k] for k in DATA_KEYS if k in identity}
    return DataConfig(**given, cache_dir=cache_dir)


BASELINES = "baselines"  # <results>/baselines/<token cache>.json: the n-gram baselines tables quote


def _baselines(cfg: DataConfig, results_dir):
    """The n-gram baselines of `cfg`'s token cache, or the reason there are none (a string): computed from the cache
    where it is built (and kept under <results>/baselines/, so a checkout without the cache tables the same), else
    read from there."""
    return _baselines_of(tuple(dataclasses.asdict(cfg).items()), str(results_dir))


@cache  # one corpus read per data config, however many tables share it
def _baselines_of(items: tuple, results_dir: str):
    from mbexp import ngram
    from mbexp.io import write_json
    from mbexp.token_cache import cache_path, load_cache

    cfg = DataConfig(**dict(items))
    try:
        path = cache_path(cfg)
    except CorpusError as exc:
        return f"the corpus is not available here ({exc})"
    kept = Path(results_dir, BASELINES, f"{path.name}.json")
    data = load_cache(path, warn=False)
    if data is not None:
        found = ngram.cached(data)
        if _kept(kept) != found:  # rewritten only when it changes: `make table --only` touches nothing else
            write_json(kept, dataclasses.asdict(found))
        return found
    return _kept(kept) or f"token cache {path} not built here (python -m mbexp.data data={cfg.name} builds it)"


def _kept(path: Path):
    """The n-gram baselines kept at `path`, or None (missing or unreadable)."""
    from mbexp import ngram

    try:
        return ngram.Baselines(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def regime_text(found, *, corpus: str, vocab: int, split: str) -> str:
    """One sentence: the n-gram baselines on the table's split, or why they are missing."""
    where = f"{corpus}, vocab {vocab:,}"
    if isinstance(found, str):
        return f"n-gram baselines ({where}): not available: {found}."
    w = found.weights
    scores = found.test if split == "test" else found.val
    return (f"n-gram baselines ({where}, {split} split, nats/token): unigram {scores['unigram']:.2f} (add-one), "
            f"interpolated bigram {scores['bigram']:.2f} (λ {'/'.join(f'{x:g}' for x in w['bigram'])}), "
            f"interpolated trigram {scores['trigram']:.2f} (λ {'/'.join(f'{x:g}' for x in w['trigram'])}, "
            "unigram first, chosen on validation).")


def _span(values: pd.Series, spec) -> str:
    low, high = spec(values.min()), spec(values.max())
    return low if low == high else f"{low}–{high}"


def _si(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k" if x >= 1e3 else f"{x:.0f}"


def scale_line(rows: pd.DataFrame, corpus: str) -> str:
    """Non-embedding parameters, tokens seen (at the reference column), tokens per parameter and the corpus, as
    one phrase; a range where rows differ."""
    rows = rows.dropna(subset=["params_non_embedding", "tokens_seen"])
    if rows.empty:
        return f"corpus {corpus}"
    ratio = rows["tokens_seen"] / rows["params_non_embedding"]
    return (f"{_span(rows['params_non_embedding'], _si)} non-emb. params, {_span(rows['tokens_seen'], _si)} tokens "
            f"seen, {_span(ratio, lambda x: f'{x:.2g}')} tokens/param, corpus {corpus}")


def annotate(tables: dict[str, Table], results_dir, cache_dir: str = DataConfig.cache_dir) -> None:
    """Set each table's `regime`: its corpus's n-gram baselines and its scale line."""
    for table in tables.values():
        identity = next((i for i in table.runs["identity"] if isinstance(i, dict)), {})  # none: an old summary
        cfg = data_config(identity, cache_dir)
        corpus = f"{cfg.name}" + (f" ({cfg.path})" if cfg.path else "")
        found = _baselines(cfg, results_dir)
        table.regime = (f"{regime_text(found, corpus=corpus, vocab=cfg.vocab_size, split=table.split)} "
                        f"Scale: {scale_line(table.rows, corpus)}.")
