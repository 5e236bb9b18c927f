"""n-gram baselines on a token cache's splits (docs/data.md, "n-gram baselines"): the regime a table's losses sit in.

Counts on the training split; an add-k unigram, a bigram and a trigram interpolated with it, their weights chosen on
validation from a grid; each scored in nats/token on validation and test. Cached as ngram.json in the token cache.
"""

import json
from dataclasses import asdict, dataclass
from itertools import product
from pathlib import Path

import numpy as np

from mbexp.io import write_json

NGRAM_FILE = "ngram.json"
NGRAM_FORMAT = 1  # bump when a formula or the grid changes: a cached file of another format is recomputed
ADD_K = 1.0  # Laplace: a token never seen in training keeps mass
STEP = 0.05  # the interpolation weights' grid: multiples of STEP summing to 1, the unigram's at least STEP
ORDERS = ("unigram", "bigram", "trigram")


@dataclass(frozen=True)
class Counts:
    """Training-split counts: unigram counts, and (sorted codes, counts) of the bigrams and trigrams and of the
    contexts that precede a token."""

    vocab: int
    unigram: np.ndarray
    bigram: tuple[np.ndarray, np.ndarray]
    bigram_ctx: np.ndarray  # c(u) as a context: how often u is followed by a token
    trigram: tuple[np.ndarray, np.ndarray]
    trigram_ctx: tuple[np.ndarray, np.ndarray]  # c(t, u) as a context


def _codes(tokens: np.ndarray, order: int, vocab: int) -> np.ndarray:
    """Each n-gram of `tokens` (its last token at index order - 1 onwards) as one int64 code in base `vocab`."""
    t = tokens.astype(np.int64)
    n = t.size - order + 1
    code = np.zeros(max(n, 0), dtype=np.int64)
    for i in range(order):
        code = code * vocab + t[i : i + n]
    return code


def _unique(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.unique(codes, return_counts=True)


def _lookup(table: tuple[np.ndarray, np.ndarray], codes: np.ndarray) -> np.ndarray:
    """The count of each code (0 for a code never seen)."""
    keys, counts = table
    if not keys.size:
        return np.zeros(codes.shape, dtype=np.int64)
    at = np.minimum(np.searchsorted(keys, codes), keys.size - 1)
    return np.where(keys[at] == codes, counts[at], 0)


def count(train: np.ndarray, vocab: int) -> Counts:
    """Count the training split's unigrams, bigrams and trigrams (one stream: documents joined by end-of-text)."""
    train = np.asarray(train)
    return Counts(
        vocab=vocab,
        unigram=np.bincount(train.astype(np.int64), minlength=vocab),
        bigram=_unique(_codes(train, 2, vocab)),
        bigram_ctx=np.bincount(train[:-1].astype(np.int64), minlength=vocab),
        trigram=_unique(_codes(train, 3, vocab)),
        trigram_ctx=_unique(_codes(train[:-1], 2, vocab)),
    )


def components(counts: Counts, tokens: np.ndarray) -> np.ndarray:
    """(3, n) probabilities of tokens[2:]: the add-k unigram, and the bigram and trigram maximum-likelihood
    estimates, each the unigram's where its context was never seen in training."""
    tokens = np.asarray(tokens).astype(np.int64)
    v, total = counts.vocab, counts.unigram.sum()
    w = tokens[2:]
    p1 = (counts.unigram[w] + ADD_K) / (total + ADD_K * v)
    ctx2 = counts.bigram_ctx[tokens[1:-1]]
    p2 = np.where(ctx2 > 0, _lookup(counts.bigram, _codes(tokens[1:], 2, v)) / np.maximum(ctx2, 1), p1)
    ctx3 = _lookup(counts.trigram_ctx, _codes(tokens[:-1], 2, v))[: w.size]
    p3 = np.where(ctx3 > 0, _lookup(counts.trigram, _codes(tokens, 3, v)) / np.maximum(ctx3, 1), p1)
    return np.stack([p1, p2, p3])


def nats(parts: np.ndarray, weights) -> float:
    """Mean negative log-probability of the mixture Σ weights[i] · parts[i] (nats/token)."""
    return float(-np.log(np.tensordot(np.asarray(weights, dtype=float), parts[: len(weights)], axes=1)).mean())


def grid(order: int, step: float = STEP) -> list[tuple[float, ...]]:
    """Every weight vector of `order` entries, multiples of `step` summing to 1, the unigram's at least `step`."""
    k = round(1 / step)
    return [tuple(i * step for i in (k - sum(rest), *rest))
            for rest in product(range(k), repeat=order - 1) if sum(rest) < k]


def best_weights(parts: np.ndarray, order: int, step: float = STEP) -> tuple[float, ...]:
    """The grid's weights with the least nats on `parts` (ties: the first in grid order)."""
    options = grid(order, step)
    scores = [nats(parts, w) for w in options]
    return options[int(np.argmin(scores))]


@dataclass(frozen=True)
class Baselines:
    """Nats/token of each order on validation and test, and the interpolation weights (unigram first) chosen on
    validation."""

    val: dict
    test: dict
    weights: dict
    tokens: dict  # scored tokens per split

    def text(self, split: str = "test") -> str:
        """The three numbers of `split` in one phrase."""
        scores = getattr(self, split)
        return ", ".join(f"{order} {scores[order]:.2f}" for order in ORDERS)


def baselines(train: np.ndarray, val: np.ndarray, test: np.ndarray, vocab: int, step: float = STEP) -> Baselines:
    """Count on train, choose the bigram's and the trigram's weights on val, score val and test."""
    counts = count(train, vocab)
    parts = {"val": components(counts, val), "test": components(counts, test)}
    weights = {"unigram": (1.0,), "bigram": best_weights(parts["val"], 2, step),
               "trigram": best_weights(parts["val"], 3, step)}
    scores = {s: {o: nats(p, weights[o]) for o in ORDERS} for s, p in parts.items()}
    return Baselines(scores["val"], scores["test"], {o: [round(x, 6) for x in w] for o, w in weights.items()},
                     {s: int(p.shape[1]) for s, p in parts.items()})


def cached(data) -> Baselines:
    """The baselines of a TokenData, from its ngram.json when that matches this cache (its files' digests and
    NGRAM_FORMAT), else computed now and written atomically; a damaged file is recomputed."""
    path = Path(data.path) / NGRAM_FILE
    key = {"format": NGRAM_FORMAT, "files": data.meta["files"], "add_k": ADD_K, "step": STEP}
    try:
        stored = json.loads(path.read_text())
        if stored["key"] == json.loads(json.dumps(key)):
            return Baselines(**stored["baselines"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing, damaged or stale: recompute
    found = baselines(data.train, data.val, data.test, data.vocab_size)
    write_json(path, {"key": key, "baselines": asdict(found)})
    return found


def describe(found: Baselines) -> str:
    """Lines for `python -m mbexp.data`."""
    w = found.weights
    return "\n".join([
        f"n-gram test   {found.text('test')} nats/token",
        f"n-gram val    {found.text('val')} nats/token",
        f"n-gram λ      bigram {w['bigram']}, trigram {w['trigram']} (unigram first; chosen on validation)",
    ])
