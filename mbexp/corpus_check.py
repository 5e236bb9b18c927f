"""Whether a corpus can feed a run, asked twice: before any job from its text (the pre-flight, where the corpus is
cheap to read), and by data.prepare from its token cache. One wording for both."""

import functools
import os

from mbexp.corpus import SPLITS, bigtxt_path, documents, split_of, text_files


def tokens_needed(seq_len: int) -> int:
    """The fewest tokens a split needs: one window of seq_len inputs, its shifted targets, one start to spare."""
    return seq_len + 2


def needed_splits(test_fraction: float) -> list[str]:
    """The splits a run reads: train and val, and test when data.test_fraction holds one out."""
    return [s for s in SPLITS if s != "test" or test_fraction]


def too_short(name: str, split: str, holds: str, seq_len: int) -> str:
    """The error for a split that `holds` too few tokens for one window of seq_len."""
    return (f"data={name}: the {'validation' if split == 'val' else split} split {holds}, too few for "
            f"model.seq_len={seq_len} (needs at least {tokens_needed(seq_len)}); add text or shorten model.seq_len")


def too_few_documents(name: str, counts: dict, val_fraction: float, test_fraction: float) -> str:
    """The error for splits left without a document: `counts` maps each split to its documents."""
    return (f"data={name}: {sum(counts.values())} documents are too few for data.val_fraction={val_fraction} and "
            f"data.test_fraction={test_fraction} (" + " / ".join(f"{counts[s]} {s}" for s in SPLITS)
            + " documents); add text or change the fractions")


def corpus_problem(d, seq_len: int) -> str | None:
    """What data.prepare would refuse for the corpus `d` (a DataConfig): a split with no document, or one too short
    for seq_len (a split holds at most one token per byte, plus one per document). Read only for big.txt and local
    text, and only when data.max_docs is set or the smallest split's share of the corpus is near that length."""
    need = tokens_needed(seq_len)
    if d.name not in ("bigtxt", "text"):
        return None  # a hub corpus: its size is known once it is loaded
    size = _size(d.name, d.path)
    needed = needed_splits(d.test_fraction)
    share = min((1 - d.val_fraction - d.test_fraction, d.val_fraction, d.test_fraction)[:len(needed)])
    if d.max_docs is None and share * size > 4 * need:
        return None
    splits = _splits(d.name, d.path, d.max_docs, d.val_fraction, d.test_fraction, size)
    if any(not splits[s][0] for s in needed):
        return too_few_documents(d.name, {s: n for s, (n, _) in splits.items()}, d.val_fraction, d.test_fraction)
    for split in needed:
        docs, text = splits[split]
        if docs + text < need:
            return too_short(d.name, split, f"holds at most {docs + text} tokens ({text} bytes in {docs} documents)",
                             seq_len)
    return None


def _size(name: str, path: str | None) -> int:
    return bigtxt_path().stat().st_size if name == "bigtxt" else sum(os.path.getsize(f) for f in text_files(path))


@functools.cache
def _splits(name: str, path: str | None, max_docs: int | None, val: float, test: float,
            size: int) -> dict[str, tuple[int, int]]:
    """(documents, text bytes) of each split of a corpus of `size` bytes, split as its token cache will be."""
    out = dict.fromkeys(SPLITS, (0, 0))
    for doc in _documents(name, path, max_docs):
        split = split_of(doc, val, test)
        out[split] = (out[split][0] + 1, out[split][1] + len(doc.encode()))
    return out


def _documents(name: str, path: str | None, max_docs: int | None):
    """corpus.documents without datasets' progress bar (a pre-flight prints one line at most)."""
    if name != "text":
        return documents(name, path=path, max_docs=max_docs)
    from datasets.utils import logging as datasets_logging

    shown = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()
    try:
        return documents(name, path=path, max_docs=max_docs)
    finally:
        if shown:  # the jobs this process may run show theirs
            datasets_logging.enable_progress_bar()
