"""generate: synthetic telecom customers + events as CSV files, with injected defects and the truth behind them.

    scripts/submit generate --out DIR [--customers N] [--seed S] [--as-of YYYY-MM-DD] [--churn-rate R]
        [--defect-rate R] [--rate KIND=R ...] [--rows-per-file N] [--compression none|gzip] [--partitions P]
        [--overwrite]        (scripts/submit generate --help: the defaults)

Writes ``DIR/customers/customers-NNNNN.csv``, ``DIR/events/events-NNNNN.csv`` (``.csv.gz`` with gzip),
``DIR/_truth/`` (Parquet: customer_id, churn_probability, churned, rejected) and ``DIR/manifest.json``.
docs/data.md describes the columns, the latent churn model, the defects and the manifest.

The rows come from the generator's Spark data source (jvm/churn/generate, read like ``spark.range``):
every random draw is a hash of (seed, salt, row key), so the bytes written depend only on the arguments, never
on partitioning or time.
Each output file is one partition holding a contiguous block of customers, produced in file order: no
shuffle, no sort, and every count in the manifest is taken while the files are written.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.core.params import AS_OF
from jobs.core.stage import Param, Stage, StageRecord
from jobs.lake import contract as C
from jobs.lake.session import project_source, session_conf, together
from jobs.ml import evaluate

KINDS_ALL = tuple(dict.fromkeys(C.DEFECT_KINDS["customers"] + C.DEFECT_KINDS["events"]))
# Kinds that change the row itself (one row, one kind); the others add an extra row next to a clean one.
ADDED_ROW_KINDS = ("exact_duplicate", "conflicting_duplicate", "unknown_customer")
# Kinds whose row clean quarantines, leaving its customer with no row at all when it is the only one.
REJECTING_KINDS = tuple(k for k, (fate, _) in C.DEFECT_FATE.items()
                        if fate == C.QUARANTINE and k not in ADDED_ROW_KINDS)
# Defect kinds as the data source knows them, small integers (0: clean); its per-file counts come in this order.
KIND_CODE = {"none": 0, **{k: i + 1 for i, k in enumerate(KINDS_ALL)}}
MAX_CUSTOMERS = 4_999_999_999   # ids of unknown customers (customers + n) must fit C + 10 digits


@dataclass(frozen=True)
class Params:
    customers: int
    seed: int
    as_of: dt.date
    churn_rate: float
    defect_rate: float
    rates: dict
    rows_per_file: int
    compression: str
    partitions: int | None

    @property
    def cutoff(self) -> dt.date:
        return self.as_of - dt.timedelta(days=C.LABEL_WINDOW_DAYS)


def kind_rate(text: str) -> tuple[str, float]:
    kind, sep, value = text.partition("=")
    try:
        if sep:
            return kind, float(value)
    except ValueError:
        pass
    raise ValueError("not KIND=RATE: write e.g. --rate bad_number=0.002")


PARAMS = (
    Param("data", "output folder (must not hold a manifest.json unless --overwrite)", flag="--out"),
    Param("customers", "customers to generate (~11 events each)", default=100_000, parse=int),
    Param("seed", "seed of every random draw", default=7, parse=int),
    AS_OF,
    Param("churn_rate", "share of customers who churn", default=0.2, parse=float),
    Param("defect_rate", "share of rows carrying a defect", default=0.01, parse=float),
    Param("rates", "one defect kind's rate (default: --defect-rate split equally)", default=(), parse=kind_rate,
          flag="--rate", many=True),
    Param("rows_per_file", "records per CSV file at most", default=1_000_000, parse=int),
    Param("compression", "none or gzip", default="none"),
    Param("partitions", "Spark partitions (the output does not depend on it)", default=None, parse=int),
    Param("overwrite", "replace an earlier output in --out", default=False, switch=True),
)


def run(spark: SparkSession, data: str, customers: int, seed: int, as_of: str, churn_rate: float,
        defect_rate: float, rates, rows_per_file: int, compression: str, partitions: int | None,
        overwrite: bool) -> StageRecord:
    """Generates the data set into ``data``; the manifest (also written to ``data/manifest.json``) is the record's
    ``extra["manifest"]``."""
    p = validate(customers, seed, as_of, churn_rate, defect_rate, dict(rates), rows_per_file, compression,
                 partitions)
    fs = _Fs(spark, data)
    if fs.exists("manifest.json") and not overwrite:
        raise UserError(f"{data} already holds a generated data set (manifest.json): choose another --out, "
                        "or pass --overwrite to replace it")
    for old in ("manifest.json", "customers", "events", "_truth", "_tmp"):
        fs.delete(old)
    with session_conf(spark, NO_RAPIDS_SQL):
        manifest = _generate(spark, fs, p)
    fs.write_text("manifest.json", json.dumps(manifest, indent=2) + "\n")
    return StageRecord(STAGE.name, counts={ds: v["records"] for ds, v in manifest["datasets"].items()},
                       extra={"data": data, "manifest": manifest})


def _check(args: dict) -> None:
    validate(args["customers"], args["seed"], args["as_of"], args["churn_rate"], args["defect_rate"],
             dict(args["rates"]), args["rows_per_file"], args["compression"], args["partitions"])


STAGE = Stage("generate", "synthetic churn CSV data with injected defects, and the truth behind them", run, PARAMS,
              describe=lambda r: f"customers {r.counts['customers']:,}, events {r.counts['events']:,}", check=_check)


# Under a RAPIDS profile the job runs with the plugin's SQL off: the plugin (25.04) fails while planning a query
# that holds ``observe`` (the defect counts): "IllegalStateException: Found an aggregation function in an unexpected
# context Some(CollectMetricsExec ...)", in explain-only mode as well, so `--profile gpu` could not generate. The
# job's rows come from a JVM data source the plugin cannot read on the GPU anyway. Without the plugin the setting
# does nothing.
NO_RAPIDS_SQL = {"spark.rapids.sql.enabled": "false"}


def _generate(spark: SparkSession, fs: "_Fs", p: Params) -> dict:
    b0, sizes = calibrate(spark, p)
    n_cust_files = _files_for(p.customers * (1 + p.rates["exact_duplicate"] + p.rates["conflicting_duplicate"]),
                              p.rows_per_file, p.customers)
    n_event_files = _files_for((sizes["events"] + sizes["expected_churners"])
                               * (1 + p.rates["exact_duplicate"] + p.rates["unknown_customer"]), p.rows_per_file,
                               p.customers)
    # Three independent writes, each one Spark job with one task per output file. They are submitted together
    # (events first, the largest) so that a job with fewer files than cores leaves no core idle; the churn
    # summary follows the truth it reads in the same thread, beside the events write.
    def truth_and_summary() -> dict:
        counts = _write_truth(spark, fs, p, b0)
        return churn_summary(spark.read.parquet(fs.path("_truth")), p, counts)

    writes = {
        "events": lambda: _write_dataset(fs, "events", event_rows(spark, p, b0, n_event_files), n_event_files, p),
        "customers": lambda: _write_dataset(fs, "customers", customer_rows(spark, p, b0, n_cust_files),
                                            n_cust_files, p),
        "churn": truth_and_summary,
    }
    done = together(writes)
    fs.delete("_tmp")
    churn = done["churn"]
    return {
        "generator": {"seed": p.seed, "as_of": p.as_of.isoformat(), "cutoff": p.cutoff.isoformat(),
                      "customers": p.customers, "churn_rate": p.churn_rate, "defect_rate": p.defect_rate,
                      "rates": {k: p.rates[k] for k in KINDS_ALL}, "rows_per_file": p.rows_per_file,
                      "compression": p.compression},
        "datasets": {name: done[name] for name in ("customers", "events")},
        "churn": churn,
    }


def validate(customers, seed, as_of, churn_rate, defect_rate, rates, rows_per_file, compression,
             partitions) -> Params:
    """Every argument checked before anything is written; each mistake names its fix."""
    if not isinstance(customers, int) or customers <= 0 or customers > MAX_CUSTOMERS:
        raise UserError(f"--customers {customers!r}: need at least 1 customer (a whole number up to "
                        f"{MAX_CUSTOMERS:,})")
    if not isinstance(seed, int):
        raise UserError(f"--seed {seed!r} must be a whole number, e.g. --seed 7")
    try:
        as_of_d = dt.date.fromisoformat(str(as_of))
    except ValueError:
        raise UserError(f"--as-of {as_of!r} is not a date: write yyyy-MM-dd") from None
    if not dt.date(2006, 1, 2) <= as_of_d <= dt.date(2999, 12, 31):
        raise UserError(f"--as-of {as_of} must lie in 2006-01-02..2999-12-31 (signups go back 6 years and "
                        f"may not precede {C.EARLIEST_DATE})")
    if not 0.0 < churn_rate < 1.0:
        raise UserError(f"--churn-rate {churn_rate} must be above 0 and below 1, e.g. --churn-rate 0.2")
    if not 0.0 <= defect_rate < 1.0:
        raise UserError(f"--defect-rate {defect_rate} must be in [0, 1), e.g. --defect-rate 0.01")
    unknown = sorted(set(rates) - set(KINDS_ALL))
    if unknown:
        raise UserError(f"--rate: unknown defect kind(s) {unknown}; kinds: {', '.join(KINDS_ALL)}")
    full = {k: defect_rate / len(C.DEFECT_KINDS["customers"]) for k in KINDS_ALL}
    full.update({k: float(v) for k, v in rates.items()})
    for dataset, kinds in C.DEFECT_KINDS.items():
        total = sum(full[k] for k in kinds)
        if any(not 0.0 <= full[k] < 1.0 for k in kinds) or total >= 1.0:
            raise UserError(f"--rate: each defect rate must be in [0, 1) and their sum for {dataset} "
                            f"({total:.4f}) below 1: lower --defect-rate or the --rate values")
    if not isinstance(rows_per_file, int) or rows_per_file < 1:
        raise UserError(f"--rows-per-file {rows_per_file!r} must be a whole number >= 1, e.g. 1000000")
    if compression not in ("none", "gzip"):
        raise UserError(f"--compression {compression!r}: choose none or gzip")
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise UserError(f"--partitions {partitions!r} must be a whole number >= 1 (or left out)")
    return Params(customers, seed, as_of_d, float(churn_rate), float(defect_rate), full, rows_per_file,
                  compression, partitions)


# =========================================================================================================
# The data source: the model's arithmetic runs in the JVM (jvm/churn/generate), where the rows are read
# =========================================================================================================
# Why not Spark expressions, as this job first was: at 1M customers the expression version took 7x the CPU of a
# bare CSV writer. Its customer model is ~1,000 expression nodes; fused by whole-stage code generation its methods
# outgrow what HotSpot compiles (8,000 bytes of bytecode) and run interpreted, unfused every operator copies its
# whole row, and every query, task and file paid for analysing and generating that code again (docs/data.md).
# The same arithmetic as plain Java in a data source (as spark.range is one) runs compiled, with no row copies.
SOURCE = "churn.generate.Source"

STREETS = ("Oak", "Maple", "Cedar", "Pine", "Elm", "Birch", "Willow", "Lake", "Hill", "Park", "Main",
           "Church", "Mill", "River", "Spring", "Ridge", "Sunset", "Meadow", "Forest", "Station")
STREET_TYPES = ("St", "Ave", "Rd", "Ln", "Dr", "Ct", "Way", "Blvd", "Pl")
SUPPORT_NOTES = ("billing question", "slow connection", "router reset", "outage report", "plan question",
                 "password reset", "installation visit", "roaming question")
UNKNOWN_VALUES = {"gender": "Other", "region": "Northeast", "contract_type": "Weekly",
                  "payment_method": "Bitcoin", "internet_service": "Satellite", "event_type": "refund",
                  "channel": "fax"}
UNKNOWN_YES_NO = "Maybe"
# The known other spelling the messy_category defect uses for each canonical value (the first in the contract).
_SPELLING_OF = {col: {canon: next((s for s, c in sp.items() if c == canon), None) for canon in C.CATEGORIES[col]}
                for col, sp in C.SPELLINGS.items()}


def _epoch_day(d: dt.date) -> int:
    return (d - dt.date(1970, 1, 1)).days


def _spec(p: Params, mode: str, b0: float | None = None, files: int = 0, count: int = 0,
          partitions: int = 0) -> str:
    """The source's one option: the arguments, and the data contract's vocabularies (jobs/lake/contract.py stays
    the one place they are defined)."""
    return json.dumps({
        "mode": mode, "seed": p.seed, "customers": p.customers, "files": files, "count": count,
        "partitions": partitions, "b0": b0, "cutoff_day": _epoch_day(p.cutoff), "as_of_day": _epoch_day(p.as_of),
        "label_window": C.LABEL_WINDOW_DAYS,
        "rates": {d: [[k, p.rates[k]] for k in kinds] for d, kinds in C.DEFECT_KINDS.items()},
        "codes": KIND_CODE, "rejecting": REJECTING_KINDS,
        "categories": C.CATEGORIES, "columns": C.DATASETS, "required": C.REQUIRED,
        "customer_cats": C.CUSTOMER_CATEGORICALS, "event_cats": C.EVENT_CATEGORICALS,
        "unknown": {**UNKNOWN_VALUES, "_yes_no": UNKNOWN_YES_NO},
        "spelling": {f"{col}={canon}": s for col, m in _SPELLING_OF.items() for canon, s in m.items() if s},
        "streets": STREETS, "street_types": STREET_TYPES, "support_notes": SUPPORT_NOTES,
    })


def _source(spark: SparkSession, spec: str) -> DataFrame:
    return project_source(spark.read.format(SOURCE).option("spec", spec), SOURCE, "the generator's data source")


def _partitions(spark: SparkSession, p: Params, count: int) -> int:
    """Tasks for the customer-level passes (calibration, truth): about 500,000 customers a task, in whole rounds
    of the cores; never fewer tasks than cores (on a fresh cluster defaultParallelism is 2 until executors
    register). The output does not depend on it."""
    cores = spark.sparkContext.defaultParallelism
    return min(p.partitions or cores * max(1, math.ceil(count / 500_000 / cores)), count)


# Customers the calibration looks at: the first ones (every customer's draws are independent of the others', so
# they are a random sample). Enough for the realised rate to land within 0.1 point of the configured one.
CALIBRATION_CUSTOMERS = 100_000


def calibrate(spark: SparkSession, p: Params) -> tuple[float, dict]:
    """b0 such that the mean of sigmoid(b0 + x) over the first min(N, CALIBRATION_CUSTOMERS) customers equals
    the churn rate.

    One aggregation: those customers grouped by x rounded to 1e-3 (a few thousand groups come back), then
    bisection on the driver. Also returns the number of pre-cutoff events, scaled from them to all N
    customers (it sizes the events files)."""
    import numpy as np

    sample = min(p.customers, CALIBRATION_CUSTOMERS)
    latent = _source(spark, _spec(p, "latent", count=sample, partitions=_partitions(spark, p, sample)))
    rows = (latent.groupBy(F.round("logit_x", 3).alias("x"))
            .agg(F.count(F.lit(1)).alias("w"), F.sum("n_pre_cutoff").alias("e")).collect())  # aggregated: one row per rounded logit
    x = np.array([r["x"] for r in rows], dtype=float)
    w = np.array([r["w"] for r in rows], dtype=float)
    mean = lambda b: float(np.sum(w / (1.0 + np.exp(-(b + x)))) / np.sum(w))  # noqa: E731
    lo, hi = -30.0, 30.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(mid) < p.churn_rate else (lo, mid)
    b0 = round((lo + hi) / 2, 10)
    events = sum(r["e"] for r in rows) * p.customers // sample
    return b0, {"events": int(events), "expected_churners": p.churn_rate * p.customers}


def truth_frame(spark: SparkSession, customers: int, **given) -> DataFrame:
    """The customer-level truth exactly as run() writes it to _truth (no CSV, no events): customer_id,
    churn_probability, churned, rejected. ``given``: other parameters of the stage (defaults as the stage's)."""
    a = {**{p.name: p.default for p in PARAMS if not p.required}, **given}
    p = validate(customers, a["seed"], a["as_of"], a["churn_rate"], a["defect_rate"], dict(a["rates"]),
                 a["rows_per_file"], a["compression"], a["partitions"])
    b0, _ = calibrate(spark, p)
    return _truth(spark, p, b0)


TRUTH_COLUMNS = ("customer_id", "churn_probability", "churned", "rejected")


def _truth(spark: SparkSession, p: Params, b0: float) -> DataFrame:
    return _source(spark, _spec(p, "truth", b0, count=p.customers,
                                partitions=_partitions(spark, p, p.customers))).select(*TRUTH_COLUMNS)


def _write_truth(spark: SparkSession, fs: "_Fs", p: Params, b0: float) -> dict:
    """_truth/ in customer order (part files in partition order hold ascending customer numbers); returns the
    churners' and gold customers' counts, taken while it is written."""
    obs = Observation("generate-truth")
    (_truth(spark, p, b0).observe(obs, F.count(F.lit(1)).alias("customers"),
                                  F.count(F.when(F.col("churned"), 1)).alias("churned"),
                                  F.count(F.when(~F.col("rejected"), 1)).alias("gold"))
     .write.mode("overwrite").parquet(fs.path("_truth")))
    fs.remove_side_files("_truth")
    return obs.get


def churn_summary(truth: DataFrame, p: Params, counts: dict) -> dict:
    """Realised churn rate, customers reaching gold (from ``counts``: customers, churned, gold), and the oracle
    ROC AUC: the AUC the true churn probabilities reach on gold customers, computed as the model's is
    (``evaluate.roc_auc``, distributed)."""
    gold = ~F.col("rejected")
    auc = evaluate.roc_auc(truth.where(gold).select(F.col("churned").cast("double").alias(evaluate.LABEL),
                                                    F.col("churn_probability").alias(evaluate.PROBABILITY)))
    return {"configured_rate": p.churn_rate, "realised_rate": round(counts["churned"] / counts["customers"], 6),
            "oracle_auc": round(auc, 6), "label_window_days": C.LABEL_WINDOW_DAYS,
            "customers_in_gold": int(counts["gold"])}


def customer_rows(spark: SparkSession, p: Params, b0: float, n_files: int) -> DataFrame:
    """Customer CSV records in file order, 64 customers' records a row: lines, records, file_counts (see the
    source's documentation, jvm/churn/generate/Source.java). Partition i is file i."""
    return _source(spark, _spec(p, "customers", b0, files=n_files))


def event_rows(spark: SparkSession, p: Params, b0: float, n_files: int) -> DataFrame:
    """Event CSV records in file order (customer number, event index, copy), 64 customers' records a row: lines,
    records, file_counts (as ``customer_rows``). Partition i is file i."""
    return _source(spark, _spec(p, "events", b0, files=n_files))


# =========================================================================================================
# Writing: one task per file, rows already in file order, header on each file's first record
# =========================================================================================================
def _files_for(records: float, rows_per_file: int, customers: int) -> int:
    """About rows_per_file records per file; never more files than customers (each block holds one)."""
    return max(1, min(customers, math.ceil(records / rows_per_file)))


def _write_dataset(fs: "_Fs", dataset: str, rows: DataFrame, n_files: int, p: Params) -> dict:
    """Writes ``rows`` (partition i = file i, in order) as text, renames each part file to its final name, and
    returns the dataset's manifest entry. The counts are taken while the files are written (no second pass):
    the source counts each file's records per defect kind as it makes them (``file_counts`` on the file's last
    row), and Spark sums the records of every row it writes (``DataFrame.observe``), which must add up to them."""
    obs = Observation(f"generate-{dataset}")
    tagged = rows.select("*", F.spark_partition_id().alias("_part"))
    metrics = [F.sum("records").alias("records"),
               F.concat_ws(",", F.collect_list(F.when(F.col("file_counts").isNotNull(), F.concat_ws(
                   " ", F.col("_part").cast("string"), F.col("file_counts"))))).alias("files")]
    tmp = f"_tmp/{dataset}"
    # The text writer writes each string's bytes as they are (the invalid_utf8 defect's lone 0xE9 included),
    # each followed by "\n"; a record's quoted newline is written as is.
    (tagged.observe(obs, *metrics).select("lines")
     .write.mode("overwrite").option("compression", p.compression).option("maxRecordsPerFile", 0)
     .text(fs.path(tmp)))
    m = obs.get
    records = int(m["records"] or 0)
    per_file = {}   # file index -> [records, cascade, records of kind code 1, 2, ...]
    misplaced = []
    for entry in filter(None, m["files"].split(",")):
        part, index, *counts = map(int, entry.split())
        per_file[index] = counts
        if part != index:
            misplaced.append(index)
    if misplaced or sorted(per_file) != list(range(n_files)) or sum(c[0] for c in per_file.values()) != records:
        raise RuntimeError(f"{dataset}: rows not laid out one file per partition (files from other partitions "
                           f"{misplaced}, files {sorted(per_file)}, {records} records written, "
                           f"{sum(c[0] for c in per_file.values())} made)")
    ends = {i: c[0] for i, c in per_file.items()}
    parts = {}
    for name in fs.list(tmp):
        if name.startswith("part-"):
            parts.setdefault(int(name.split("-")[1]), []).append(name)
    if sorted(parts) != list(range(n_files)) or any(len(v) != 1 for v in parts.values()):
        raise RuntimeError(f"expected one part file per file index 0..{n_files - 1} for {dataset}, found {parts}")
    ext = ".csv.gz" if p.compression == "gzip" else ".csv"
    fs.mkdirs(dataset)
    files = {}
    for i in range(n_files):
        name = f"{dataset}-{i:05d}{ext}"
        fs.rename(f"{tmp}/{parts[i][0]}", f"{dataset}/{name}")
        files[name] = {"records": ends[i], "bytes": fs.size(f"{dataset}/{name}")}
    fs.delete(tmp)

    defects = {k: sum(c[1 + KIND_CODE[k]] for c in per_file.values()) for k in C.DEFECT_KINDS[dataset]}
    quarantined = {C.DEFECT_FATE[k][1]: defects[k] for k in C.DEFECT_KINDS[dataset]
                   if C.DEFECT_FATE[k][0] == C.QUARANTINE}
    if dataset == "events":
        quarantined[C.CASCADE_REASON] = sum(c[1] for c in per_file.values())
    dups = defects["exact_duplicate"]
    return {"files": files, "records": records, "defects": defects,
            "expected": {"quarantined": quarantined, "duplicates_removed": dups,
                         "kept": records - sum(quarantined.values()) - dups}}


class _Fs:
    """Paths under the output folder through Hadoop's FileSystem (local, HDFS, S3 alike)."""

    def __init__(self, spark: SparkSession, root: str):
        jvm = spark._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.root = root.rstrip("/")
        fs = self._Path(self.root).getFileSystem(spark._jsc.hadoopConfiguration())
        # The local file system keeps a hidden .crc beside each file (and moves it along on rename): work on
        # the raw one underneath, so the output holds only the data files.
        if fs.getUri().getScheme() == "file":
            fs = spark._jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration()).getRaw()
        self.fs = fs

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def _p(self, rel: str):
        return self._Path(self.path(rel))

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self._p(rel)))

    def delete(self, rel: str) -> None:
        if self.exists(rel):
            self.fs.delete(self._p(rel), True)

    def mkdirs(self, rel: str) -> None:
        self.fs.mkdirs(self._p(rel))

    def list(self, rel: str) -> list[str]:
        return sorted(s.getPath().getName() for s in self.fs.listStatus(self._p(rel)))

    def size(self, rel: str) -> int:
        return int(self.fs.getFileStatus(self._p(rel)).getLen())

    def rename(self, src: str, dst: str) -> None:
        if not self.fs.rename(self._p(src), self._p(dst)):
            raise RuntimeError(f"could not rename {src} to {dst} under {self.root}")

    def remove_side_files(self, rel: str) -> None:
        """_SUCCESS markers and .crc checksums Spark's writers leave behind."""
        for name in self.list(rel):
            if name == "_SUCCESS" or name.endswith(".crc"):
                self.delete(f"{rel}/{name}")

    def write_text(self, rel: str, text: str) -> None:
        stream = self.fs.create(self._p(rel), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
