"""The claims file (`<results_dir>/claims.yaml`) read defensively: a regular UTF-8 file of YAML without aliases,
each refusal one ClaimsError naming the file (and the claim near the fault); and the value checks its entries share.
"""

import math
import re
from contextlib import suppress
from pathlib import Path

from mbexp.claims import ClaimsError
from mbexp.io import is_int, is_number, read_regular, read_yaml

CLAIMS_FILE = "claims.yaml"


def claims_path(results_dir) -> Path | None:
    """<results_dir>/claims.yaml, or None when nothing is there; a folder, a FIFO or a broken link there is returned,
    so that reading it is refused rather than passed over."""
    path = Path(results_dir, CLAIMS_FILE)
    return path if path.exists() or path.is_symlink() else None


def finite_number(value) -> bool:
    return is_number(value) and math.isfinite(value)


def int_list(value) -> bool:
    return isinstance(value, list) and all(is_int(v) for v in value)


SEED_LIST = "a non-empty list of distinct integers in [0, 2**32)"  # what seed_list accepts, in words


def seed_list(value) -> bool:
    """A non-empty list of distinct seeds that mbexp.train accepts (integers in [0, 2**32))."""
    from mbexp.config.rules import SEEDS

    return int_list(value) and bool(value) and min(value) >= 0 and max(value) < SEEDS and \
        len(set(value)) == len(value)


def _near(raw: bytes, offset: int) -> str:
    """' (claim ID)' for the last claim id declared before `offset` in the file's bytes, else ''."""
    ids = re.findall(rb"\bid:\s*([^\s,}]+)", raw[:offset])
    return f" (claim {ids[-1].decode('latin-1')})" if ids else ""


def parse_yaml(text: str, where: str):
    """`text` read as yaml.safe_load reads it, but with its aliases refused (ClaimsError): nested aliases expand
    exponentially (a "billion laughs" file) and would hang whatever walks the result. A syntax error is a
    ClaimsError naming `where`, the line and the claim declared last before it."""
    import yaml

    fast = getattr(yaml, "CSafeLoader", None)  # libyaml: a tenth of the time; the pure reader below words errors better
    if fast is not None:
        with suppress(yaml.YAMLError):
            if not any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=fast)):
                return read_yaml(text)

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                alias = self.peek_event()
                raise ClaimsError(f"{where}: line {alias.start_mark.line + 1} uses the YAML alias *{alias.anchor}; "
                                  "aliases are refused here: write each value out")
            return super().compose_node(parent, index)

    try:
        return yaml.load(text, Loader=NoAliases)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = len("\n".join(text.splitlines()[:mark.line + 1]).encode()) if mark else 0
        line = f" on line {mark.line + 1}{_near(text.encode(), at)}" if mark else ""
        raise ClaimsError(f"{where}: not valid YAML{line}: {getattr(err, 'problem', err)}") from None


def read_file(path: Path):
    """The claims file's YAML; ClaimsError names the file (and the claim near a bad byte or a syntax error)."""
    try:
        raw = read_regular(path)  # a FIFO in its place is refused, never waited on
    except OSError as err:
        raise ClaimsError(f"claims file {path}: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ClaimsError(f"claims file {path}: byte 0x{raw[err.start]:02x} on line {line}{_near(raw, err.start)} "
                          "is not UTF-8; save the file as UTF-8") from None
    return parse_yaml(text, f"claims file {path}")
