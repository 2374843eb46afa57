"""How big an input is, cheaply: bytes and files per dataset, compression, and the number of records estimated
from the first bytes of a few files (never a full read: a 500M-record input is sized in well under a second).

The estimate counts line ends in the sample, so a record with quoted newlines counts as more than one; the
generated data has few (``tricky_quoting``), a user's export may have more: the estimate is a size for planning,
not the accounting (ingest counts every record exactly).
"""
from __future__ import annotations

import bz2
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

from jobs.core.errors import UserError

DATASETS = ("customers", "events")
SAMPLE_BYTES = 1 << 20       # of decompressed text per sampled file
SAMPLED_FILES = 3            # per dataset: the first, the middle and the last by name
_SUFFIXES = {".csv": "none", ".csv.gz": "gzip", ".csv.bz2": "bzip2"}


@dataclass(frozen=True)
class DatasetSize:
    files: int
    bytes: int                 # on disk
    compression: str           # none, gzip, bzip2 or mixed
    text_bytes: int            # estimated once decompressed
    bytes_per_record: float    # in the sample
    records: int               # estimated
    largest_file_bytes: int


@dataclass(frozen=True)
class InputSize:
    path: str
    datasets: dict[str, DatasetSize]

    @property
    def records(self) -> int:
        return sum(d.records for d in self.datasets.values())

    @property
    def customers(self) -> int:
        return self.datasets["customers"].records

    @property
    def bytes(self) -> int:
        return sum(d.bytes for d in self.datasets.values())

    @property
    def text_bytes(self) -> int:
        return sum(d.text_bytes for d in self.datasets.values())

    def to_json(self) -> dict:
        return {"path": self.path, "records": self.records, "bytes": self.bytes, "text_bytes": self.text_bytes,
                "datasets": {k: asdict(v) for k, v in self.datasets.items()}}


def compression_of(name: str) -> str | None:
    """none, gzip or bzip2 for a file ingest reads (the same suffixes, 'csv' in any case), else None."""
    lower = name.lower()
    for suffix, kind in sorted(_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if lower.endswith(suffix):
            return kind
    return None


def _sample(path: Path, kind: str) -> tuple[bytes, int]:
    """Up to SAMPLE_BYTES of the file's text and how many bytes of the file gave them."""
    with path.open("rb") as f:
        if kind == "none":
            data = f.read(SAMPLE_BYTES)
            return data, len(data)
        dec = zlib.decompressobj(16 + zlib.MAX_WBITS) if kind == "gzip" else bz2.BZ2Decompressor()
        out, used = bytearray(), 0
        while len(out) < SAMPLE_BYTES:
            chunk = f.read(64 << 10)
            if not chunk:
                break
            used += len(chunk)
            try:
                out += dec.decompress(chunk)
            except (OSError, zlib.error, EOFError) as e:
                raise UserError(f"{path}: cannot be read as {kind} ({e}): fix or remove the file") from e
            if getattr(dec, "eof", False):
                break
        return bytes(out), used


def size_dataset(folder: Path) -> DatasetSize:
    files = sorted(p for p in folder.iterdir() if p.is_file() and compression_of(p.name)) if folder.is_dir() else []
    if not files:
        raise UserError(f"no CSV files (*.csv, *.csv.gz, *.csv.bz2) in {folder}: pass --input a folder with "
                        f"customers/ and events/ of CSV files")
    kinds = {compression_of(p.name) for p in files}
    sizes = [p.stat().st_size for p in files]
    picks = sorted({0, len(files) // 2, len(files) - 1})[:SAMPLED_FILES]
    text = lines = raw = used = 0
    for i in picks:
        data, consumed = _sample(files[i], compression_of(files[i].name))
        raw, used = raw + len(data), used + consumed
        if consumed < sizes[i] or compression_of(files[i].name) != "none" and len(data) >= SAMPLE_BYTES:
            data = data[:data.rfind(b"\n") + 1]          # a cut sample: whole lines only
        elif data and not data.endswith(b"\n"):
            data += b"\n"                                 # a whole file without a last line end
        head = data.find(b"\n") + 1                       # the header is no record
        text += len(data) - head
        lines += max(data.count(b"\n") - 1, 0)
    ratio = raw / used if used else 1.0                  # text bytes per byte on disk
    per_record = text / lines if lines else float(max(text, 1))
    total_text = int(sum(sizes) * ratio)
    return DatasetSize(files=len(files), bytes=sum(sizes), compression=kinds.pop() if len(kinds) == 1 else "mixed",
                       text_bytes=total_text, bytes_per_record=round(per_record, 1),
                       records=int(round(total_text / per_record)) if lines else 0,
                       largest_file_bytes=max(sizes))


def size_input(path: str | Path) -> InputSize:
    """The input folder's size; a missing or empty folder is a UserError naming the fix."""
    root = Path(path)
    if not root.is_dir():
        raise UserError(f"input folder {root} does not exist: pass --input a folder with customers/ and events/ "
                        f"of CSV files (scripts/submit generate --out DIR makes one)")
    return InputSize(str(root), {d: size_dataset(root / d) for d in DATASETS})


def generated(customers: int, records_per_customer: float, bytes_per_record: float) -> InputSize:
    """The size of an input not generated yet (``scripts/pipeline --customers N``), from measured ratios."""
    events = int(customers * max(records_per_customer - 1, 0))
    text = int((customers + events) * bytes_per_record)
    share = customers / max(customers + events, 1)
    return InputSize(f"(to be generated: {customers:,} customers)", {
        "customers": DatasetSize(0, int(text * share), "none", int(text * share), bytes_per_record, customers, 0),
        "events": DatasetSize(0, text - int(text * share), "none", text - int(text * share), bytes_per_record, events, 0)})
