"""The hub corpora through the real `datasets.load_dataset`, pointed at local folders in the hub repos' layout
(parquet files per split; wikitext's named configs in README.md), so the hub path runs without a network."""

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mbexp import corpus
from mbexp.config import DataConfig, compose_config, to_object
from mbexp.corpus import HubDocuments, load_hub, split_documents
from mbexp.data import EOT, prepare

REPO = Path(__file__).resolve().parent.parent
WORDS = "the a fox cat ran sat saw big small red blue happy sad tree ball home mom dad friend day".split()
WIKITEXT_CONFIGS = """---
configs:
- config_name: wikitext-103-raw-v1
  data_files:
  - split: train
    path: wikitext-103-raw-v1/train-*
- config_name: wikitext-2-raw-v1
  data_files:
  - split: test
    path: wikitext-2-raw-v1/test-*
  - split: train
    path: wikitext-2-raw-v1/train-*
  - split: validation
    path: wikitext-2-raw-v1/validation-*
---
"""


def story(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))).capitalize() + "."


def write_split(path: Path, texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": texts}), path)


@pytest.fixture
def hf_tmp_cache(tmp_path, monkeypatch):
    """datasets' Arrow cache for these loads lives under tmp_path, not in the user's home."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")


@pytest.fixture
def tinystories(tmp_path, monkeypatch, hf_tmp_cache) -> dict[str, list[str]]:
    """roneneldan/TinyStories' layout (data/<split>-*.parquet, a text column), data=tinystories pointed at it."""
    rng = random.Random(0)
    texts = {"train": [story(rng) for _ in range(600)], "validation": [story(rng) for _ in range(60)]}
    texts["train"][5] = "   "  # blank rows exist in the real data; they are not documents
    texts["validation"][0] = "  Padded story.\n"
    for split, rows in texts.items():
        write_split(tmp_path / "TinyStories" / "data" / f"{split}-00000-of-00001.parquet", rows)
    monkeypatch.setitem(corpus.HUB, "tinystories", (str(tmp_path / "TinyStories"), None))
    monkeypatch.setattr(corpus, "HUB_BATCH", 64)  # several batches per split
    return texts


@pytest.fixture
def wikitext(tmp_path, monkeypatch, hf_tmp_cache) -> Path:
    """Salesforce/wikitext's layout: one folder per config, its configs named in README.md."""
    root = tmp_path / "wikitext"
    lines = {
        "train": ["", " = Alpha = \n", "", " Alpha is first . \n", " = = History = = \n", " It began . \n",
                  " = Beta = \n", " Beta follows . \n"],
        "validation": [" = Gamma = \n", " Gamma validates . \n", ""],
        "test": ["", " = Delta = \n", " Delta tests . \n"],
    }
    for split, rows in lines.items():
        write_split(root / "wikitext-2-raw-v1" / f"{split}-00000-of-00001.parquet", rows)
    write_split(root / "wikitext-103-raw-v1" / "train-00000-of-00001.parquet", [" = Other = \n", " Not read . \n"])
    (root / "README.md").write_text(WIKITEXT_CONFIGS)  # two configs: the load must name its own
    monkeypatch.setitem(corpus.HUB, "wikitext2", (str(root), "wikitext-2-raw-v1"))
    return root


def test_tinystories_pools_every_split_in_order_and_streams(tinystories):
    docs = load_hub("tinystories")
    assert isinstance(docs, HubDocuments)  # a stream over the Arrow files, not a list
    expected = [t.strip() for split in ("train", "validation") for t in tinystories[split] if t.strip()]
    assert list(docs) == expected and len(expected) == 659
    assert list(docs) == expected  # re-iterable: every pass reads the same documents in the same order
    assert "Padded story." in expected
    assert list(load_hub("tinystories", max_docs=100)) == expected[:100]


def test_documents_cuts_a_hub_corpus_at_max_docs(tinystories):
    # the token cache reads documents(): data.max_docs cuts a hub stream as it cuts big.txt and a user's files
    expected = [t.strip() for split in ("train", "validation") for t in tinystories[split] if t.strip()]
    assert list(corpus.documents("tinystories", max_docs=100)) == expected[:100]
    assert list(corpus.documents("tinystories")) == expected


def test_wikitext_lines_join_into_articles_across_pooled_splits(wikitext):
    assert list(load_hub("wikitext2")) == [
        "= Delta = \n Delta tests .",  # splits pooled in sorted order: test, train, validation
        "= Alpha = \n Alpha is first . \n = = History = = \n It began .",  # a sub-heading stays inside
        "= Beta = \n Beta follows .",
        "= Gamma = \n Gamma validates .",
    ]


def test_a_hub_dataset_without_a_text_column_is_named(tmp_path, monkeypatch, hf_tmp_cache):
    (tmp_path / "Stories" / "data").mkdir(parents=True)
    pq.write_table(pa.table({"story": ["A story."]}), tmp_path / "Stories" / "data" / "train-00000-of-00001.parquet")
    monkeypatch.setitem(corpus.HUB, "tinystories", (str(tmp_path / "Stories"), None))
    with pytest.raises(corpus.CorpusError) as error:
        load_hub("tinystories")
    assert str(error.value) == f"data=tinystories: {tmp_path / 'Stories'} has no 'text' column"


def test_a_hub_load_into_a_log_file_draws_no_progress_bars(tinystories):
    from datasets import are_progress_bars_disabled, enable_progress_bars

    enable_progress_bars()
    assert not sys.stderr.isatty()  # pytest captures it: as a log file would
    load_hub("tinystories")
    assert are_progress_bars_disabled()


def test_wikitext_articles_is_a_generator_of_whole_articles():
    lines = iter([" = A = \n", " a . \n", " = = Sub = = \n", " = B = \n", " b . \n"])
    articles = corpus._wikitext_articles(lines)
    assert next(articles) == "= A = \n a . \n = = Sub = ="
    assert list(articles) == ["= B = \n b ."]


def test_hub_corpus_prepares_a_token_cache(tinystories, tmp_path):
    cfg = DataConfig(name="tinystories", vocab_size=300, val_fraction=0.1, test_fraction=0.1,
                     cache_dir=str(tmp_path / "cache"))
    data = prepare(cfg, seq_len=16)
    docs = [t.strip() for split in ("train", "validation") for t in tinystories[split] if t.strip()]
    train, val, test = split_documents(docs, 0.1, 0.1)
    assert data.meta["corpus"] == "tinystories" and not data.cache_hit
    assert data.meta["documents"] == {"train": len(train), "val": len(val), "test": len(test)}
    assert data.meta["bytes"]["val"] == sum(len(d.encode()) for d in val)
    tokens = np.asarray(data.test)
    ends = np.flatnonzero(tokens == data.tokenizer.token_to_id(EOT))
    assert data.tokenizer.decode(tokens[ends[0] + 1 : ends[1]].tolist()) == test[1]
    again = prepare(cfg, seq_len=16)
    assert again.cache_hit and again.path == data.path


def test_gpu_presets_default_to_tinystories():
    for experiment in ("shazeer_ffn", "warmup_sensitivity"):
        cfg = to_object(compose_config([f"+experiment={experiment}"]))
        assert (cfg.data.name, cfg.data.vocab_size) == ("tinystories", 8192)
        tokens = cfg.train.steps * cfg.train.batch_size * cfg.model.seq_len
        assert cfg.data.max_docs is None or cfg.data.max_docs * 150 > tokens  # ~200 tokens a story: less than one pass


def test_gpu_preset_offline_stops_with_one_line_naming_bigtxt(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env |= {"HF_HOME": str(tmp_path / "hf_home"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-m", "mbexp.train", "+experiment=shazeer_ffn", "logger=none",
                           f"results_dir={tmp_path}/results", f"data.cache_dir={tmp_path}/cache"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    hub = [line for line in proc.stderr.splitlines() if "data=tinystories" in line]
    assert len(hub) == 1 and "unreachable" in hub[0] and "data=bigtxt" in hub[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results" / "runs").exists()



class Probe:
    """A stand-in for the hub probe: counts its calls and gives `answer`."""

    def __init__(self) -> None:
        self.calls, self.answer = 0, False

    def __call__(self) -> bool:
        self.calls += 1
        return self.answer


@pytest.fixture
def hub_probe(monkeypatch, hf_tmp_cache) -> Probe:
    """The hub probe replaced by a Probe, no offline variable set, and datasets itself offline (so a load of a
    missing dataset fails at once): what load_hub decides before it loads is what these tests read."""
    import datasets
    import huggingface_hub.constants

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setitem(corpus.HUB, "tinystories", ("nobody/missing-corpus", None))
    probe = Probe()
    monkeypatch.setattr(corpus, "hub_reachable", probe)
    return probe


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_an_offline_variable_skips_the_probe_and_the_error_names_bigtxt(hub_probe, monkeypatch, variable):
    monkeypatch.setenv(variable, "1")
    with pytest.raises(corpus.CorpusError) as error:
        load_hub("tinystories")
    assert hub_probe.calls == 0
    assert str(error.value) == (
        "data=tinystories: the Hugging Face hub is unreachable and nobody/missing-corpus is not cached; offline, "
        "use data=bigtxt (embedded) or data=text data.path=<your files>")


def test_an_unreachable_hub_turns_the_run_offline_before_datasets_loads(hub_probe, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")  # set, but not to 1: not offline
    with pytest.raises(corpus.CorpusError, match="hub is unreachable and nobody/missing-corpus is not cached"):
        load_hub("tinystories")
    assert hub_probe.calls == 1 and os.environ["HF_HUB_OFFLINE"] == "1"


def test_a_reachable_hubs_failed_load_says_it_failed_not_that_it_is_offline(hub_probe):
    hub_probe.answer = True
    with pytest.raises(corpus.CorpusError, match=r"^data=tinystories: loading nobody/missing-corpus failed: "):
        load_hub("tinystories")
    assert hub_probe.calls == 1 and "HF_HUB_OFFLINE" not in os.environ


def test_a_local_copy_is_loaded_without_probing_the_hub(tinystories, hub_probe, tmp_path, monkeypatch):
    monkeypatch.setitem(corpus.HUB, "tinystories", (str(tmp_path / "TinyStories"), None))
    assert len(list(load_hub("tinystories"))) == 659
    assert hub_probe.calls == 0 and "HF_HUB_OFFLINE" not in os.environ


def test_the_probe_asks_hf_endpoint_else_huggingface_co_and_gives_up_after_5_s(monkeypatch):
    asked = []
    monkeypatch.setattr(corpus, "reachable", lambda url, timeout: asked.append((url, timeout)) or False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert corpus.hub_reachable() is False
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    corpus.hub_reachable()
    assert asked == [("https://huggingface.co", 5.0), ("http://127.0.0.1:9", 5.0)]
