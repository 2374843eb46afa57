"""generate: synthetic telecom customers + events as CSV files, with injected defects and the truth behind them.

    scripts/submit --profile cpu generate --out DIR [--customers 100000] [--seed 7] [--as-of 2026-06-30]
        [--churn-rate 0.2] [--defect-rate 0.01] [--rate KIND=R ...] [--rows-per-file 1000000]
        [--compression none|gzip] [--partitions P] [--overwrite]

Writes ``DIR/customers/customers-NNNNN.csv``, ``DIR/events/events-NNNNN.csv`` (``.csv.gz`` with gzip),
``DIR/_truth/`` (Parquet: customer_id, churn_probability, churned, rejected) and ``DIR/manifest.json``.
docs/data.md describes the columns, the latent churn model, the defects and the manifest.

Everything is computed by built-in Spark expressions on ``spark.range``: every random draw is a hash of
(seed, salt, row key), so the bytes written depend only on the arguments, never on partitioning or time.
Each output file is one partition holding a contiguous block of customers, produced in file order: no
shuffle, no sort, and every count in the manifest is taken while the files are written.
"""
from __future__ import annotations

import argparse
import calendar
import datetime as dt
import json
import math
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from jobs import contract as C
from jobs import evaluate
from jobs.errors import UserError
from jobs.session import get_spark, session_conf, together

KINDS_ALL = tuple(dict.fromkeys(C.DEFECT_KINDS["customers"] + C.DEFECT_KINDS["events"]))
# Kinds that change the row itself (one row, one kind); the others add an extra row next to a clean one.
ADDED_ROW_KINDS = ("exact_duplicate", "conflicting_duplicate", "unknown_customer")
# Kinds whose row clean quarantines, leaving its customer with no row at all when it is the only one.
REJECTING_KINDS = tuple(k for k, (fate, _) in C.DEFECT_FATE.items()
                        if fate == C.QUARANTINE and k not in ADDED_ROW_KINDS)
# Defect kinds inside the plans are small integers (0: clean): between operators an int is copied and compared for
# nothing, where a kind's name costs a byte copy at every operator and a byte comparison at every test.
KIND_CODE = {"none": 0, **{k: i + 1 for i, k in enumerate(KINDS_ALL)}}
MAX_CUSTOMERS = 4_999_999_999   # ids of unknown customers (customers + n) must fit C + 10 digits
EVENT_SLOTS = 100               # event_id = customer number * 100 + event index (< 72 events per customer)

# Latent churn model (docs/data.md, "Latent churn model"); b0 is calibrated to --churn-rate.
COEF = {
    "contract_month_to_month": 1.2, "contract_two_year": -0.9, "tenure_months": -0.035,
    "monthly_charges_z": 0.6, "support_calls_90d": 0.45, "late_payments_180d": 0.6,
    "fiber_optic": 0.4, "electronic_check": 0.35, "tech_support_yes": -0.4, "senior_65": 0.25,
}

STREETS = ("Oak", "Maple", "Cedar", "Pine", "Elm", "Birch", "Willow", "Lake", "Hill", "Park", "Main",
           "Church", "Mill", "River", "Spring", "Ridge", "Sunset", "Meadow", "Forest", "Station")
STREET_TYPES = ("St", "Ave", "Rd", "Ln", "Dr", "Ct", "Way", "Blvd", "Pl")
SUPPORT_NOTES = ("billing question", "slow connection", "router reset", "outage report", "plan question",
                 "password reset", "installation visit", "roaming question")
UNKNOWN_VALUES = {"gender": "Other", "region": "Northeast", "contract_type": "Weekly",
                  "payment_method": "Bitcoin", "internet_service": "Satellite", "event_type": "refund",
                  "channel": "fax"}
UNKNOWN_YES_NO = "Maybe"


@dataclass(frozen=True)
class Params:
    customers: int
    seed: int
    as_of: dt.date
    churn_rate: float
    defect_rate: float
    rates: dict = field(default_factory=dict)
    rows_per_file: int = 1_000_000
    compression: str = "none"
    partitions: int | None = None

    @property
    def cutoff(self) -> dt.date:
        return self.as_of - dt.timedelta(days=C.LABEL_WINDOW_DAYS)


