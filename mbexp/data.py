"""Tokenizer, token cache and batches: from a corpus to (B, T) tensors of token ids.

`python -m mbexp.data [overrides]` prepares a corpus and prints its statistics and n-gram baselines. The cache's
key and its checked reading are mbexp.token_cache (torch-free); the corpora's text is mbexp.corpus.
"""

import sys
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm

from mbexp.corpus import SPLITS, CorpusError, split_of
from mbexp.corpus_check import needed_splits, tokens_needed, too_few_documents, too_short
from mbexp.io import atomic_write, file_lock, write_json
from mbexp.token_cache import TokenData, cache_key, digest, load_cache, located  # noqa: F401 - cache_key re-exported

EOT = "<|endoftext|>"


def train_tokenizer(docs: Iterable[str], *, vocab_size: int, min_frequency: int,
                    length: int | None = None) -> Tokenizer:
    """Byte-level BPE trained on `docs`: every byte is in the alphabet, so decoding is exact."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer, length=length)
    return tok


def _batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def encode(tok: Tokenizer, docs: Iterable[str], out: Path, *, desc: str, total: int | None = None,
           chunk: int = 2048) -> dict:
    """Write the token ids of `docs`, each followed by the end-of-text token, to `out` (atomically), one chunk
    of documents at a time; returns the documents, text bytes and tokens written."""
    eot = tok.token_to_id(EOT)
    dtype = np.uint16 if tok.get_vocab_size() < 2**16 else np.uint32
    written = {"documents": 0, "bytes": 0, "tokens": 0, "dtype": np.dtype(dtype).name}

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f, tqdm(total=total, desc=f"tokenizing {desc}", unit="doc", file=sys.stderr,
                                         leave=False, disable=None) as bar:
            for batch in _batches(docs, chunk):
                ids = np.concatenate([np.array(enc.ids + [eot], dtype=dtype) for enc in tok.encode_batch(batch)])
                f.write(ids.tobytes())  # ndarray.tofile's OSError on a full disk carries no errno
                written["documents"] += len(batch)
                written["bytes"] += sum(len(d.encode()) for d in batch)
                written["tokens"] += int(ids.size)
                bar.update(len(batch))

    atomic_write(out, write)
    return written


class SplitDocuments:
    """The documents of one split of a re-iterable corpus, in corpus order; each iteration reads the corpus anew."""

    def __init__(self, docs: Iterable[str], split: str, fractions: tuple[float, float]):
        self.docs, self.split, self.fractions = docs, split, fractions

    def __iter__(self) -> Iterator[str]:
        return (doc for doc in self.docs if split_of(doc, *self.fractions) == self.split)


def build_cache(path: Path, name: str, docs: Iterable[str], *, fractions: tuple[float, float], counts: dict,
                vocab_size: int, min_frequency: int) -> TokenData:
    """Train the tokenizer on the training split, encode every split to disk, write everything atomically.
    `docs` is re-iterable and read once per step, never held whole; `counts` are its documents per split."""
    print(f"building token cache {path} ({' / '.join(f'{counts[s]} {s}' for s in SPLITS)} documents)", file=sys.stderr)
    splits = {s: SplitDocuments(docs, s, fractions) for s in SPLITS}
    tok = train_tokenizer(splits["train"], vocab_size=vocab_size, min_frequency=min_frequency, length=counts["train"])
    path.mkdir(parents=True, exist_ok=True)
    (path / "meta.json").unlink(missing_ok=True)  # meta.json is written last: it marks a complete cache
    for orphan in path.glob(".*.tmp"):  # a build killed mid-write (SIGKILL) leaves its temporary file; we hold the lock
        orphan.unlink(missing_ok=True)
    atomic_write(path / "tokenizer.json", lambda tmp: tok.save(tmp))
    written = {s: encode(tok, splits[s], path / f"{s}.bin", desc=s, total=counts[s]) for s in SPLITS}
    meta = {
        "corpus": name,
        "vocab_size": tok.get_vocab_size(),
        "dtype": written["train"]["dtype"],
        **{stat: {s: written[s][stat] for s in SPLITS} for stat in ("documents", "bytes", "tokens")},
        "files": {
            f: {"bytes": (path / f).stat().st_size, "digest": digest(path / f)}
            for f in (*(f"{s}.bin" for s in SPLITS), "tokenizer.json")
        },
    }
    write_json(path / "meta.json", meta)
    data = load_cache(path)
    data.cache_hit = False
    return data


def prepare(data_cfg, *, seq_len: int) -> TokenData:
    """The token data for `data_cfg` (a DataConfig), from the cache or built now."""
    path, docs, counts = located(data_cfg)
    fractions = (data_cfg.val_fraction, data_cfg.test_fraction)
    if not all(counts[s] for s in needed_splits(data_cfg.test_fraction)):
        raise CorpusError(too_few_documents(data_cfg.name, counts, data_cfg.val_fraction, data_cfg.test_fraction))
    data = load_cache(path)
    if data is None:
        with file_lock(path.with_suffix(".lock")):  # two processes never build one cache at once
            data = load_cache(path, warn=False) or build_cache(
                path, data_cfg.name, docs, fractions=fractions, counts=counts,
                vocab_size=data_cfg.vocab_size, min_frequency=data_cfg.min_frequency,
            )
    for split in needed_splits(data_cfg.test_fraction):
        if (size := getattr(data, split).size) < tokens_needed(seq_len):
            raise CorpusError(too_short(data_cfg.name, split, f"has {size} tokens", seq_len))
    return data


def token_bytes(tok: Tokenizer) -> np.ndarray:
    """The number of text bytes each token id stands for (0 for the end-of-text token)."""
    byte_of = {ch: b for b, ch in enumerate(_bytes_to_unicode())}
    lengths = np.zeros(tok.get_vocab_size(), dtype=np.int64)
    for token, idx in tok.get_vocab().items():
        lengths[idx] = 0 if token == EOT else sum(1 for ch in token if ch in byte_of)
    return lengths


def _bytes_to_unicode() -> list[str]:
    """The byte-level alphabet: the printable character that stands for each byte 0..255."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


