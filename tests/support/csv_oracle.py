"""An independent checker of generated CSV files: parses the raw bytes with Python's csv module and classifies
every record by rules written from jobs/lake/contract.py alone (it never calls the generator).

    counts = classify(out_dir, as_of="2026-06-30")
    counts["customers"]["defects"]["bad_number"], counts["events"]["quarantined"]["customer_rejected"], ...
"""
from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import re
from collections import Counter
from pathlib import Path

from jobs.lake import contract as C

NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
TIMESTAMP = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$")
EARLIEST = dt.date.fromisoformat(C.EARLIEST_DATE)


def read_records(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, records) of one file; bytes are mapped 1:1 to characters (Latin-1) so nothing is lost."""
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    assert raw.endswith(b"\n") and b"\r" not in raw, f"{path}: lines must end with a bare \\n"
    rows = list(csv.reader(io.StringIO(raw.decode("latin-1"), newline=""), strict=True))
    return rows[0], rows[1:]


def _norm(v: str) -> str:
    return re.sub(r"\s+", " ", v.strip().lower())


def _category_ok(col: str, v: str) -> bool:
    n = _norm(v)
    return n in {c.lower() for c in C.CATEGORIES[col]} or n in C.SPELLINGS.get(col, {})


def _date(v: str) -> dt.date | None:
    if not DATE.match(v):
        return None
    try:
        return dt.date.fromisoformat(v)
    except ValueError:
        return None


def _timestamp(v: str) -> dt.datetime | None:
    if not TIMESTAMP.match(v):
        return None
    try:
        return dt.datetime.strptime(v, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None


def _invalid_utf8(fields: list[str]) -> bool:
    try:
        "".join(fields).encode("latin-1").decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def _row_reason(dataset: str, rec: dict[str, str], as_of: dt.date) -> str | None:
    """The first failing check of CLEAN_CHECK_ORDER, or None for a valid row."""
    if _invalid_utf8(list(rec.values())):
        return "invalid_utf8"
    if any(rec[c] == "" for c in C.REQUIRED[dataset]):
        return "missing_required"
    number = "monthly_charges" if dataset == "customers" else "amount"
    if not NUMBER.match(rec[number]):
        return "bad_number"
    if dataset == "customers":
        dates = [_date(rec["signup_date"]), _date(rec["birth_date"]), _timestamp(rec["updated_at"])]
    else:
        dates = [_timestamp(rec["event_ts"])]
    if any(d is None for d in dates):
        return "bad_date"
    cats = C.CUSTOMER_CATEGORICALS if dataset == "customers" else C.EVENT_CATEGORICALS
    if any(rec[c] != "" and not _category_ok(c, rec[c]) for c in cats):
        return "unknown_category"
    lo, hi = C.MONTHLY_CHARGES_RANGE if dataset == "customers" else C.AMOUNT_RANGE
    if not lo <= float(rec[number]) <= hi:
        return "out_of_range"
    if dataset == "customers":
        signup, birth = dates[0], dates[1]
        age = signup.year - birth.year - ((signup.month, signup.day) < (birth.month, birth.day))
        if not EARLIEST <= signup <= as_of or not C.AGE_AT_SIGNUP_RANGE[0] <= age <= C.AGE_AT_SIGNUP_RANGE[1]:
            return "impossible_date"
    else:
        if not EARLIEST <= dates[0].date() <= as_of:
            return "impossible_date"
    return None


def _kept_kind(dataset: str, rec: dict[str, str]) -> str:
    cats = C.CUSTOMER_CATEGORICALS if dataset == "customers" else C.EVENT_CATEGORICALS
    if any(rec[c] not in C.CATEGORIES[c] for c in cats):
        return "messy_category"
    text = rec["address" if dataset == "customers" else "note"]
    if any(ch in text for ch in ',"\r\n'):
        return "tricky_quoting"
    return "none"


def classify_dataset(files: list[Path], dataset: str, as_of: dt.date, customer_ids: set[str] | None = None,
                     rejected_ids: set[str] | None = None) -> dict:
    columns = C.DATASETS[dataset]
    kinds: list[str] = []
    per_file: dict[str, int] = {}
    valid: list[tuple[int, dict[str, str], tuple[str, ...]]] = []
    ids: list[str] = []
    for path in files:
        header, records = read_records(path)
        assert tuple(header) == columns, f"{path}: header {header}"
        per_file[path.name] = len(records)
        for fields in records:
            i = len(kinds)
            ids.append(fields[columns.index("customer_id")] if fields else "")
            if len(fields) != len(columns):
                kinds.append("wrong_field_count")
                continue
            rec = dict(zip(columns, fields))
            reason = _row_reason(dataset, rec, as_of)
            kinds.append(reason or _kept_kind(dataset, rec))
            if reason is None:
                valid.append((i, rec, tuple(fields)))
    seen: set[tuple[str, ...]] = set()
    survivors = []
    for i, rec, key in valid:
        if key in seen:
            kinds[i] = "exact_duplicate"
        else:
            seen.add(key)
            survivors.append((i, rec))
    if dataset == "customers":
        newest: dict[str, tuple[str, int]] = {}
        for i, rec in survivors:
            cand = (rec["updated_at"], i)
            newest[rec["customer_id"]] = max(newest.get(rec["customer_id"], cand), cand)
        for i, rec in survivors:
            if newest[rec["customer_id"]][1] != i:
                kinds[i] = "conflicting_duplicate"
    cascade = 0
    if dataset == "events":
        for i, rec in survivors:
            if rec["customer_id"] not in customer_ids:
                kinds[i] = "unknown_customer"
            elif rec["customer_id"] in rejected_ids:
                assert kinds[i] == "none", f"event of a rejected customer carries {kinds[i]}"
                cascade += 1
    counts = Counter(kinds)
    defects = {k: counts.get(k, 0) for k in C.DEFECT_KINDS[dataset]}
    quarantined = {C.DEFECT_FATE[k][1]: defects[k] for k in C.DEFECT_KINDS[dataset]
                   if C.DEFECT_FATE[k][0] == C.QUARANTINE}
    if dataset == "events":
        quarantined[C.CASCADE_REASON] = cascade
    records = len(kinds)
    surviving_ids = {ids[i] for i, k in enumerate(kinds)
                     if C.DEFECT_FATE.get(k, (C.KEPT,))[0] != C.QUARANTINE}
    return {"records": records, "per_file": per_file, "defects": defects, "quarantined": quarantined,
            "duplicates_removed": defects["exact_duplicate"],
            "kept": records - sum(quarantined.values()) - defects["exact_duplicate"],
            "ids": set(ids), "rejected_ids": set(ids) - surviving_ids}


def classify(out: str | Path, as_of: str) -> dict:
    out, as_of_d = Path(out), dt.date.fromisoformat(as_of)
    customers = classify_dataset(sorted((out / "customers").iterdir()), "customers", as_of_d)
    events = classify_dataset(sorted((out / "events").iterdir()), "events", as_of_d,
                              customers["ids"], customers["rejected_ids"])
    return {"customers": customers, "events": events}