# =========================================================================================================
# Entry points
# =========================================================================================================
def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="generate", description="Synthetic churn CSV data with injected defects.")
    p.add_argument("--out", required=True, help="output folder (must not hold a manifest.json unless --overwrite)")
    p.add_argument("--customers", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--as-of", default="2026-06-30", help="yyyy-MM-dd; the label window ends here")
    p.add_argument("--churn-rate", type=float, default=0.2)
    p.add_argument("--defect-rate", type=float, default=0.01, help="share of rows carrying a defect")
    p.add_argument("--rate", action="append", default=[], metavar="KIND=RATE",
                   help="override one defect kind's rate (default: --defect-rate split equally)")
    p.add_argument("--rows-per-file", type=int, default=1_000_000)
    p.add_argument("--compression", default="none", help="none or gzip")
    p.add_argument("--partitions", type=int, default=None, help="Spark partitions (output does not depend on it)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier output in --out")
    a = p.parse_args(argv)
    rates = {}
    for kv in a.rate:
        kind, sep, value = kv.partition("=")
        try:
            rates[kind] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise UserError(f"--rate {kv!r} is not KIND=RATE: write e.g. --rate bad_number=0.002")
    params = validate(a.customers, a.seed, a.as_of, a.churn_rate, a.defect_rate, rates,
                      a.rows_per_file, a.compression, a.partitions)
    spark = get_spark("generate")
    manifest = run(spark, a.out, params.customers, params.seed, a.as_of, params.churn_rate, params.defect_rate,
                   params.rows_per_file, params.compression, params.partitions, rates=rates, overwrite=a.overwrite)
    summary = {d: {"files": len(v["files"]), "records": v["records"]} for d, v in manifest["datasets"].items()}
    print(json.dumps({"out": a.out, "datasets": summary, "churn": manifest["churn"]}))
    return 0


def run(spark: SparkSession, out: str, customers: int, seed: int = 7, as_of: str = "2026-06-30",
        churn_rate: float = 0.2, defect_rate: float = 0.01, rows_per_file: int = 1_000_000,
        compression: str = "none", partitions: int | None = None, *, rates: dict | None = None,
        overwrite: bool = False) -> dict:
    """Generate the data set into ``out``; returns the manifest (also written to ``out/manifest.json``)."""
    p = validate(customers, seed, as_of, churn_rate, defect_rate, rates or {}, rows_per_file, compression,
                 partitions)
    fs = _Fs(spark, out)
    if fs.exists("manifest.json") and not overwrite:
        raise UserError(f"{out} already holds a generated data set (manifest.json): choose another --out, "
                        "or pass --overwrite to replace it")
    for old in ("manifest.json", "customers", "events", "_truth", "_tmp"):
        fs.delete(old)
    with session_conf(spark, {**NO_WHOLE_STAGE_FUSION, **NO_RAPIDS_SQL}):
        manifest = _generate(spark, fs, p)
    fs.write_text("manifest.json", json.dumps(manifest, indent=2) + "\n")
    return manifest


# HotSpot never JIT-compiles a method over 8,000 bytes of bytecode. Whole-stage code generation fuses this job's
# wide expressions into such methods, which then run in the bytecode interpreter: 5x slower than Spark's
# per-operator generated code, whose methods are split small (measured: 21 s vs 4 s for the calibration pass
# over 1M customers; a lower spark.sql.codegen.hugeMethodLimit gets the same, after compiling everything twice).
# So this job runs without whole-stage fusion; the caller's setting is restored afterwards.
NO_WHOLE_STAGE_FUSION = {"spark.sql.codegen.wholeStage": "false"}
# Under a RAPIDS profile the job runs with the plugin's SQL off: the plugin (25.04) fails while planning a query
# that holds ``observe`` (the defect counts): "IllegalStateException: Found an aggregation function in an unexpected
# context Some(CollectMetricsExec ...)", in explain-only mode as well, so `--profile gpu` could not generate. The
# job is string formatting, which the CPU does anyway. Without the plugin the setting does nothing.
NO_RAPIDS_SQL = {"spark.rapids.sql.enabled": "false"}


def _generate(spark: SparkSession, fs: "_Fs", p: Params) -> dict:
    b0, sizes = calibrate(spark, p)
    n_cust_files = _files_for(p.customers * (1 + p.rates["exact_duplicate"] + p.rates["conflicting_duplicate"]),
                              p.rows_per_file, p.customers)
    n_event_files = _files_for((sizes["events"] + sizes["expected_churners"])
                               * (1 + p.rates["exact_duplicate"] + p.rates["unknown_customer"]), p.rows_per_file,
                               p.customers)
    # Three independent writes, each one Spark job with one task per output file. They are submitted together
    # (events first, the largest) so that a job with fewer files than cores leaves no core idle.
    writes = {
        "events": lambda: _write_dataset(fs, "events", event_rows(spark, p, b0, n_event_files), n_event_files, p),
        "customers": lambda: _write_dataset(fs, "customers", customer_rows(spark, p, b0, n_cust_files),
                                            n_cust_files, p),
        "truth": lambda: _write_truth(spark, fs, p, b0),
    }
    done = together(writes)
    fs.delete("_tmp")
    churn = churn_summary(spark.read.parquet(fs.path("_truth")), p)
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
        raise UserError(f"--customers {customers!r} must be a whole number from 1 to {MAX_CUSTOMERS}")
    if not isinstance(seed, int):
        raise UserError(f"--seed {seed!r} must be a whole number, e.g. --seed 7")
    try:
        as_of_d = dt.date.fromisoformat(str(as_of))
    except ValueError:
        raise UserError(f"--as-of {as_of!r} is not a date: write yyyy-MM-dd, e.g. --as-of 2026-06-30") from None
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
# Random numbers: hashes of (seed, salt, key...) mapped to [0, 1); constant lookup tables
# =========================================================================================================
_SALTS = {name: i + 1 for i, name in enumerate((
    "gender", "region", "partner", "dependents", "contract", "payment", "paperless", "phone", "multiple",
    "internet", "security", "backup", "device", "tech", "tv", "movies", "charges_noise", "signup", "age",
    "birth_days", "updated", "addr_no", "street", "street_type", "bill_day", "late_n", "late_day",
    "late_tod", "pay_lag", "pay_tod", "charge_tod", "support_n", "support_day", "support_tod",
    "support_channel", "support_note", "usage_n", "usage_day", "usage_tod", "usage_gb", "plan_n", "plan_day",
    "plan_tod", "plan_channel", "term_day", "term_tod", "term_channel", "churn", "defect", "defect_field",
    "defect_variant", "defect_value", "conflict_secs", "event", "event_defect", "event_defect_bits", "dup_pos",
    "unk_pos", "thin_late", "thin_support", "thin_usage", "thin_plan"))}


def uniform(seed: int, salt: str, *keys: Column) -> Column:
    """A pseudo-random double in [0, 1): the top 53 bits of xxhash64(seed, salt, keys)."""
    return uniform_salted(seed, F.lit(_SALTS[salt]), *keys)


def uniform_salted(seed: int, salt: Column, *keys: Column) -> Column:
    """``uniform`` with the salt's number given as a column (the same draw as uniform(seed, name, keys...) where
    salt = _SALTS[name])."""
    h = F.xxhash64(F.lit(seed).cast("long"), salt.cast("long"), *[k.cast("long") for k in keys])
    return F.shiftrightunsigned(h, 11) / float(1 << 53)


def event_hash(seed: int, salt: str, *keys: Column) -> Column:
    """xxhash64(seed, salt, keys): one event's 64 random bits, split by ``bits_uniform`` into three draws."""
    return F.xxhash64(F.lit(seed).cast("long"), F.lit(_SALTS[salt]).cast("long"), *[k.cast("long") for k in keys])


_FIELD_BITS = 21


def bits_uniform(h: Column, part: int) -> Column:
    """The part-th (0..2, from the top) 21-bit field of a 64-bit hash as a double in [0, 1): three independent
    draws from one hash, each fine enough for a day (< 2,200 values), a second of the day or a pick."""
    shift = 64 - _FIELD_BITS * (part + 1)
    return F.shiftrightunsigned(h, shift).bitwiseAND((1 << _FIELD_BITS) - 1) / float(1 << _FIELD_BITS)


# A customer's draws, three to a hash (bits_uniform's 21-bit fields): xxhash64(seed, -1 - group, n) for group
# = position // 3. Draws of one projection share their group, so each hash is computed once per customer
# (subexpression elimination). "updated" (a second within years) keeps a full 53-bit uniform of its own.
_CUSTOMER_DRAWS = ("gender", "region", "partner", "dependents", "contract", "payment", "paperless", "phone",
                   "multiple", "internet", "security", "backup", "device", "tech", "tv", "movies", "charges_noise",
                   "signup", "age", "bill_day", "addr_no", "street", "street_type", "birth_days", "late_n",
                   "support_n", "usage_n", "plan_n", None, None, "defect", "churn", None, "dup_pos", "unk_pos")


def customer_uniform(seed: int, salt: str, n: Column) -> Column:
    """One of customer n's draws in [0, 1) (``_CUSTOMER_DRAWS``)."""
    group, part = divmod(_CUSTOMER_DRAWS.index(salt), 3)
    return bits_uniform(F.xxhash64(F.lit(seed).cast("long"), F.lit(-1 - group).cast("long"), n.cast("long")), part)


def _pick(values: tuple[str, ...], u: Column, weights: tuple[float, ...] | None = None) -> Column:
    if weights is None:
        return F.element_at(F.array(*[F.lit(v) for v in values]), (F.floor(u * len(values)) + 1).cast("int"))
    total, acc, expr = sum(weights), 0.0, None
    for v, w in zip(values[:-1], weights[:-1]):
        acc += w / total
        expr = (F.when(u < acc, v) if expr is None else expr.when(u < acc, v))
    return expr.otherwise(values[-1])


def _table(values: list, sql_type: str) -> Column:
    """A constant array (one literal after Spark's constant folding, whatever its length): element_at(t, i)
    is then one array access per row. Built from one string so the plan stays small before folding."""
    text = ",".join(repr(v) if isinstance(v, float) else str(v) for v in values)
    return F.split(F.lit(text), ",").cast(f"array<{sql_type}>")


def _poisson_full(rates: tuple[float, ...], rate_class: Column, cap: int, u: Column) -> Column:
    """Inverse-CDF draw of a Poisson(rates[rate_class]) count capped at ``cap``: the number of k < cap with
    u > P(X <= k). The classes' CDFs are one small constant table (at most 80 doubles); a lazy CASE compares from
    k = 0 up and stops at the first k with u <= P(X <= k) (about lambda + 1 comparisons; no array, no sort)."""
    cdf = []
    for lam in rates:
        term = math.exp(-lam)
        total = term
        for k in range(cap):
            cdf.append(total)
            term = term * lam / (k + 1)
            total += term
    table = _table(cdf, "double")
    base = rate_class * cap + 1
    expr = None
    for k in range(cap):
        below = u <= F.element_at(table, (base + k).cast("int"))
        expr = F.when(below, k) if expr is None else expr.when(below, k)
    return expr.otherwise(cap)


def _thinned(p: Params, full: Column, window: int, tenure: Column, cap: int, salt: str) -> Column:
    """The full window's count kept for a tenure shorter than the window: each of its events is kept with
    probability tenure / window (its own draw), so a Poisson(rate) count becomes exactly Poisson(rate x tenure /
    window), as the rate scaled by tenure demands. ``full`` is a column (referenced once per slot)."""
    q = tenure / float(window)
    n = F.col("n")
    kept = sum(F.when((full >= j) & (bits_uniform(event_hash(p.seed, salt, n * EVENT_SLOTS + j), 0) < q), 1)
               .otherwise(0) for j in range(1, cap + 1))
    return F.when(tenure >= window, full).otherwise(kept)


def _two_digits(v: Column) -> Column:
    """00..99 by table lookup (v in 0..99)."""
    return F.element_at(_table([f"{i:02d}" for i in range(100)], "string"), (v + 1).cast("int"))


# =========================================================================================================
# Customers and their latent state (one row per customer)
# =========================================================================================================
_BOUNDARY_DAYS = (30, 90, 180, 365)   # feature windows: no event lands on a window's first excluded day
# Event types in the order a customer's events are numbered, with the most a customer has of each (the Poisson caps).
SLOT_TYPES = (("charge", 3), ("payment", 3), ("late_payment", 8), ("support_call", 20), ("usage", 30),
              ("plan_change", 5), ("termination", 1))


def _epoch_day(d: dt.date) -> int:
    return (d - dt.date(1970, 1, 1)).days


def _date_table_range(p: Params) -> tuple[int, int]:
    """Days covered by the date-string table: every event, signup and update day (rare others are computed)."""
    as_of = _epoch_day(p.as_of)
    return as_of - 7 * 366 - 400, as_of + 400


def _date_str(epoch_day: Column, p: Params) -> Column:
    """yyyy-MM-dd of a day number: a table lookup for the days the data mostly holds, Spark's cast otherwise."""
    lo, hi = _date_table_range(p)
    table = _table([(dt.date(1970, 1, 1) + dt.timedelta(days=d)).isoformat() for d in range(lo, hi + 1)], "string")
    day = epoch_day.cast("int")
    return (F.when((day >= lo) & (day <= hi), F.element_at(table, day - (lo - 1)))
            .otherwise(F.date_add(F.lit(dt.date(1970, 1, 1)), day).cast("string")))


def _ts_str(seconds: Column, p: Params) -> Column:
    """yyyy-MM-dd HH:mm:ss from seconds since 1970 (time-zone free: integers and tables only)."""
    day = F.floor(seconds / 86400)
    tod = (seconds - day * 86400).cast("int")
    return F.concat(_date_str(day, p), F.lit(" "), _two_digits(F.floor(tod / 3600)), F.lit(":"),
                    _two_digits(F.floor(tod / 60) % 60), F.lit(":"), _two_digits(tod % 60))


def _months_between_floor(later: dt.date, date: Column) -> Column:
    """floor(months_between(later, date)) for a date column, as Spark computes months_between of two dates, from
    the date's year, month and day of month (months_between itself converts both dates to time-zoned timestamps):
    whole months when the days of month are equal or both are their month's last, else the month difference plus
    (day1 - day2) / 31, which lies strictly between -1 and 1: so one month less exactly when the date's day of
    month is greater (and not both last days)."""
    day = F.dayofmonth(date)
    months = (later.year * 12 + later.month) - (F.year(date) * 12 + F.month(date))
    past = day > later.day
    if later.day == calendar.monthrange(later.year, later.month)[1]:   # the later date is its month's last day
        past = past & (day != F.dayofmonth(F.last_day(date)))
    return months - F.when(past, 1).otherwise(0)


def _cents_str_nonneg(cents: Column) -> Column:
    """d.cc from a whole number of cents >= 0: one concat of its pieces."""
    return F.concat((cents / 100).cast("long").cast("string"), F.lit("."), _two_digits(cents % 100))


def _cents_str(cents: Column) -> Column:
    """d.cc from a whole number of cents (negative ones through a decimal)."""
    return (F.when(cents >= 0, _cents_str_nonneg(cents))
            .otherwise((cents.cast("decimal(20,0)") / 100).cast("decimal(20,2)").cast("string")))


def _customer_numbers(spark: SparkSession, p: Params, count: int | None = None) -> DataFrame:
    """Customer numbers 0..count-1 (default: all N) for the customer-level passes (calibration, truth): any
    partitioning will do."""
    count = p.customers if count is None else count
    # About 500,000 customers a task, in whole rounds of the cores; never fewer tasks than cores. Not from
    # defaultParallelism alone: on a fresh cluster it is 2 until executors register (seen on a 16-core host:
    # calibration ran as 2 tasks for 106 s). Nor spark.sql.shuffle.partitions: each task has a fixed cost
    # (this job's task binary is large, and each task generates its projections' code again: ~0.2 CPU s),
    # 200 tasks of 500 customers took 18 s; truth at 1M customers took 4.8 CPU s as 6 tasks of 167k, 3.9 as 2.
    # The output does not depend on it.
    cores = spark.sparkContext.defaultParallelism
    parallelism = cores * max(1, math.ceil(count / 500_000 / cores))
    parts = min(p.partitions or parallelism, count)
    return spark.range(0, count, 1, parts).select(F.col("id").alias("n"))


def _file_blocks(spark: SparkSession, customers: int, n_files: int) -> DataFrame:
    """Customer numbers by output file: partition i holds exactly file i's block, customers
    floor(i * N / files) .. floor((i + 1) * N / files) - 1, in order, with file_index, block_start, block_end."""
    bounds = _table([i * customers // n_files for i in range(n_files + 1)], "bigint")
    i = F.col("id").cast("int")
    chunk = 1 << 16   # two steps, so that no array holds more than 65,536 customer numbers
    df = spark.range(0, n_files, 1, n_files).select(
        i.alias("file_index"), F.element_at(bounds, i + 1).alias("block_start"),
        F.element_at(bounds, i + 2).alias("block_end"))
    df = df.select("*", F.explode_outer(F.sequence(
        F.lit(0).cast("long"), F.floor((F.col("block_end") - F.col("block_start") - 1) / chunk))).alias("chunk"))
    lo = F.col("block_start") + F.col("chunk") * chunk
    hi = F.least(F.col("block_end"), lo + chunk) - 1
    return df.select("file_index", "block_start", "block_end", F.explode_outer(F.sequence(lo, hi)).alias("n"))


def _customers(df: DataFrame, p: Params, b0: float | None) -> DataFrame:
    """One row per customer number ``n`` of ``df``: attributes, how many events of each type they will have, the
    churn drivers and, when ``b0`` is given, churn_probability / churned; plus the customer's defect kind and
    whether clean will reject it. Everything is a built-in expression of (seed, n): no arrays, no lambdas.

    One projection: each column is written as an expression of the ones before it (Python variables, not
    column references), and Spark's subexpression elimination evaluates every shared piece once per row. A
    chain of withColumns would instead materialise every intermediate row (measured: a third of the time)."""
    seed, cutoff, n = p.seed, _epoch_day(p.cutoff), F.col("n")
    U = lambda salt: customer_uniform(seed, salt, n)  # noqa: E731
    yes = lambda salt, prob: F.when(U(salt) < prob, "Yes").otherwise("No")  # noqa: E731
    first_signup = _epoch_day(_years_before(p.as_of, 6))
    span = cutoff - 30 - first_signup
    c: dict[str, Column] = {}
    c.update({
        "customer_id": F.concat(F.lit("C"), F.lpad(n.cast("string"), 10, "0")),
        "gender": _pick(("Female", "Male"), U("gender")),
        "region": _pick(C.CATEGORIES["region"], U("region")),
        "partner": yes("partner", 0.48),
        "dependents": yes("dependents", 0.30),
        "contract_type": _pick(C.CATEGORIES["contract_type"], U("contract"), (0.55, 0.21, 0.24)),
        "payment_method": _pick(C.CATEGORIES["payment_method"], U("payment"), (0.34, 0.23, 0.22, 0.21)),
        "paperless_billing": yes("paperless", 0.59),
        "phone_service": yes("phone", 0.90),
        "internet_service": _pick(C.CATEGORIES["internet_service"], U("internet"), (0.34, 0.44, 0.22)),
        "signup_day": (F.lit(first_signup) + F.floor(U("signup") * (span + 1))).cast("int"),
        "age_at_signup": (18 + F.floor(U("age") * 67)).cast("int"),
        "bill_day": (1 + F.floor(U("bill_day") * 28)).cast("int"),
        "address": F.concat((1 + F.floor(U("addr_no") * 9999)).cast("string"), F.lit(" "),
                            _pick(STREETS, U("street")), F.lit(" "), _pick(STREET_TYPES, U("street_type"))),
    })
    has_net = c["internet_service"] != "No"
    fiber = c["internet_service"] == "Fiber optic"
    echeck = c["payment_method"] == "Electronic check"
    net_yes = lambda salt, prob: F.when((U(salt) < prob) & has_net, "Yes").otherwise("No")  # noqa: E731
    c.update({
        "multiple_lines": F.when((U("multiple") < 0.42) & (c["phone_service"] == "Yes"), "Yes").otherwise("No"),
        "online_security": net_yes("security", 0.37),
        "online_backup": net_yes("backup", 0.44),
        "device_protection": net_yes("device", 0.44),
        "tech_support": net_yes("tech", 0.37),
        "streaming_tv": net_yes("tv", 0.49),
        "streaming_movies": net_yes("movies", 0.50),
        "signup_date": F.date_add(F.lit(dt.date(1970, 1, 1)), c["signup_day"]),
        "tenure_days": F.lit(cutoff) - c["signup_day"],
    })
    is_yes = lambda k: F.when(c[k] == "Yes", 1).otherwise(0)  # noqa: E731
    tenure = c["tenure_days"]
    no_tech = has_net & (c["tech_support"] == "No")
    c.update({
        "monthly_cents": (1800 + 200 * is_yes("phone_service") + 500 * is_yes("multiple_lines")
                          + F.when(c["internet_service"] == "DSL", 2500).when(fiber, 4500).otherwise(0)
                          + 500 * (is_yes("online_security") + is_yes("online_backup")
                                   + is_yes("device_protection") + is_yes("tech_support"))
                          + 900 * (is_yes("streaming_tv") + is_yes("streaming_movies"))
                          + F.floor(U("charges_noise") * 400)).cast("long"),
        "birth_date": F.date_sub(F.add_months(c["signup_date"], -12 * c["age_at_signup"]),
                                 F.floor(U("birth_days") * 365).cast("int")),
        "updated_secs": (c["signup_day"].cast("long") * 86400
                         + F.floor(uniform(seed, "updated", n) * tenure * 86400)).cast("long"),
        "pay_channel": F.when(echeck, "web").when(c["payment_method"] == "Mailed check", "store").otherwise("auto"),
        "gb_mean": F.when(fiber, 15.0).when(c["internet_service"] == "DSL", 8.0).otherwise(2.0),
        # How many pre-cutoff events of each type (docs/data.md, "Events"): Poisson counts scaled by tenure.
        "n_charges": sum(F.when(_charge_offset(c, j) <= tenure, 1).otherwise(0) for j in (1, 2, 3)),
        # Poisson counts (docs/data.md, "Events"): over the whole window here, thinned by tenure below.
        "_full_late": _poisson_full((0.55, 0.2), F.when(echeck, 0).otherwise(1), 8, U("late_n")),
        "_full_support": _poisson_full((1.0, 1.8, 2.0, 3.6),
                                       F.when(fiber, 2).otherwise(0) + F.when(no_tech, 1).otherwise(0), 20,
                                       U("support_n")),
        "_full_usage": _poisson_full((3.5, 1.5), F.when(has_net, 0).otherwise(1), 30, U("usage_n")),
        "_full_plan": _poisson_full((0.15,), F.lit(0), 5, U("plan_n")),
    })
    # Materialised (one projection), so that the many expressions below refer to them as columns: the thinned
    # counts read each full count once per slot, support_calls_90d reads n_support 20 times.
    df = df.select("*", *[v.alias(k) for k, v in c.items()])
    c = {k: F.col(k) for k in c}
    tenure = c["tenure_days"]
    thinned = {"n_late": ("_full_late", "late_payment", 8, "thin_late"),
               "n_support": ("_full_support", "support_call", 20, "thin_support"),
               "n_usage": ("_full_usage", "usage", 30, "thin_usage"),
               "n_plan": ("_full_plan", "plan_change", 5, "thin_plan")}
    df = df.select("*", *[_thinned(p, c[full], _UNIFORM_WINDOW[etype], tenure, cap, salt).alias(k)
                          for k, (full, etype, cap, salt) in thinned.items()])
    c.update({k: F.col(k) for k in thinned})
    c["n_payments"] = sum(F.when((_charge_offset(c, j) <= tenure) & (c["n_late"] < j), 1).otherwise(0)
                          for j in (1, 2, 3))
    c.update({
        "tenure_months": F.least(F.lit(72), _months_between_floor(p.cutoff, c["signup_date"])),
        # floor(m / 12) = floor(floor(m) / 12) for a real m
        "age_at_cutoff": F.floor(_months_between_floor(p.cutoff, c["birth_date"]) / 12),
        "support_calls_90d": sum(F.when((c["n_support"] >= i) & (_support_day(p, c, i) > cutoff - 90),
                                        1).otherwise(0) for i in range(1, 21)),
        # Every late payment lies in the last 180 days (a draw on the boundary day moves one day later).
        "late_payments_180d": c["n_late"],
    })
    c["n_pre_cutoff"] = sum(c[k] for k in ("n_charges", "n_payments", "n_late", "n_support", "n_usage", "n_plan"))
    c["logit_x"] = _logit_without_intercept(c)
    c["kind"] = _kind_expr(U("defect"), p, "customers")
    c["rejected"] = c["kind"].isin(*_codes(REJECTING_KINDS))
    if b0 is not None:
        c["churn_probability"] = 1.0 / (1.0 + F.exp(-(F.lit(b0) + c["logit_x"])))
        c["churned"] = U("churn") < c["churn_probability"]
        c["n_events"] = c["n_pre_cutoff"] + c["churned"].cast("int")
    first = set(df.columns)
    return df.select("*", *[v.alias(k) for k, v in c.items() if k not in first])


def _years_before(d: dt.date, years: int) -> dt.date:
    try:
        return d.replace(year=d.year - years)
    except ValueError:   # 29 February
        return d.replace(year=d.year - years, day=28)


def _charge_offset(c, j: int) -> Column:
    """Days before the cutoff of the charge of month j (1..3); ``c`` maps column names to expressions."""
    return F.lit(30 * (j - 1)) + c["bill_day"]


def _days_back(p: Params, offset: Column) -> Column:
    # Shift off the window boundaries so that date- and timestamp-based windows agree (docs/data.md).
    return F.lit(_epoch_day(p.cutoff)) - (offset - F.when(offset.isin(*_BOUNDARY_DAYS), 1).otherwise(0))


# Days back from the cutoff over which the events of these types are spread (uniformly, within the tenure).
_UNIFORM_WINDOW = {"late_payment": 180, "support_call": 365, "usage": 90, "plan_change": 365}

def _support_day(p: Params, c, i: int) -> Column:
    """Day number of the customer's i-th support call (for support_calls_90d): the draw ``event_rows`` makes for
    that event (its index follows the charges, payments and late payments)."""
    idx = c["n_charges"] + c["n_payments"] + c["n_late"] + (i - 1)
    u_day = bits_uniform(event_hash(p.seed, "event", F.col("n") * EVENT_SLOTS + idx), 0)
    window = _UNIFORM_WINDOW["support_call"]
    return _days_back(p, 1 + F.floor(u_day * F.least(F.lit(window), c["tenure_days"])))


def _event_day_tod(p: Params, t: Column, i: Column, h: Column) -> tuple[Column, Column]:
    """(day number, second of the day) of the customer's i-th event (i a column) of type code t (index into
    SLOT_TYPES), both from the event's hash ``h``: the day from its first 21-bit field, the time from its
    second (docs/data.md, "Events")."""
    cutoff = _epoch_day(p.cutoff)
    code = {e: k for k, e in enumerate(_EVENT_TYPES)}
    u_day, u_tod = bits_uniform(h, 0), bits_uniform(h, 1)
    offset = F.lit(30) * (i - 1) + F.col("bill_day")
    window = F.element_at(F.array(*[F.lit(_UNIFORM_WINDOW.get(e, 1)) for e in _EVENT_TYPES]), t + 1)
    back = (F.when(t == code["charge"], offset)
            .when(t == code["payment"], offset - F.floor(u_day * F.least(F.lit(8), offset)))
            .otherwise(1 + F.floor(u_day * F.least(window, F.col("tenure_days")))))
    day = F.when(t == code["termination"], F.lit(cutoff + 1) + F.floor(u_day * (C.LABEL_WINDOW_DAYS - 1))) \
        .otherwise(_days_back(p, back))
    return day.cast("int"), F.floor(u_tod * 86400).cast("int")


def _logit_without_intercept(c: dict[str, Column]) -> Column:
    flag = lambda cond: F.when(cond, 1.0).otherwise(0.0)  # noqa: E731
    col = c.__getitem__
    return (COEF["contract_month_to_month"] * flag(col("contract_type") == "Month-to-month")
            + COEF["contract_two_year"] * flag(col("contract_type") == "Two year")
            + COEF["tenure_months"] * col("tenure_months")
            + COEF["monthly_charges_z"] * (col("monthly_cents") / 100.0 - 70.0) / 30.0
            + COEF["support_calls_90d"] * col("support_calls_90d")
            + COEF["late_payments_180d"] * col("late_payments_180d")
            + COEF["fiber_optic"] * flag(col("internet_service") == "Fiber optic")
            + COEF["electronic_check"] * flag(col("payment_method") == "Electronic check")
            + COEF["tech_support_yes"] * flag(col("tech_support") == "Yes")
            + COEF["senior_65"] * flag(col("age_at_cutoff") >= 65))


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
    cust = _customers(_customer_numbers(spark, p, sample), p, None)
    rows = (cust.groupBy(F.round("logit_x", 3).alias("x"))
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


def truth_frame(spark: SparkSession, customers: int, seed: int = 7, as_of: str = "2026-06-30",
                churn_rate: float = 0.2, defect_rate: float = 0.01, partitions: int | None = None) -> DataFrame:
    """The customer-level truth exactly as run() writes it to _truth (no CSV, no events): customer_id,
    churn_probability, churned, rejected."""
    p = validate(customers, seed, as_of, churn_rate, defect_rate, {}, 1_000_000, "none", partitions)
    b0, _ = calibrate(spark, p)
    return _customers(_customer_numbers(spark, p), p, b0).select(*TRUTH_COLUMNS)


TRUTH_COLUMNS = ("customer_id", "churn_probability", "churned", "rejected")


def _write_truth(spark: SparkSession, fs: "_Fs", p: Params, b0: float) -> None:
    """_truth/ in customer order (part files in partition order hold ascending customer numbers)."""
    (_customers(_customer_numbers(spark, p), p, b0).select(*TRUTH_COLUMNS)
     .write.mode("overwrite").parquet(fs.path("_truth")))
    fs.remove_side_files("_truth")


def churn_summary(truth: DataFrame, p: Params) -> dict:
    """Realised churn rate, customers reaching gold, and the oracle ROC AUC: the AUC the true churn
    probabilities reach on gold customers, computed as the model's is (``evaluate.roc_auc``, distributed)."""
    gold = ~F.col("rejected")
    r = truth.agg(F.avg(F.col("churned").cast("double")).alias("rate"),
                  F.sum(F.when(gold, 1).otherwise(0)).alias("gold")).first()  # one row
    auc = evaluate.roc_auc(truth.where(gold).select(F.col("churned").cast("double").alias(evaluate.LABEL),
                                                    F.col("churn_probability").alias(evaluate.PROBABILITY)))
    return {"configured_rate": p.churn_rate, "realised_rate": round(float(r["rate"]), 6),
            "oracle_auc": round(auc, 6), "label_window_days": C.LABEL_WINDOW_DAYS,
            "customers_in_gold": int(r["gold"])}


# =========================================================================================================
# Defects
# =========================================================================================================
def _codes(kinds) -> list[int]:
    return [KIND_CODE[k] for k in kinds]


def _kind_expr(u: Column, p: Params, dataset: str, demote: Column | None = None,
               skip: tuple[str, ...] = ()) -> Column:
    """The defect kind of a row as its KIND_CODE (0 when clean), by cumulative per-kind rates (clean rows: one
    test). Where ``demote`` holds, the kinds that quarantine the row or add an unknown customer's copy give 0.
    Kinds in ``skip`` are decided elsewhere (their share of u stays clean)."""
    acc, expr = 0.0, None
    for kind in (k for k in C.DEFECT_KINDS[dataset] if k not in skip):
        if p.rates[kind] <= 0:
            continue
        acc += p.rates[kind]
        value = F.lit(KIND_CODE[kind])
        if demote is not None and kind in REJECTING_KINDS + ("unknown_customer",):
            value = F.when(demote, 0).otherwise(KIND_CODE[kind])
        expr = F.when(u < acc, value) if expr is None else expr.when(u < acc, value)
    return F.lit(0) if expr is None else F.when(u >= acc, 0).otherwise(expr.otherwise(0))


_SPELLING_OF = {col: {canon: next((s for s, c in sp.items() if c == canon), None) for canon in C.CATEGORIES[col]}
                for col, sp in C.SPELLINGS.items()}


def _spelling_map() -> Column:
    """'column=canonical value' -> the known other spelling used for it (the first one in contract.SPELLINGS)."""
    pairs = [(f"{col}={canon}", s) for col, m in _SPELLING_OF.items() for canon, s in m.items() if s is not None]
    return F.create_map(*[F.lit(x) for kv in pairs for x in kv])


def _messy(col: Column, v: Column, u_form: Column, u_shape: Column) -> Column:
    """The same category (``v``, of the column named by ``col``), written as a person or a legacy export
    would: a known spelling half of the time, mixed case, stray and doubled spaces.
    lower(trim(collapse-spaces(x))) gives back the canonical value or a known spelling of it."""
    spelled = F.coalesce(F.element_at(_spelling_map(), F.concat(col, F.lit("="), v)), v)
    base = F.when(u_form < 0.5, spelled).otherwise(v)
    half = (F.length(base) / 2).cast("int")
    return (F.when(u_shape < 1 / 3, F.concat(F.lit("  "), F.upper(base), F.lit(" ")))
            .when(u_shape < 2 / 3, F.concat(F.lit(" "), F.regexp_replace(F.lower(base), " ", "  "), F.lit("  ")))
            .otherwise(F.concat(F.lit(" "), F.lower(base.substr(F.lit(1), half)),
                                F.upper(base.substr(half + 1, F.lit(1000))))))


def _unknown(col: str) -> str:
    return UNKNOWN_VALUES.get(col, UNKNOWN_YES_NO)


def _choose(options: list[Column], choice: Column) -> Column:
    """options[choice], evaluating only the chosen one."""
    expr = None
    for i, o in enumerate(options[:-1]):
        expr = F.when(choice == i, o) if expr is None else expr.when(choice == i, o)
    return options[-1] if expr is None else expr.otherwise(options[-1])


def _with_defect(df: DataFrame, dataset: str, kind: Column, u_field: Column,
                 rules: dict[str, tuple[list[str], object]]) -> DataFrame:
    """Adds row_kind, and _target / _bad: the position (in the dataset's columns) of the field the row's defect
    replaces and its bad value (null for clean rows). ``rules[kind]`` = (the fields the kind may hit, a function
    of the chosen position giving the bad value); u_field picks the field. Materialised once here: each field
    of the record below refers to them."""
    columns = C.DATASETS[dataset]
    target = value = None
    for k, (names, make) in rules.items():
        choice = F.floor(u_field * len(names)).cast("int")
        idx = F.element_at(F.array(*[F.lit(columns.index(c)) for c in names]), choice + 1)
        code = KIND_CODE[k]
        target = F.when(kind == code, idx) if target is None else target.when(kind == code, idx)
        value = F.when(kind == code, make(choice)) if value is None else value.when(kind == code, make(choice))
    return df.select("*", kind.alias("row_kind"), F.when(kind != 0, target).alias("_target"),
                     F.when(kind != 0, value).alias("_bad"))


def _defect_line(fields: dict[str, Column], dataset: str, u_var: Column, first: Column,
                 plain: dict[str, Column] | None = None) -> Column:
    """The file line of a row of ``_with_defect``: its CSV record with the defect's field substituted;
    wrong_field_count drops the last field (no other field of such a row holds a comma) or appends one; each
    file's first record carries the header.

    Rows whose fields all stand as they are (no target field, not wrong_field_count: about 99% of them) take a
    plain path: one concat of every piece, no quoting check (their free text never needs quotes), which
    Spark flattens into a single string allocation. ``plain`` overrides a field's expression on that path (a
    form valid for the values clean rows hold, e.g. non-negative cents)."""
    columns = C.DATASETS[dataset]
    header = F.when(first, F.lit(",".join(columns) + "\n")).otherwise(F.lit(""))
    pieces = [header]
    for i, c in enumerate(columns):
        pieces += ([F.lit(",")] if i else []) + [(plain or {}).get(c, fields[c])]
    as_is = F.col("_target").isNull() & (F.col("row_kind") != KIND_CODE["wrong_field_count"])
    return F.when(as_is, F.concat(*pieces)).otherwise(_defect_line_slow(fields, dataset, u_var, header))


def _defect_line_slow(fields: dict[str, Column], dataset: str, u_var: Column, header: Column) -> Column:
    columns = C.DATASETS[dataset]
    free_text = "address" if dataset == "customers" else "note"
    kind = F.col("row_kind")
    parts = []
    for i, c in enumerate(columns):
        v = F.when(F.col("_target") == i, F.col("_bad")).otherwise(fields[c])
        # Only the free text can hold ',', '"' or a newline: every other value comes from a fixed vocabulary,
        # a number or a date (defects included), so only it is checked for quoting.
        parts.append(csv_field(v) if c == free_text else v)
    wrong = kind == KIND_CODE["wrong_field_count"]
    return F.concat(
        header,
        F.concat_ws(",", *parts[:-1]),
        F.when(wrong & (u_var < 0.5), F.lit("")).otherwise(F.concat(F.lit(","), parts[-1])),
        F.when(wrong & (u_var >= 0.5), F.lit(",extra")).otherwise(F.lit("")))


def _bad_number(v: Column, u: Column) -> Column:
    return F.when(u < 0.5, F.concat(v, F.lit("x"))).otherwise(F.concat(F.lit("$"), v))


def _bad_date(d: Column, time: Column | None, u: Column) -> Column:
    """Unparseable with yyyy-MM-dd(HH:mm:ss): month 13 / day 45, or day-first with slashes."""
    day_first = F.concat_ws("/", F.substring(d, 9, 2), F.substring(d, 6, 2), F.substring(d, 1, 4))
    bad = F.when(u < 0.5, F.concat(F.substring(d, 1, 4), F.lit("-13-45"))).otherwise(day_first)
    return bad if time is None else F.concat(bad, F.lit(" "), time)


def _tricky(text: Column, u: Column, tail: str) -> Column:
    """Free text needing CSV quotes: a comma, a double quote or an embedded newline (never \\r)."""
    return (F.when(u < 1 / 3, F.concat(text, F.lit(f", {tail}")))
            .when(u < 2 / 3, F.concat(F.lit('"'), text, F.lit('" '), F.lit(tail)))
            .otherwise(F.concat(text, F.lit("\n"), F.lit(tail))))


# =========================================================================================================
# CSV lines
# =========================================================================================================
def _needs_quotes(v: Column) -> Column:
    return v.contains(",") | v.contains('"') | v.contains("\n") | v.contains("\r")


def csv_field(v: Column) -> Column:
    """One CSV field: quoted (inner quotes doubled) when it holds ',', '"', CR or LF; null writes as empty."""
    v = F.coalesce(v, F.lit(""))
    return F.when(_needs_quotes(v), F.concat(F.lit('"'), F.regexp_replace(v, '"', '""'), F.lit('"'))).otherwise(v)


def csv_line(columns: list[Column]) -> Column:
    return F.concat_ws(",", *[csv_field(c) for c in columns])


def with_csv_line(df: DataFrame, columns: tuple[str, ...], out: str = "line") -> DataFrame:
    """Adds ``out``: the CSV record of ``columns`` (no line end)."""
    return df.withColumn(out, csv_line([F.col(c) for c in columns]))


def _latin1_e_acute() -> Column:
    """The single byte 0xE9 as a string (binary cast to string keeps the bytes; the text writer writes them)."""
    return F.unhex(F.lit("E9")).cast("string")


def customer_rows(spark: SparkSession, p: Params, b0: float, n_files: int) -> DataFrame:
    """Customer CSV records in file order, one row per record: file_index, line, kind, cascade, last (the file's
    last record). Partition i is file i."""
    seed, n = p.seed, F.col("n")
    U = lambda salt, *k: uniform(seed, salt, n, *k)  # noqa: E731
    latent = _customers(_file_blocks(spark, p.customers, n_files), p, b0)
    copies = (F.when(F.col("kind") == KIND_CODE["exact_duplicate"], F.array(F.lit(0), F.lit(1)))
              .when(F.col("kind") == KIND_CODE["conflicting_duplicate"], F.array(F.lit(0), F.lit(2)))
              .otherwise(F.array(F.lit(0))))
    df = latent.select("*", F.explode_outer(copies).alias("copy"))
    copy = F.col("copy")
    kind = (F.when(copy == 1, KIND_CODE["exact_duplicate"]).when(copy == 2, KIND_CODE["conflicting_duplicate"])
            .when(F.col("kind").isin(*_codes(ADDED_ROW_KINDS)), 0).otherwise(F.col("kind")))
    older = copy == 2
    # The older, superseded version: earlier updated_at, another contract, payment method and price.
    contracts, payments = C.CATEGORIES["contract_type"], C.CATEGORIES["payment_method"]

    def rotate(col: str, values: tuple[str, ...]) -> Column:   # the next canonical value, never the same
        expr = F.lit(values[0])
        for here, nxt in zip(values, values[1:]):
            expr = F.when(F.col(col) == here, nxt).otherwise(expr)
        return expr

    updated = F.when(older, F.col("updated_secs") - 86400 - F.floor(U("conflict_secs") * 365 * 86400)) \
        .otherwise(F.col("updated_secs"))
    fields = {c: F.col(c) for c in C.CUSTOMER_COLUMNS if c in latent.columns}
    fields.update({
        "updated_at": _ts_str(updated, p),
        "signup_date": _date_str(F.col("signup_day"), p),
        "birth_date": F.col("birth_date").cast("string"),
        "contract_type": F.when(older, rotate("contract_type", contracts)).otherwise(F.col("contract_type")),
        "payment_method": F.when(older, rotate("payment_method", payments)).otherwise(F.col("payment_method")),
        "monthly_charges": _cents_str(F.when(older, F.col("monthly_cents") - 500).otherwise(F.col("monthly_cents"))),
    })
    u_var, u_val = U("defect_variant", copy), U("defect_value", copy)
    signup = F.col("signup_date")
    as_of = F.lit(p.as_of)
    time_part = F.substring(fields["updated_at"], 12, 8)
    cats = list(C.CUSTOMER_CATEGORICALS)
    rules = {
        "invalid_utf8": (["address"], lambda ch: F.concat(F.split(F.col("address"), " ")[0], F.lit(" Caf"),
                                                          _latin1_e_acute(), F.lit(" St"))),
        "missing_required": ([c for c in C.REQUIRED["customers"] if c != "customer_id"], lambda ch: F.lit("")),
        "bad_number": (["monthly_charges"], lambda ch: _bad_number(fields["monthly_charges"], u_var)),
        "bad_date": (["signup_date", "birth_date", "updated_at"], lambda ch: _choose(
            [_bad_date(fields["signup_date"], None, u_var), _bad_date(fields["birth_date"], None, u_var),
             _bad_date(fields["updated_at"], time_part, u_var)], ch)),
        "unknown_category": (cats, lambda ch: F.element_at(F.array(*[F.lit(_unknown(c)) for c in cats]), ch + 1)),
        "messy_category": (cats, lambda ch: _messy(F.element_at(F.array(*[F.lit(c) for c in cats]), ch + 1),
                                                   F.element_at(F.array(*[fields[c] for c in cats]), ch + 1),
                                                   u_var, u_val)),
        "out_of_range": (["monthly_charges"], lambda ch: F.when(
            u_var < 0.5, F.concat(F.lit("-"), fields["monthly_charges"]))
            .otherwise(_cents_str(F.col("monthly_cents") + 100_000))),
        "impossible_date": (["signup_date", "birth_date"], lambda ch: _choose([
            F.when(u_var < 0.5, F.date_add(as_of, 1 + F.floor(u_val * 365).cast("int")))
             .otherwise(F.date_add(F.lit(dt.date(1990, 1, 1)), F.floor(u_val * 2900).cast("int"))).cast("string"),
            F.when(u_var < 0.5, F.add_months(signup, -12 * 10))
             .otherwise(F.add_months(signup, -12 * 120)).cast("string")], ch)),
        "tricky_quoting": (["address"], lambda ch: _tricky(F.col("address"), u_var, "Apt 4")),
    }
    df = _with_defect(df, "customers", kind, U("defect_field", copy), rules)
    added = F.col("kind").isin(*_codes(("exact_duplicate", "conflicting_duplicate")))
    first = (n == F.col("block_start")) & (copy == 0)
    last = (n == F.col("block_end") - 1) & ((copy != 0) | ~added)
    return df.select("file_index", _defect_line(fields, "customers", u_var, first, plain={
        "monthly_charges": _cents_str_nonneg(F.when(older, F.col("monthly_cents") - 500)
                                             .otherwise(F.col("monthly_cents")))}).alias("line"),
                     F.col("row_kind").alias("kind"), F.lit(False).alias("cascade"), last.alias("last"))


_EVENT_TYPES = tuple(t for t, _ in SLOT_TYPES)


def event_rows(spark: SparkSession, p: Params, b0: float, n_files: int) -> DataFrame:
    """Event CSV records in file order (customer number, event index, copy), one row per record: file_index,
    line, kind, cascade, last (the file's last record). Partition i is file i.

    A customer's events are numbered in type order (SLOT_TYPES order, then number within the type), so
    event index idx decodes to (type, number) by comparing it with the customer's cumulative counts: one row
    per record from exploding 0..n_records-1, no per-customer array of events and no sort. The added records
    (an exact duplicate, an unknown customer's copy: at most one of each per customer, each after a chosen
    event) are decided per customer, so the same generator makes them: record r is event
    r - [r >= dup record] - [r >= unknown record]. Each event's draws come from two hashes of its number."""
    seed, n = p.seed, F.col("n")
    latent = _customers(_file_blocks(spark, p.customers, n_files), p, b0)
    code = {e: k for k, e in enumerate(_EVENT_TYPES)}
    counts = [F.col(k) for k in ("n_charges", "n_payments", "n_late", "n_support", "n_usage", "n_plan")]
    ends = [sum(counts[:k + 1]) for k in range(len(counts))]   # first event index after each type's events
    ok = ~F.col("rejected")

    def position(salt: str, rate: float, count: Column) -> Column:
        """The event (0..count-1) given an added record, or -1: P(some event) = rate x count, as a per-event
        rate would give (at most one per customer; rates x events above 1 are capped)."""
        if rate <= 0:
            return F.lit(-1)
        u = customer_uniform(seed, salt, n)
        return F.when((u < rate * count) & ok, F.least(count - 1, F.floor(u / rate)).cast("int")).otherwise(-1)

    dup = position("dup_pos", p.rates["exact_duplicate"], F.col("n_events"))
    # an unknown customer's copy is never made of a termination (the last event of a churner)
    unk0 = position("unk_pos", p.rates["unknown_customer"], F.col("n_pre_cutoff"))
    unk = F.when(unk0 == dup, -1).otherwise(unk0)
    none = 1000   # a record number no customer reaches
    dup_r = F.when(dup >= 0, dup + 1 + F.when((unk >= 0) & (unk < dup), 1).otherwise(0)).otherwise(none)
    unk_r = F.when(unk >= 0, unk + 1 + F.when((dup >= 0) & (dup < unk), 1).otherwise(0)).otherwise(none)
    n_records = F.col("n_events") + F.when(dup >= 0, 1).otherwise(0) + F.when(unk >= 0, 1).otherwise(0)
    cols = ["file_index", "block_start", "block_end", "n", "customer_id", "rejected", "monthly_cents",
            "pay_channel", "gb_mean", "n_late", "bill_day", "tenure_days"]
    # The _outer generator (no sequence here is ever empty) keeps Spark from inferring a size(array) > 0 filter,
    # which it pushes below the projection: the customer's expressions would be computed twice.
    df = latent.select(
        *cols, *[e.alias(f"_end{k}") for k, e in enumerate(ends)],
        F.concat(F.lit("E"), F.lpad(n.cast("string"), 10, "0")).alias("eprefix"),
        _cents_str_nonneg(F.col("monthly_cents")).alias("monthly_str"),
        dup.alias("dup"), unk.alias("unk"), dup_r.alias("dup_r"), unk_r.alias("unk_r"),
        n_records.alias("n_records"))
    cols += [f"_end{k}" for k in range(len(ends))] + ["eprefix", "monthly_str", "dup", "unk", "dup_r", "unk_r",
                                                        "n_records"]
    df = df.select(*cols, F.explode_outer(F.sequence(F.lit(0), F.col("n_records") - 1)).alias("r"))
    r = F.col("r")
    idx = r - F.when(r >= F.col("dup_r"), 1).otherwise(0) - F.when(r >= F.col("unk_r"), 1).otherwise(0)
    copy = F.when(r == F.col("dup_r"), 1).when(r == F.col("unk_r"), 2).otherwise(0)
    t = i = None
    for k in range(len(ends)):
        start = F.lit(0) if k == 0 else F.col(f"_end{k - 1}")
        number = idx - start + 1 + (F.col("n_late") if SLOT_TYPES[k][0] == "payment" else 0)
        t = F.when(idx < F.col(f"_end{k}"), k) if t is None else t.when(idx < F.col(f"_end{k}"), k)
        i = F.when(idx < F.col(f"_end{k}"), number) if i is None else i.when(idx < F.col(f"_end{k}"), number)
    # type t (index into SLOT_TYPES) and number i (1-based; a payment's is its charge's month)
    t, i = t.otherwise(len(SLOT_TYPES) - 1), i.otherwise(1)
    key = n * EVENT_SLOTS + idx
    h = event_hash(seed, "event", key)             # day, time of day, amount / channel
    h2 = event_hash(seed, "event_defect", key)     # defect kind (top 53 bits), note (low 11 bits)
    u_a = bits_uniform(h, 2)
    u_note = h2.bitwiseAND(0x7FF) / 2048.0
    u_defect = F.shiftrightunsigned(h2, 11) / float(1 << 53)
    day, tod = _event_day_tod(p, t, i, h)
    # Rejected customers' events stay clean (clean sets them all aside); a termination is never quarantined,
    # so every churner's label reaches gold; an event with an added record after it stays clean.
    kind = (F.when(copy == 1, KIND_CODE["exact_duplicate"]).when(copy == 2, KIND_CODE["unknown_customer"])
            .when(F.col("rejected") | (idx == F.col("dup")) | (idx == F.col("unk")), 0)
            .otherwise(_kind_expr(u_defect, p, "events", demote=(t == code["termination"]),
                                  skip=("exact_duplicate", "unknown_customer"))))
    df = df.select(
        "file_index", "block_start", "block_end", "n", "customer_id", "rejected", "n_records", "eprefix",
        "monthly_str", r.alias("r"), idx.alias("idx"), copy.alias("copy"), t.alias("t"),
        day.alias("day"), tod.alias("tod"),
        F.element_at(F.array(*[F.lit(e) for e in _EVENT_TYPES]), t + 1).alias("type"),
        F.when(t <= code["late_payment"], F.col("monthly_cents"))
         .when(t == code["usage"], F.least(F.lit(999_999), F.floor(-F.log(1.0 - u_a) * F.col("gb_mean")
                                                                    * 100)).cast("long"))
         .otherwise(F.lit(0).cast("long")).alias("cents"),
        F.when(t == code["charge"], "auto").when(t <= code["late_payment"], F.col("pay_channel"))
         .when(t == code["support_call"], _pick(("phone", "web", "app", "store"), u_a, (0.6, 0.2, 0.15, 0.05)))
         .when(t == code["usage"], "app")
         .when(t == code["plan_change"], _pick(("web", "phone", "store"), u_a))
         .otherwise(_pick(("phone", "store", "web"), u_a, (0.6, 0.25, 0.15))).alias("channel"),
        F.when(t == code["support_call"], _pick(SUPPORT_NOTES, u_note))
         .when(t == code["plan_change"], "plan change").otherwise("").alias("note"),
        kind.alias("bkind"))

    # The record.
    copy, t, idx = F.col("copy"), F.col("t"), F.col("idx")
    stranger = n + p.customers   # a customer number no customer row has
    tod = F.col("tod")
    fields = {
        "event_id": F.concat(F.when(copy == 2, F.concat(F.lit("E"), F.lpad(stranger.cast("string"), 10, "0")))
                             .otherwise(F.col("eprefix")), _two_digits(idx)),
        "customer_id": F.when(copy == 2, F.concat(F.lit("C"), F.lpad(stranger.cast("string"), 10, "0")))
                        .otherwise(F.col("customer_id")),
        "event_ts": F.concat(_date_str(F.col("day"), p), F.lit(" "), _two_digits(F.floor(tod / 3600)), F.lit(":"),
                             _two_digits(F.floor(tod / 60) % 60), F.lit(":"), _two_digits(tod % 60)),
        "event_type": F.col("type"),
        "amount": _cents_str(F.col("cents")),
        "channel": F.col("channel"),
        "note": F.col("note"),
    }
    hd = event_hash(seed, "event_defect_bits", n * EVENT_SLOTS + idx, copy)   # a defect's field and variant
    u_field, u_var, u_val = bits_uniform(hd, 0), bits_uniform(hd, 1), bits_uniform(hd, 2)
    as_of_day = _epoch_day(p.as_of)
    time_part = F.substring(fields["event_ts"], 12, 8)
    note, cents = F.col("note"), F.col("cents")
    cats = list(C.EVENT_CATEGORICALS)
    rules = {
        "invalid_utf8": (["note"], lambda ch: F.concat(F.when(note == "", "visit").otherwise(note), F.lit(" caf"),
                                                       _latin1_e_acute())),
        "missing_required": ([c for c in C.REQUIRED["events"] if c not in ("event_id", "customer_id")],
                             lambda ch: F.lit("")),
        "bad_number": (["amount"], lambda ch: _bad_number(fields["amount"], u_var)),
        "bad_date": (["event_ts"], lambda ch: _bad_date(fields["event_ts"], time_part, u_var)),
        "unknown_category": (cats, lambda ch: F.element_at(F.array(*[F.lit(_unknown(c)) for c in cats]), ch + 1)),
        "messy_category": (cats, lambda ch: _messy(F.element_at(F.array(*[F.lit(c) for c in cats]), ch + 1),
                                                   F.element_at(F.array(*[fields[c] for c in cats]), ch + 1),
                                                   u_var, u_val)),
        "out_of_range": (["amount"], lambda ch: F.when(u_var < 0.5, F.concat(F.lit("-"), _cents_str(cents + 100)))
                         .otherwise(_cents_str(cents + 1_000_100))),
        "impossible_date": (["event_ts"], lambda ch: F.concat(_date_str(
            F.when(u_var < 0.5, F.lit(as_of_day + 1) + F.floor(u_val * 365))
            .otherwise(F.lit(_epoch_day(dt.date(1999, 1, 1))) + F.floor(u_val * 364)), p), F.lit(" "), time_part)),
        "tricky_quoting": (["note"], lambda ch: _tricky(F.when(note == "", "called").otherwise(note), u_var,
                                                        "follow-up")),
    }
    df = _with_defect(df, "events", F.col("bkind"), u_field, rules)
    r = F.col("r")
    first = (n == F.col("block_start")) & (r == 0)
    last = (n == F.col("block_end") - 1) & (r == F.col("n_records") - 1)
    plain_amount = F.when(t <= code["late_payment"], F.col("monthly_str")).otherwise(_cents_str_nonneg(cents))
    return df.select("file_index", _defect_line(fields, "events", u_var, first, plain={"amount": plain_amount})
                     .alias("line"), F.col("row_kind").alias("kind"), F.col("rejected").alias("cascade"),
                     last.alias("last"))


# =========================================================================================================
# Writing: one task per file, rows already in file order, header on each file's first record
# =========================================================================================================
def _files_for(records: float, rows_per_file: int, customers: int) -> int:
    """About rows_per_file records per file; never more files than customers (each block holds one)."""
    return max(1, min(customers, math.ceil(records / rows_per_file)))


_ROW_BITS = (1 << 33) - 1   # monotonically_increasing_id: partition id above bit 33, row number in it below


def _write_dataset(fs: "_Fs", dataset: str, rows: DataFrame, n_files: int, p: Params) -> dict:
    """Writes ``rows`` (partition i = file i, in order) as text, renames each part file to its final name, and
    returns the dataset's manifest entry. Every count is a Spark aggregate taken while the files are written
    (``DataFrame.observe``; no second pass): per defect kind, and per file (the row number within its
    partition of each file's last record)."""
    obs = Observation(f"generate-{dataset}")
    tagged = rows.select("*", F.monotonically_increasing_id().alias("_row"), F.spark_partition_id().alias("_part"))
    records_so_far = F.col("_row").bitwiseAND(_ROW_BITS) + 1
    # count(when(...)) is the cheapest counter in observe(): about 3x faster than sum(when(..., 1, 0)).
    metrics = [F.count(F.lit(1)).alias("records"),
               F.count(F.when(F.col("cascade"), 1)).alias("cascade"),
               F.count(F.when(F.col("_part") != F.col("file_index"), 1)).alias("_misplaced"),
               F.concat_ws(",", F.collect_list(F.when(F.col("last"), F.concat_ws(
                   ":", F.col("file_index").cast("string"), records_so_far.cast("string"))))).alias("_ends")]
    metrics += [F.count(F.when(F.col("kind") == KIND_CODE[k], 1)).alias(k) for k in C.DEFECT_KINDS[dataset]]
    tmp = f"_tmp/{dataset}"
    # The text writer writes each string's bytes as they are (the invalid_utf8 defect's lone 0xE9 included),
    # each followed by "\n"; a record's quoted newline is written as is.
    (tagged.observe(obs, *metrics).select("line")
     .write.mode("overwrite").option("compression", p.compression).option("maxRecordsPerFile", 0)
     .text(fs.path(tmp)))
    m = obs.get
    ends = dict(tuple(map(int, e.split(":"))) for e in m["_ends"].split(",") if e)
    records = int(m["records"])
    if m["_misplaced"] or sorted(ends) != list(range(n_files)) or sum(ends.values()) != records:
        raise RuntimeError(f"{dataset}: rows not laid out one file per partition (misplaced {m['_misplaced']}, "
                           f"file ends {ends}, records {records})")
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

    defects = {k: int(m[k] or 0) for k in C.DEFECT_KINDS[dataset]}
    quarantined = {C.DEFECT_FATE[k][1]: defects[k] for k in C.DEFECT_KINDS[dataset]
                   if C.DEFECT_FATE[k][0] == C.QUARANTINE}
    if dataset == "events":
        quarantined[C.CASCADE_REASON] = int(m["cascade"] or 0)
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
