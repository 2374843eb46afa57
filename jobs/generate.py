"""generate: synthetic telecom customers + events as CSV files, with injected defects and the truth behind them.

    scripts/submit --profile cpu generate --out DIR [--customers 100000] [--seed 7] [--as-of 2026-06-30]
        [--churn-rate 0.2] [--defect-rate 0.01] [--rate KIND=R ...] [--rows-per-file 1000000]
        [--compression none|gzip] [--partitions P] [--overwrite]

Writes ``DIR/customers/customers-NNNNN.csv``, ``DIR/events/events-NNNNN.csv`` (``.csv.gz`` with gzip),
``DIR/_truth/`` (Parquet: customer_id, churn_probability, churned, rejected) and ``DIR/manifest.json``.
docs/data.md describes the columns, the latent churn model, the defects and the manifest.

Everything is computed by built-in Spark expressions on ``spark.range``: every random draw is a hash of
(seed, salt, row key), so the bytes written depend only on the arguments, never on partitioning or time.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType

from jobs import contract as C
from jobs.errors import UserError
from jobs.session import get_spark

KINDS_ALL = tuple(dict.fromkeys(C.DEFECT_KINDS["customers"] + C.DEFECT_KINDS["events"]))
# Kinds that change the row itself (one row, one kind); the others add an extra row next to a clean one.
ADDED_ROW_KINDS = ("exact_duplicate", "conflicting_duplicate", "unknown_customer")
# Kinds whose row clean quarantines, leaving its customer with no row at all when it is the only one.
REJECTING_KINDS = tuple(k for k, (fate, _) in C.DEFECT_FATE.items()
                        if fate == C.QUARANTINE and k not in ADDED_ROW_KINDS)
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
LATIN1_E_ACUTE = "\u00e9"   # written as the single byte 0xE9 (ISO-8859-1): invalid as UTF-8


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

    b0, base_events = calibrate(spark, p)
    # Customers with their drawn behaviour feed three writes (customers, events, truth): draw them once.
    latent = latent_customers(spark, p, b0).persist(StorageLevel.MEMORY_AND_DISK)
    expected_churners = base_events["expected_churners"]
    n_cust_files = _files_for(p.customers * (1 + p.rates["exact_duplicate"] + p.rates["conflicting_duplicate"]),
                              p.rows_per_file)
    n_event_files = _files_for((base_events["events"] + expected_churners)
                               * (1 + p.rates["exact_duplicate"] + p.rates["unknown_customer"]), p.rows_per_file)

    cust_rows, cust_obs = _observed(customer_rows(latent, p, n_cust_files), "customers")
    _write_csv(spark, fs, cust_rows, "customers", n_cust_files, p)
    event_rows_df, event_obs = _observed(event_rows(latent, p, n_event_files), "events")
    _write_csv(spark, fs, event_rows_df, "events", n_event_files, p)

    truth = latent.select(
        F.col("customer_id"), F.col("churn_probability"), F.col("churned"), F.col("rejected"),
        F.floor(F.col("n") * n_cust_files / p.customers).alias("_block"), F.col("n"))
    (truth.repartition(n_cust_files, "_block").sortWithinPartitions("n").drop("_block", "n")
     .write.mode("overwrite").parquet(fs.path("_truth")))
    fs.remove_side_files("_truth")
    churn = churn_summary(spark.read.parquet(fs.path("_truth")), p)

    datasets = {}
    for name, obs in (("customers", cust_obs), ("events", event_obs)):
        datasets[name] = _dataset_manifest(spark, fs, name, obs.get)
    manifest = {
        "generator": {"seed": p.seed, "as_of": p.as_of.isoformat(), "cutoff": p.cutoff.isoformat(),
                      "customers": p.customers, "churn_rate": p.churn_rate, "defect_rate": p.defect_rate,
                      "rates": {k: p.rates[k] for k in KINDS_ALL}, "rows_per_file": p.rows_per_file,
                      "compression": p.compression},
        "datasets": datasets,
        "churn": churn,
    }
    fs.write_text("manifest.json", json.dumps(manifest, indent=2) + "\n")
    latent.unpersist()
    return manifest


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
# Random numbers: hashes of (seed, salt, key...) mapped to [0, 1)
# =========================================================================================================
_SALTS = {name: i + 1 for i, name in enumerate((
    "gender", "region", "partner", "dependents", "contract", "payment", "paperless", "phone", "multiple",
    "internet", "security", "backup", "device", "tech", "tv", "movies", "charges_noise", "signup", "age",
    "birth_days", "updated", "addr_no", "street", "street_type", "bill_day", "late_n", "late_day",
    "late_tod", "pay_lag", "pay_tod", "charge_tod", "support_n", "support_day", "support_tod",
    "support_channel", "support_note", "usage_n", "usage_day", "usage_tod", "usage_gb", "plan_n", "plan_day",
    "plan_tod", "plan_channel", "term_day", "term_tod", "term_channel", "churn", "defect", "defect_field",
    "defect_variant", "defect_value", "conflict_secs"))}


def uniform(seed: int, salt: str, *keys: Column) -> Column:
    """A pseudo-random double in [0, 1): the top 53 bits of xxhash64(seed, salt, keys)."""
    h = F.xxhash64(F.lit(seed).cast("long"), F.lit(_SALTS[salt]).cast("long"), *[k.cast("long") for k in keys])
    return F.shiftrightunsigned(h, 11) / float(1 << 53)


def _pick(values: tuple[str, ...], u: Column, weights: tuple[float, ...] | None = None) -> Column:
    if weights is None:
        return F.element_at(F.array(*[F.lit(v) for v in values]), (F.floor(u * len(values)) + 1).cast("int"))
    total, acc, expr = sum(weights), 0.0, None
    for v, w in zip(values[:-1], weights[:-1]):
        acc += w / total
        expr = (F.when(u < acc, v) if expr is None else expr.when(u < acc, v))
    return expr.otherwise(values[-1])


def _poisson(lam: Column, u: Column, cap: int) -> Column:
    """Inverse-CDF Poisson draw capped at ``cap``: the number of k < cap with u > P(X <= k)."""
    first = F.exp(-lam)
    init = F.struct(first.alias("p"), first.alias("c"), F.lit(0).alias("n"))

    def step(acc, k):
        nxt = acc["p"] * lam / (k + 1)
        return F.struct(nxt.alias("p"), (acc["c"] + nxt).alias("c"),
                        (acc["n"] + F.when(u > acc["c"], 1).otherwise(0)).alias("n"))

    return F.aggregate(F.sequence(F.lit(0), F.lit(cap - 1)), init, step, lambda acc: acc["n"])


def _first(n: Column, count: Column, cap: int) -> Column:
    """[1, 2, ..., count] (count <= cap), empty when count is 0."""
    return F.slice(F.sequence(F.lit(1), F.lit(cap)), 1, count)


# =========================================================================================================
# Customers and their latent state (one row per customer)
# =========================================================================================================
EVENT_STRUCT = StructType([StructField("day", IntegerType()), StructField("tod", IntegerType()),
                           StructField("type", StringType()), StructField("cents", LongType()),
                           StructField("channel", StringType()), StructField("note", StringType())])
_BOUNDARY_DAYS = (30, 90, 180, 365)   # feature windows: no event lands on a window's first excluded day


def _epoch_day(d: dt.date) -> int:
    return (d - dt.date(1970, 1, 1)).days


def _date_str(epoch_day: Column) -> Column:
    return F.date_add(F.lit(dt.date(1970, 1, 1)), epoch_day.cast("int")).cast("string")


def _ts_str(seconds: Column) -> Column:
    """yyyy-MM-dd HH:mm:ss from seconds since 1970 (time-zone free: dates and integers only)."""
    day, tod = F.floor(seconds / 86400), F.pmod(seconds, 86400)
    two = lambda c: F.lpad(c.cast("string"), 2, "0")  # noqa: E731
    return F.concat(_date_str(day), F.lit(" "), two(F.floor(tod / 3600)), F.lit(":"),
                    two(F.floor(F.pmod(tod, 3600) / 60)), F.lit(":"), two(F.pmod(tod, 60)))


def _cents_str(cents: Column) -> Column:
    return (cents.cast("decimal(20,0)") / 100).cast("decimal(20,2)").cast("string")


def _ev(day: Column, tod: Column, etype: str, cents: Column, channel: Column, note: Column) -> Column:
    return F.struct(day.cast("int").alias("day"), tod.cast("int").alias("tod"), F.lit(etype).alias("type"),
                    cents.cast("long").alias("cents"), channel.cast("string").alias("channel"),
                    note.cast("string").alias("note"))


def latent_customers(spark: SparkSession, p: Params, b0: float | None) -> DataFrame:
    """One row per customer: attributes, the events they will have (as an array), the churn drivers and,
    when ``b0`` is given, churn_probability / churned / the termination event; plus the customer's defect
    kind and whether clean will reject it."""
    seed, cutoff, n = p.seed, _epoch_day(p.cutoff), F.col("n")
    U = lambda salt, *k: uniform(seed, salt, n, *k)  # noqa: E731
    yes = lambda salt, prob: F.when(U(salt) < prob, "Yes").otherwise("No")  # noqa: E731
    first_signup = _epoch_day(_years_before(p.as_of, 6))
    span = cutoff - 30 - first_signup

    # Not defaultParallelism alone: on a fresh cluster it is 2 until executors register (seen on a
    # 16-core host: calibration ran as 2 tasks for 106 s). The output does not depend on this number.
    parallelism = max(spark.sparkContext.defaultParallelism, int(spark.conf.get("spark.sql.shuffle.partitions")))
    df = spark.range(0, p.customers, numPartitions=p.partitions or parallelism)
    df = df.select(F.col("id").alias("n")).withColumns({
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
    has_net = F.col("internet_service") != "No"
    net_yes = lambda salt, prob: F.when(has_net & (U(salt) < prob), "Yes").otherwise("No")  # noqa: E731
    df = df.withColumns({
        "multiple_lines": F.when((F.col("phone_service") == "Yes") & (U("multiple") < 0.42), "Yes").otherwise("No"),
        "online_security": net_yes("security", 0.37),
        "online_backup": net_yes("backup", 0.44),
        "device_protection": net_yes("device", 0.44),
        "tech_support": net_yes("tech", 0.37),
        "streaming_tv": net_yes("tv", 0.49),
        "streaming_movies": net_yes("movies", 0.50),
        "signup_date": F.date_add(F.lit(dt.date(1970, 1, 1)), F.col("signup_day")),
        "tenure_days": F.lit(cutoff) - F.col("signup_day"),
    })
    is_yes = lambda c: F.when(F.col(c) == "Yes", 1).otherwise(0)  # noqa: E731
    df = df.withColumns({
        "monthly_cents": (1800 + 200 * is_yes("phone_service") + 500 * is_yes("multiple_lines")
                          + F.when(F.col("internet_service") == "DSL", 2500)
                          .when(F.col("internet_service") == "Fiber optic", 4500).otherwise(0)
                          + 500 * (is_yes("online_security") + is_yes("online_backup")
                                   + is_yes("device_protection") + is_yes("tech_support"))
                          + 900 * (is_yes("streaming_tv") + is_yes("streaming_movies"))
                          + F.floor(U("charges_noise") * 400)).cast("long"),
        "birth_date": F.date_sub(F.add_months(F.col("signup_date"), -12 * F.col("age_at_signup")),
                                 F.floor(U("birth_days") * 365).cast("int")),
        "updated_secs": (F.col("signup_day").cast("long") * 86400
                         + F.floor(U("updated") * F.col("tenure_days") * 86400)).cast("long"),
        "pay_channel": F.when(F.col("payment_method") == "Electronic check", "web")
                        .when(F.col("payment_method") == "Mailed check", "store").otherwise("auto"),
    })
    df = df.transform(lambda d: _with_event_arrays(d, p))
    cutoff_date = F.lit(p.cutoff)
    df = df.withColumns({
        "tenure_months": F.least(F.lit(72), F.floor(F.months_between(cutoff_date, F.col("signup_date")))),
        "age_at_cutoff": F.floor(F.months_between(cutoff_date, F.col("birth_date")) / 12),
        "support_calls_90d": F.size(F.filter("support", lambda e: e["day"] > cutoff - 90)),
        "late_payments_180d": F.size(F.filter("late", lambda e: e["day"] > cutoff - 180)),
    })
    df = df.withColumn("logit_x", _logit_without_intercept())
    kind = _kind_expr(U("defect"), p, "customers")
    df = df.withColumns({"kind": kind, "rejected": kind.isin(*REJECTING_KINDS)})
    if b0 is None:
        return df
    prob = 1.0 / (1.0 + F.exp(-(F.lit(b0) + F.col("logit_x"))))
    df = df.withColumn("churn_probability", prob).withColumn("churned", U("churn") < F.col("churn_probability"))
    term = _ev(F.lit(cutoff + 1) + F.floor(U("term_day") * (C.LABEL_WINDOW_DAYS - 1)),
               F.floor(U("term_tod") * 86400), "termination", F.lit(0),
               _pick(("phone", "store", "web"), U("term_channel"), (0.6, 0.25, 0.15)), F.lit(""))
    events = F.concat("charges", "payments", "late", "support", "usage", "plans",
                      F.filter(F.array(term), lambda e: F.col("churned")))
    return df.withColumn("events", F.array_sort(events))


def _years_before(d: dt.date, years: int) -> dt.date:
    try:
        return d.replace(year=d.year - years)
    except ValueError:   # 29 February
        return d.replace(year=d.year - years, day=28)


def _with_event_arrays(df: DataFrame, p: Params) -> DataFrame:
    """Pre-cutoff events as arrays of structs (day = days since 1970, tod = second of the day)."""
    seed, cutoff, n = p.seed, _epoch_day(p.cutoff), F.col("n")
    U = lambda salt, *k: uniform(seed, salt, n, *k)  # noqa: E731
    tenure = F.col("tenure_days")

    def days_back(offset: Column) -> Column:
        # Shift off the window boundaries so that date- and timestamp-based windows agree (docs/data.md).
        return F.lit(cutoff) - (offset - F.when(offset.isin(*_BOUNDARY_DAYS), 1).otherwise(0))

    def uniform_back(salt: str, i: Column, window: int) -> Column:
        return days_back(1 + F.floor(U(salt, i) * F.least(F.lit(window), tenure)))

    def scaled(rate: Column, window: int) -> Column:
        return rate * F.least(F.lit(window), tenure) / window

    charge_offset = lambda j: 30 * (j - 1) + F.col("bill_day")  # noqa: E731
    fiber = F.col("internet_service") == "Fiber optic"
    no_tech = (F.col("internet_service") != "No") & (F.col("tech_support") == "No")
    late_rate = F.when(F.col("payment_method") == "Electronic check", 0.55).otherwise(0.2)
    support_rate = (1.0 * F.when(fiber, 2.0).otherwise(1.0) * F.when(no_tech, 1.8).otherwise(1.0))
    usage_gb = F.when(fiber, 15.0).when(F.col("internet_service") == "DSL", 8.0).otherwise(2.0)
    df = df.withColumns({
        "charge_js": F.filter(F.sequence(F.lit(1), F.lit(3)), lambda j: charge_offset(j) <= tenure),
        "n_late": _poisson(scaled(late_rate, 180), U("late_n"), 8),
        "n_support": _poisson(scaled(support_rate, 365), U("support_n"), 20),
        "n_usage": _poisson(scaled(F.when(F.col("internet_service") != "No", 3.5).otherwise(1.5), 90),
                            U("usage_n"), 30),
        "n_plan": _poisson(scaled(F.lit(0.15), 365), U("plan_n"), 5),
    })
    monthly = F.col("monthly_cents")
    return df.withColumns({
        "charges": F.transform("charge_js", lambda j: _ev(
            days_back(charge_offset(j)), F.floor(U("charge_tod", j) * 86400), "charge", monthly, F.lit("auto"),
            F.lit(""))),
        "payments": F.transform(F.filter("charge_js", lambda j: j > F.col("n_late")), lambda j: _ev(
            days_back(charge_offset(j) - F.floor(U("pay_lag", j) * F.least(F.lit(8), charge_offset(j)))),
            F.floor(U("pay_tod", j) * 86400), "payment", monthly, F.col("pay_channel"), F.lit(""))),
        "late": F.transform(_first(n, F.col("n_late"), 8), lambda i: _ev(
            uniform_back("late_day", i, 180), F.floor(U("late_tod", i) * 86400), "late_payment", monthly,
            F.col("pay_channel"), F.lit(""))),
        "support": F.transform(_first(n, F.col("n_support"), 20), lambda i: _ev(
            uniform_back("support_day", i, 365), F.floor(U("support_tod", i) * 86400), "support_call", F.lit(0),
            _pick(("phone", "web", "app", "store"), U("support_channel", i), (0.6, 0.2, 0.15, 0.05)),
            _pick(SUPPORT_NOTES, U("support_note", i)))),
        "usage": F.transform(_first(n, F.col("n_usage"), 30), lambda i: _ev(
            uniform_back("usage_day", i, 90), F.floor(U("usage_tod", i) * 86400), "usage",
            F.least(F.lit(999_999), F.floor(-F.log(1.0 - U("usage_gb", i)) * usage_gb * 100)), F.lit("app"),
            F.lit(""))),
        "plans": F.transform(_first(n, F.col("n_plan"), 5), lambda i: _ev(
            uniform_back("plan_day", i, 365), F.floor(U("plan_tod", i) * 86400), "plan_change", F.lit(0),
            _pick(("web", "phone", "store"), U("plan_channel", i)), F.lit("plan change"))),
    })


def _logit_without_intercept() -> Column:
    flag = lambda cond: F.when(cond, 1.0).otherwise(0.0)  # noqa: E731
    col = F.col
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


def calibrate(spark: SparkSession, p: Params) -> tuple[float, dict]:
    """b0 such that the mean of sigmoid(b0 + x) over all customers equals the churn rate.

    One aggregation: customers grouped by x rounded to 1e-3 (a few thousand groups come back), then
    bisection on the driver. Also returns the number of pre-cutoff events (it sizes the events files)."""
    import numpy as np

    lat = latent_customers(spark, p, None)
    n_events = sum(F.size(F.col(c)) for c in ("charges", "payments", "late", "support", "usage", "plans"))
    rows = (lat.groupBy(F.round("logit_x", 3).alias("x"))
            .agg(F.count(F.lit(1)).alias("w"), F.sum(n_events).alias("e")).collect())  # aggregated: one row per rounded logit
    x = np.array([r["x"] for r in rows], dtype=float)
    w = np.array([r["w"] for r in rows], dtype=float)
    mean = lambda b: float(np.sum(w / (1.0 + np.exp(-(b + x)))) / np.sum(w))  # noqa: E731
    lo, hi = -30.0, 30.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(mid) < p.churn_rate else (lo, mid)
    b0 = round((lo + hi) / 2, 10)
    return b0, {"events": int(sum(r["e"] for r in rows)), "expected_churners": p.churn_rate * p.customers}


def truth_frame(spark: SparkSession, customers: int, seed: int = 7, as_of: str = "2026-06-30",
                churn_rate: float = 0.2, defect_rate: float = 0.01, partitions: int | None = None) -> DataFrame:
    """The customer-level truth exactly as run() writes it to _truth (no CSV, no events): customer_id,
    churn_probability, churned, rejected."""
    p = validate(customers, seed, as_of, churn_rate, defect_rate, {}, 1_000_000, "none", partitions)
    b0, _ = calibrate(spark, p)
    return latent_customers(spark, p, b0).select("customer_id", "churn_probability", "churned", "rejected")


def churn_summary(truth: DataFrame, p: Params) -> dict:
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    agg = truth.agg(F.avg(F.col("churned").cast("double")).alias("rate"),
                    F.sum(F.when(~F.col("rejected"), 1).otherwise(0)).alias("gold")).first()
    gold = truth.where(~F.col("rejected")).select(
        F.col("churn_probability"), F.col("churned").cast("double").alias("label"))
    auc = BinaryClassificationEvaluator(rawPredictionCol="churn_probability", labelCol="label",
                                        metricName="areaUnderROC").evaluate(gold)
    return {"configured_rate": p.churn_rate, "realised_rate": round(float(agg["rate"]), 6),
            "oracle_auc": round(float(auc), 6), "label_window_days": C.LABEL_WINDOW_DAYS,
            "customers_in_gold": int(agg["gold"])}


# =========================================================================================================
# Defects
# =========================================================================================================
def _kind_expr(u: Column, p: Params, dataset: str) -> Column:
    """The defect kind of a row ('none' when clean), by cumulative per-kind rates."""
    acc, expr = 0.0, None
    for kind in C.DEFECT_KINDS[dataset]:
        if p.rates[kind] <= 0:
            continue
        acc += p.rates[kind]
        expr = F.when(u < acc, kind) if expr is None else expr.when(u < acc, kind)
    return F.lit("none") if expr is None else expr.otherwise("none")


_SPELLING_OF = {col: {canon: next((s for s, c in sp.items() if c == canon), None) for canon in C.CATEGORIES[col]}
                for col, sp in C.SPELLINGS.items()}


def _messy(col: str, v: Column, u_form: Column, u_shape: Column) -> Column:
    """The same category, written as a person or a legacy export would: a known spelling half of the time,
    mixed case, stray and doubled spaces. lower(trim(collapse-spaces(x))) gives back the canonical value
    or a known spelling of it."""
    spelled = v
    for canon, s in _SPELLING_OF.get(col, {}).items():
        if s is not None:
            spelled = F.when(v == canon, F.lit(s)).otherwise(spelled)
    base = F.when(u_form < 0.5, spelled).otherwise(v)
    half = (F.length(base) / 2).cast("int")
    return (F.when(u_shape < 1 / 3, F.concat(F.lit("  "), F.upper(base), F.lit(" ")))
            .when(u_shape < 2 / 3, F.concat(F.lit(" "), F.regexp_replace(F.lower(base), " ", "  "), F.lit("  ")))
            .otherwise(F.concat(F.lit(" "), F.lower(base.substr(F.lit(1), half)),
                                F.upper(base.substr(half + 1, F.lit(1000))))))


def _unknown(col: str) -> str:
    return UNKNOWN_VALUES.get(col, UNKNOWN_YES_NO)


def _inject(fields: dict[str, Column], kind: Column, u_field: Column, u_var: Column, u_val: Column,
            rules: dict[str, list[tuple[str, Column]]]) -> dict[str, Column]:
    """Replace one field per defect kind: ``rules[kind]`` lists (field, bad value); u_field picks one."""
    out = dict(fields)
    for k, options in rules.items():
        for i, (name, bad) in enumerate(options):
            chosen = (kind == k) & (F.floor(u_field * len(options)) == i)
            out[name] = F.when(chosen, bad).otherwise(out[name])
    return out


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
def csv_field(v: Column) -> Column:
    """One CSV field: quoted (inner quotes doubled) when it holds ',', '"', CR or LF; null writes as empty."""
    v = F.coalesce(v, F.lit(""))
    return F.when(v.rlike('[,"\r\n]'), F.concat(F.lit('"'), F.regexp_replace(v, '"', '""'), F.lit('"'))).otherwise(v)


def csv_line(columns: list[Column]) -> Column:
    return F.concat_ws(",", *[csv_field(c) for c in columns])


def with_csv_line(df: DataFrame, columns: tuple[str, ...], out: str = "line") -> DataFrame:
    """Adds ``out``: the CSV record of ``columns`` (no line end)."""
    return df.withColumn(out, csv_line([F.col(c) for c in columns]))


def _wrong_field_count(fields: list[Column], u: Column) -> Column:
    """One field dropped (the last) or one extra field added."""
    return F.when(u < 0.5, csv_line(fields[:-1])).otherwise(F.concat(csv_line(fields), F.lit(",extra")))


def customer_rows(latent: DataFrame, p: Params, n_files: int) -> DataFrame:
    """Customer CSV records: file_index, sort keys (k1, k2, k3), line, kind."""
    seed, n = p.seed, F.col("n")
    U = lambda salt, *k: uniform(seed, salt, n, *k)  # noqa: E731
    copies = (F.when(F.col("kind") == "exact_duplicate", F.array(F.lit(0), F.lit(1)))
              .when(F.col("kind") == "conflicting_duplicate", F.array(F.lit(0), F.lit(2)))
              .otherwise(F.array(F.lit(0))))
    df = latent.select("*", F.explode(copies).alias("copy"))
    copy = F.col("copy")
    kind = (F.when(copy == 1, "exact_duplicate").when(copy == 2, "conflicting_duplicate")
            .when(F.col("kind").isin(*ADDED_ROW_KINDS), "none").otherwise(F.col("kind")))
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
        "updated_at": _ts_str(updated),
        "signup_date": F.col("signup_date").cast("string"),
        "birth_date": F.col("birth_date").cast("string"),
        "contract_type": F.when(older, rotate("contract_type", contracts)).otherwise(F.col("contract_type")),
        "payment_method": F.when(older, rotate("payment_method", payments)).otherwise(F.col("payment_method")),
        "monthly_charges": _cents_str(F.when(older, F.col("monthly_cents") - 500).otherwise(F.col("monthly_cents"))),
    })
    u_field, u_var, u_val = U("defect_field", copy), U("defect_variant", copy), U("defect_value", copy)
    signup, birth = F.col("signup_date"), F.col("birth_date")
    as_of = F.lit(p.as_of)
    time_part = F.substring(fields["updated_at"], 12, 8)
    rules = {
        "invalid_utf8": [("address", F.concat(F.split(F.col("address"), " ")[0], F.lit(f" Caf{LATIN1_E_ACUTE} St")))],
        "missing_required": [(c, F.lit("")) for c in C.REQUIRED["customers"] if c != "customer_id"],
        "bad_number": [("monthly_charges", _bad_number(fields["monthly_charges"], u_var))],
        "bad_date": [("signup_date", _bad_date(fields["signup_date"], None, u_var)),
                     ("birth_date", _bad_date(fields["birth_date"], None, u_var)),
                     ("updated_at", _bad_date(fields["updated_at"], time_part, u_var))],
        "unknown_category": [(c, F.lit(_unknown(c))) for c in C.CUSTOMER_CATEGORICALS],
        "messy_category": [(c, _messy(c, F.col(c), u_var, u_val)) for c in C.CUSTOMER_CATEGORICALS],
        "out_of_range": [("monthly_charges", F.when(u_var < 0.5, F.concat(F.lit("-"), fields["monthly_charges"]))
                          .otherwise(_cents_str(F.col("monthly_cents") + 100_000)))],
        "impossible_date": [
            ("signup_date", F.when(u_var < 0.5, F.date_add(as_of, 1 + F.floor(u_val * 365).cast("int")))
             .otherwise(F.date_add(F.lit(dt.date(1990, 1, 1)), F.floor(u_val * 2900).cast("int"))).cast("string")),
            ("birth_date", F.when(u_var < 0.5, F.add_months(signup, -12 * 10))
             .otherwise(F.add_months(signup, -12 * 120)).cast("string"))],
        "tricky_quoting": [("address", _tricky(F.col("address"), u_var, "Apt 4"))],
    }
    fields = _inject(fields, kind, u_field, u_var, u_val, rules)
    ordered = [fields[c] for c in C.CUSTOMER_COLUMNS]
    line = F.when(kind == "wrong_field_count", _wrong_field_count(ordered, u_var)).otherwise(csv_line(ordered))
    return df.select(
        F.floor(n * n_files / p.customers).cast("int").alias("file_index"),
        n.alias("k1"), F.lit(0).cast("int").alias("k2"), copy.cast("int").alias("k3"),
        line.alias("line"), kind.alias("kind"), F.lit(False).alias("cascade"))


def event_rows(latent: DataFrame, p: Params, n_files: int) -> DataFrame:
    """Event CSV records: file_index, sort keys (customer number, event index, copy), line, kind, cascade."""
    seed, n = p.seed, F.col("n")
    df = latent.select("n", "customer_id", "rejected", F.posexplode("events").alias("idx", "e"))
    key = -(n * EVENT_SLOTS + F.col("idx")) - 1   # negative: draws never coincide with a customer's
    U = lambda salt, *k: uniform(seed, salt, key, *k)  # noqa: E731
    base_kind = _kind_expr(U("defect"), p, "events")
    # Rejected customers' events stay clean (clean sets them all aside); a termination is never quarantined,
    # so every churner's label reaches gold.
    base_kind = (F.when(F.col("rejected"), "none")
                 .when((F.col("e.type") == "termination") & base_kind.isin(*REJECTING_KINDS, "unknown_customer"),
                       "none")
                 .otherwise(base_kind))
    df = df.withColumn("bkind", base_kind)
    copies = (F.when(F.col("bkind") == "exact_duplicate", F.array(F.lit(0), F.lit(1)))
              .when(F.col("bkind") == "unknown_customer", F.array(F.lit(0), F.lit(2)))
              .otherwise(F.array(F.lit(0))))
    df = df.select("*", F.explode(copies).alias("copy"))
    copy = F.col("copy")
    kind = (F.when(copy == 1, "exact_duplicate").when(copy == 2, "unknown_customer")
            .when(F.col("bkind").isin(*ADDED_ROW_KINDS), "none").otherwise(F.col("bkind")))
    stranger = n + p.customers   # a customer number no customer row has
    owner = F.when(copy == 2, stranger).otherwise(n)
    ts = _ts_str(F.col("e.day").cast("long") * 86400 + F.col("e.tod"))
    fields = {
        "event_id": F.concat(F.lit("E"), F.lpad((owner * EVENT_SLOTS + F.col("idx")).cast("string"), 12, "0")),
        "customer_id": F.when(copy == 2, F.concat(F.lit("C"), F.lpad(stranger.cast("string"), 10, "0")))
                        .otherwise(F.col("customer_id")),
        "event_ts": ts,
        "event_type": F.col("e.type"),
        "amount": _cents_str(F.col("e.cents")),
        "channel": F.col("e.channel"),
        "note": F.col("e.note"),
    }
    u_field, u_var, u_val = U("defect_field", copy), U("defect_variant", copy), U("defect_value", copy)
    as_of_day = _epoch_day(p.as_of)
    time_part = F.substring(ts, 12, 8)
    rules = {
        "invalid_utf8": [("note", F.concat(F.when(F.col("e.note") == "", "visit").otherwise(F.col("e.note")),
                                           F.lit(f" caf{LATIN1_E_ACUTE}")))],
        "missing_required": [(c, F.lit("")) for c in C.REQUIRED["events"] if c not in ("event_id", "customer_id")],
        "bad_number": [("amount", _bad_number(fields["amount"], u_var))],
        "bad_date": [("event_ts", _bad_date(ts, time_part, u_var))],
        "unknown_category": [(c, F.lit(_unknown(c))) for c in C.EVENT_CATEGORICALS],
        "messy_category": [(c, _messy(c, fields[c], u_var, u_val)) for c in C.EVENT_CATEGORICALS],
        "out_of_range": [("amount", F.when(u_var < 0.5, F.concat(F.lit("-"), _cents_str(F.col("e.cents") + 100)))
                          .otherwise(_cents_str(F.col("e.cents") + 1_000_100)))],
        "impossible_date": [("event_ts", F.concat(_date_str(
            F.when(u_var < 0.5, F.lit(as_of_day + 1) + F.floor(u_val * 365))
            .otherwise(F.lit(_epoch_day(dt.date(1999, 1, 1))) + F.floor(u_val * 364))), F.lit(" "), time_part))],
        "tricky_quoting": [("note", _tricky(F.when(F.col("e.note") == "", "called").otherwise(F.col("e.note")),
                                            u_var, "follow-up"))],
    }
    fields = _inject(fields, kind, u_field, u_var, u_val, rules)
    ordered = [fields[c] for c in C.EVENT_COLUMNS]
    line = F.when(kind == "wrong_field_count", _wrong_field_count(ordered, u_var)).otherwise(csv_line(ordered))
    return df.select(
        F.floor(n * n_files / p.customers).cast("int").alias("file_index"),
        n.alias("k1"), F.col("idx").cast("int").alias("k2"), copy.cast("int").alias("k3"),
        line.alias("line"), kind.alias("kind"), (F.col("rejected") & (copy == 0)).alias("cascade"))


# =========================================================================================================
# Writing: one file per file_index, sorted, header first, renamed to its final name
# =========================================================================================================
def _files_for(records: float, rows_per_file: int) -> int:
    return max(1, math.ceil(records / rows_per_file))


def _observed(rows: DataFrame, dataset: str) -> tuple[DataFrame, Observation]:
    """Counts per defect kind gathered while the rows are written (no second pass over the data)."""
    obs = Observation()
    metrics = [F.count(F.lit(1)).alias("records"),
               F.sum(F.col("cascade").cast("long")).alias("cascade")]
    metrics += [F.sum(F.when(F.col("kind") == k, 1).otherwise(0)).alias(k) for k in C.DEFECT_KINDS[dataset]]
    return rows.observe(obs, *metrics), obs


def _physical_lines(rows: DataFrame) -> DataFrame:
    """One row per physical line: a record with quoted newlines becomes several rows (k4 orders them), so the
    CSV writer below never sees a newline inside a value (it would quote the value itself)."""
    parts = F.when(F.col("line").contains("\n"), F.split("line", "\n")).otherwise(F.array("line"))
    return rows.select("file_index", "k1", "k2", "k3", F.posexplode(parts).alias("k4", "line"))


def _write_csv(spark: SparkSession, fs: "_Fs", rows: DataFrame, dataset: str, n_files: int, p: Params) -> None:
    header = ",".join(C.DATASETS[dataset])
    headers = spark.range(n_files).select(
        F.col("id").cast("int").alias("file_index"), F.lit(-1).cast("long").alias("k1"),
        F.lit(0).cast("int").alias("k2"), F.lit(0).cast("int").alias("k3"), F.lit(0).alias("k4"),
        F.lit(header).alias("line"))
    lines = _physical_lines(rows).unionByName(headers)
    shuffle = min(n_files, p.partitions or int(spark.conf.get("spark.sql.shuffle.partitions")))
    tmp = fs.path(f"_tmp/{dataset}")
    (lines.repartition(max(1, shuffle), "file_index")
     .sortWithinPartitions("file_index", "k1", "k2", "k3", "k4")
     .select("line", "file_index")
     .write.mode("overwrite").partitionBy("file_index")
     # ISO-8859-1 writes each char < 256 as one byte (ASCII unchanged, the invalid_utf8 defect's 0xE9 as is);
     # no quoting or escaping by the writer: the line is already a finished CSV record.
     .option("sep", "\u0001").option("quote", "").option("escapeQuotes", "false").option("quoteAll", "false")
     .option("ignoreLeadingWhiteSpace", "false").option("ignoreTrailingWhiteSpace", "false")
     .option("encoding", "ISO-8859-1").option("lineSep", "\n").option("header", "false")
     .option("compression", p.compression).csv(tmp))
    ext = ".csv.gz" if p.compression == "gzip" else ".csv"
    fs.mkdirs(dataset)
    for i in range(n_files):
        parts = [s for s in fs.list(f"_tmp/{dataset}/file_index={i}") if s.startswith("part-")]
        if len(parts) != 1:
            raise RuntimeError(f"expected one part file for {dataset} file {i}, found {parts}")
        fs.rename(f"_tmp/{dataset}/file_index={i}/{parts[0]}", f"{dataset}/{dataset}-{i:05d}{ext}")
    fs.delete("_tmp")


def _dataset_manifest(spark: SparkSession, fs: "_Fs", dataset: str, metrics: dict) -> dict:
    """Per-file bytes, sha256 and record counts read back from the files; defect counts from the write."""
    d = fs.path(dataset)
    digests = {r["name"]: (int(r["length"]), r["sha"]) for r in spark.read.format("binaryFile").load(d).select(
        F.element_at(F.split("path", "/"), -1).alias("name"), "length", F.sha2("content", 256).alias("sha")).collect()}
    # Every record starts a line with its id (C/E + digit: no defect blanks or moves an id); a quoted newline
    # in free text is never followed by one (the generator's tails are "Apt 4" / "follow-up"), nor is the
    # header's first line. So records = occurrences of "\n" + C/E + digit.
    counts = {r["name"]: int(r["records"]) for r in spark.read.text(d, wholetext=True).select(
        F.element_at(F.split(F.input_file_name(), "/"), -1).alias("name"),
        F.regexp_count("value", F.lit("\n[CE][0-9]")).alias("records"))
        .collect()}
    files = {name: {"records": counts[name], "bytes": digests[name][0], "sha256": digests[name][1]}
             for name in sorted(digests)}
    records = int(metrics["records"])
    if sum(f["records"] for f in files.values()) != records:
        raise RuntimeError(f"{dataset}: records read back {sum(f['records'] for f in files.values())} "
                           f"!= records written {records}")
    defects = {k: int(metrics[k] or 0) for k in C.DEFECT_KINDS[dataset]}
    quarantined = {C.DEFECT_FATE[k][1]: defects[k] for k in C.DEFECT_KINDS[dataset]
                   if C.DEFECT_FATE[k][0] == C.QUARANTINE}
    if dataset == "events":
        quarantined[C.CASCADE_REASON] = int(metrics["cascade"] or 0)
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
