"""The token cache on disk, torch-free: where a corpus's cache lies, its key, and reading it back checked
(docs/data.md). Built by mbexp.data; read also by `make table` (the n-gram baselines of a table's corpus)."""

import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import Tokenizer

from mbexp.corpus import SPLITS, documents, split_of

CACHE_FORMAT = 2  # bump when the cache layout or the tokenization changes


@dataclass
class TokenData:
    """A prepared corpus: the tokenizer and memory-mapped train/validation/test token arrays."""

    path: Path
    tokenizer: Tokenizer
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray  # empty when data.test_fraction is 0
    meta: dict
    cache_hit: bool

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


def cache_key(docs: Iterable[str], *, vocab_size: int, min_frequency: int, val_fraction: float,
              test_fraction: float) -> str:
    """A hash of the corpus content (streamed: one document at a time) and every setting that changes the tokens."""
    h = hashlib.blake2b(digest_size=16)
    for doc in docs:
        h.update(hashlib.blake2b(doc.encode(), digest_size=16).digest())
    settings = dict(
        vocab_size=vocab_size, min_frequency=min_frequency, val_fraction=val_fraction,
        test_fraction=test_fraction, format=CACHE_FORMAT, tokenizers=tokenizers.__version__,
    )
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()[:16]


def digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def load_cache(path: Path, *, warn: bool = True) -> TokenData | None:
    """The cache at `path` if meta.json is there and every file matches its size and digest; a damaged one
    is reported (unless warn=False: a second look, after the first has said so)."""
    meta_path = path / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        for split in SPLITS:
            f = path / f"{split}.bin"
            info = meta["files"][f"{split}.bin"]
            if f.stat().st_size != info["bytes"] or digest(f) != info["digest"]:
                raise ValueError(f"{f} does not match meta.json")
        if digest(path / "tokenizer.json") != meta["files"]["tokenizer.json"]["digest"]:
            raise ValueError("tokenizer.json does not match meta.json")
        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        arrays = {s: memmap(path / f"{s}.bin", meta["dtype"]) for s in SPLITS}
    except FileNotFoundError as exc:
        if warn and exc.filename != str(meta_path) and meta_path.exists():  # meta.json without a file it lists
            print(f"warning: token cache {path} is damaged ({exc.filename} is missing); rebuilding it", file=sys.stderr)
        return None
    except (ValueError, KeyError, TypeError, Exception) as exc:  # noqa: B014 - any damage means rebuild
        if warn and meta_path.exists():
            print(f"warning: token cache {path} is damaged ({exc}); rebuilding it", file=sys.stderr)
        return None
    return TokenData(path, tok, arrays["train"], arrays["val"], arrays["test"], meta, cache_hit=True)


def memmap(path: Path, dtype: str) -> np.ndarray:
    if path.stat().st_size == 0:  # numpy cannot map an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def located(data_cfg) -> tuple[Path, Iterable[str], dict]:
    """The cache folder of `data_cfg`, its corpus's documents and their count per split (one streaming pass)."""
    docs = documents(data_cfg.name, path=data_cfg.path, max_docs=data_cfg.max_docs)
    fractions = (data_cfg.val_fraction, data_cfg.test_fraction)
    counts = dict.fromkeys(SPLITS, 0)

    def counted() -> Iterator[str]:  # one streaming pass gives the content hash and the split's sizes
        for doc in docs:
            counts[split_of(doc, *fractions)] += 1
            yield doc

    key = cache_key(counted(), vocab_size=data_cfg.vocab_size, min_frequency=data_cfg.min_frequency,
                    val_fraction=data_cfg.val_fraction, test_fraction=data_cfg.test_fraction)
    return Path(data_cfg.cache_dir) / f"{data_cfg.name}-{key}", docs, counts


def cache_path(data_cfg) -> Path:
    """Where the token cache of `data_cfg` (a DataConfig) lies, built or not; reads the corpus (CorpusError)."""
    return located(data_cfg)[0]