class Batches:
    """Seeded random training windows and fixed sets of validation and test windows.

    The training generator's state is the data position: saving and restoring it resumes
    the exact stream of batches. Under DDP every rank draws the global batch and keeps
    its own slice, so N ranks see exactly what one process would.
    """

    def __init__(self, data: TokenData, *, seq_len: int, batch_size: int, seed: int, val_windows: int,
                 rank: int = 0, world_size: int = 1):
        if batch_size % world_size:
            raise ValueError(f"train.batch_size={batch_size} is not divisible by the {world_size} DDP ranks")
        self.data, self.seq_len, self.batch_size = data, seq_len, batch_size
        self.rank, self.world_size = rank, world_size
        self.generator = torch.Generator().manual_seed(seed)
        self.starts = {split: self._eval_starts(getattr(data, split).size, val_windows) for split in ("val", "test")}
        self.bytes_per_token = token_bytes(data.tokenizer)

    def _eval_starts(self, size: int, n_windows: int) -> np.ndarray:
        """Up to n_windows starts evenly spread over a split: identical for every seed (none if it is empty)."""
        if size < tokens_needed(self.seq_len):
            return np.zeros(0, dtype=np.int64)
        n = min(n_windows, (size - 1) // self.seq_len)
        stride = (size - 1 - self.seq_len) // max(n - 1, 1)
        return np.arange(n) * stride

    def _windows(self, tokens: np.ndarray, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        idx = starts[:, None] + np.arange(self.seq_len + 1)  # (B, T + 1)
        chunk = torch.from_numpy(tokens[idx].astype(np.int64))
        return chunk[:, :-1], chunk[:, 1:]

    def next_train(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's (x, y) of the next global batch: (B / world, T) each."""
        high = self.data.train.size - self.seq_len - 1
        starts = torch.randint(0, high, (self.batch_size,), generator=self.generator).numpy()
        per_rank = self.batch_size // self.world_size
        return self._windows(self.data.train, starts[self.rank * per_rank : (self.rank + 1) * per_rank])

    def val_batches(self, batch_size: int, split: str = "val", whole: bool = False):
        """The fixed windows of the validation (or test) split in order, as (x, y) batches; `whole`: every window
        of seq_len + 1 tokens at a stride of seq_len, so each token after the first is predicted once."""
        tokens, starts = getattr(self.data, split), self.starts[split]
        if whole:
            starts = np.arange((tokens.size - 1) // self.seq_len, dtype=np.int64) * self.seq_len
        for i in range(0, len(starts), batch_size):
            yield self._windows(tokens, starts[i : i + batch_size])

    def state(self) -> torch.Tensor:
        return self.generator.get_state()

    def load_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)


def describe(data: TokenData) -> str:
    m = data.meta
    return "\n".join([
        f"corpus       {m['corpus']}",
        f"documents    {m['documents']['train']:,} train / {m['documents']['val']:,} validation / "
        f"{m['documents']['test']:,} test",
        f"bytes        {m['bytes']['train']:,} train / {m['bytes']['val']:,} validation / {m['bytes']['test']:,} test",
        f"tokens       {m['tokens']['train']:,} train / {m['tokens']['val']:,} validation / "
        f"{m['tokens']['test']:,} test ({m['dtype']})",
        f"vocabulary   {m['vocab_size']:,}",
        f"cache        {data.path} ({'cache hit' if data.cache_hit else 'built'})",
    ])


def main(argv: list[str] | None = None) -> int:
    from mbexp.config import ConfigError, compose_config, to_object

    try:
        cfg = to_object(compose_config(sys.argv[1:] if argv is None else argv))
        data = prepare(cfg.data, seq_len=cfg.model.seq_len)
    except (ConfigError, CorpusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from mbexp import ngram

    print(describe(data))
    print(ngram.describe(ngram.cached(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
