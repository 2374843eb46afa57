"""Clean: bronze -> silver customers and events (typed, canonical, deduplicated, valid) + the 'clean' slice of
the quarantine.

    scripts/submit clean --lake data/lake --as-of YYYY-MM-DD

Each bronze row gets a fate, decided in this order (docs/etl.md):
1. the checks of ``contract.CLEAN_CHECK_ORDER``; the first failing one names the quarantine reason and
   ``detail`` names the column;
2. exact duplicates among the valid rows (identical raw CSV fields) are removed, the first copy in input
   order (source_file, record_number) kept, and counted;
3. customers: of several valid rows with one customer_id, the latest updated_at wins (ties: later in the
   input); the others go to quarantine as ``superseded``;
4. events: a customer_id in no customer row of the input -> ``unknown_customer``; in some customer row but
   not in silver (every row of that customer was quarantined) -> ``contract.CASCADE_REASON``. "Customer rows"
   are bronze plus the records ingest quarantined (wrong field count): their id is the raw text's first field.
Quarantine rows keep ``raw`` = the row's CSV fields as JSON (nulls included), so nothing is lost.
"""
from __future__ import annotations

from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs.core.params import AS_OF, LAKE
from jobs.core.stage import REQUIRED as NO_DEFAULT, Stage, StageRecord
from jobs.lake import delta_io
from jobs.lake.contract import (AGE_AT_SIGNUP_RANGE, AMOUNT_RANGE, CASCADE_REASON, CATEGORIES, CLEAN_CHECK_ORDER,
                                CUSTOMER_CATEGORICALS, CUSTOMER_COLUMNS, DATASETS, DATE_FORMAT, EARLIEST_DATE,
                                EVENT_CATEGORICALS, EVENT_COLUMNS, MONTHLY_CHARGES_RANGE, QUARANTINE_COLUMNS,
                                REQUIRED, SPELLINGS, TIMESTAMP_FORMAT)
from jobs.lake.session import conf_flag, together

# Whether the two classified frames are persisted for their two writes each (silver, then quarantine). The cpu
# profile keeps the default (the checks are the costly part on a CPU, and run once); gpu profiles set it to
# false: the GPU classifies again faster than Spark builds and reads a CPU-side cache of its output (with RAPIDS
# 25.04 building the caches took 40% of clean's time on an H200, on the CPU; docs/gpu.md).
PERSIST_KEY = "spark.churn.clean.persist"
LINEAGE = ("source_file", "record_number")
KEPT = "kept"          # value of the internal _fate column for rows that go to silver
DUPLICATE = "duplicate"

# Typed columns per dataset: name -> kind. Everything not listed stays a string.
NUMBERS = {"customers": {"monthly_charges": MONTHLY_CHARGES_RANGE}, "events": {"amount": AMOUNT_RANGE}}
DATES = {"customers": {"updated_at": TIMESTAMP_FORMAT, "signup_date": DATE_FORMAT, "birth_date": DATE_FORMAT},
         "events": {"event_ts": TIMESTAMP_FORMAT}}
CATEGORICALS = {"customers": CUSTOMER_CATEGORICALS, "events": EVENT_CATEGORICALS}
# A plain decimal; Spark's cast alone would also take "NaN", "Infinity", "1e3" or "1d".
NUMBER_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$"


def run(spark: SparkSession, lake: str, as_of: str) -> StageRecord:
    record = StageRecord(STAGE.name, extra={"as_of": as_of})
    bronze_c, record.read["bronze_customers"] = delta_io.read_table(spark, lake, "bronze_customers")
    bronze_e, record.read["bronze_events"] = delta_io.read_table(spark, lake, "bronze_events")
    ingest_q, record.read["quarantine"] = delta_io.read_table(spark, lake, "quarantine")

    # Each classified frame feeds two writes (silver, quarantine): held (see PERSIST_KEY) so the checks run once.
    customers = held(spark, bronze_c.transform(with_checks("customers", as_of))
                     .transform(with_duplicates_marked(CUSTOMER_COLUMNS))
                     .transform(with_superseded_marked))
    record.wrote["silver_customers"] = delta_io.overwrite(
        customers.transform(silver_rows("customers")).repartition("customer_id"),
        delta_io.table_path(lake, "silver_customers"))
    silver_c, _ = delta_io.read_table(spark, lake, "silver_customers", record.wrote["silver_customers"])

    events = held(spark, bronze_e.transform(with_checks("events", as_of))
                  .transform(with_duplicates_marked(EVENT_COLUMNS))
                  .transform(with_customer_reasons(customer_row_ids(bronze_c, ingest_q), silver_c)))
    # Hash by customer: the features stage aggregates per customer; adaptive execution sizes the files.
    silver_e = events.transform(silver_rows("events")).repartition("customer_id")
    quarantine = (customers.transform(quarantine_rows("customers"))
                  .unionByName(events.transform(quarantine_rows("events")))
                  .repartition("dataset", "source_file"))
    # Two writes of different tables, side by side: under the gpu profiles the silver events' Delta write runs on
    # the CPU (RAPIDS 25.04 has no Delta 3.3 writer) while the quarantine's classification runs on the GPU.
    record.wrote.update(together({
        "silver_events": lambda: delta_io.overwrite(silver_e, delta_io.table_path(lake, "silver_events")),
        "quarantine": lambda: delta_io.replace_where(quarantine, delta_io.table_path(lake, "quarantine"),
                                                     f"stage = '{STAGE.name}'"),
    }))
    customers.unpersist()
    events.unpersist()

    record.counts = accounting(spark, lake, record)
    return record


def _describe(record: StageRecord) -> str:
    return "; ".join(f"{ds}: silver {t['silver']:,} quarantined {sum(t['quarantined'].values()):,} "
                     f"duplicates_removed {t['duplicates_removed']:,}" for ds, t in record.counts["totals"].items())


STAGE = Stage("clean", "bronze -> silver (typed, canonical, deduplicated) + the quarantine's clean slice", run,
              params=(LAKE, AS_OF.but(default=NO_DEFAULT)),
              reads=("bronze_customers", "bronze_events", "quarantine"),
              writes=("silver_customers", "silver_events", "quarantine"), describe=_describe)


def held(spark: SparkSession, df: DataFrame) -> DataFrame:
    """``df`` persisted (memory, then disk) unless the profile sets ``PERSIST_KEY`` to false; then each write
    computes it again. Every step is deterministic (each window has a total order), so both ways write the
    same rows."""
    if not conf_flag(spark, PERSIST_KEY, True):
        return df
    return df.persist(StorageLevel.MEMORY_AND_DISK)


# ---------------------------------------------------------------------------------------------------------
# Column helpers
# ---------------------------------------------------------------------------------------------------------
def is_blank(c: Column) -> Column:
    return c.isNull() | (F.trim(c) == "")


def category_key(c: Column) -> Column:
    """How spellings are matched: lower case, trimmed, inner runs of white space collapsed to one space."""
    return F.trim(F.regexp_replace(F.lower(c), r"\s+", " "))


def canonical_category(column: str) -> Column:
    """Canonical value of a categorical column, null if blank or unknown (a literal map: GPU-friendly)."""
    lookup = {v.lower(): v for v in CATEGORIES[column]}
    lookup.update(SPELLINGS.get(column, {}))
    pairs = [F.lit(x) for kv in sorted(lookup.items()) for x in kv]
    return F.create_map(*pairs)[category_key(F.col(column))]


def parsed_number(column: str) -> Column:
    c = F.trim(F.col(column))
    return F.when(c.rlike(NUMBER_PATTERN), c.cast("double"))


def parsed_date(column: str, fmt: str) -> Column:
    c = F.trim(F.col(column))
    return F.to_timestamp(c, fmt) if "HH" in fmt else F.to_date(c, fmt)


def first_column(conditions: dict[str, Column]) -> Column:
    """Name of the first column whose condition holds, else null."""
    return F.coalesce(*[F.when(cond, F.lit(name)) for name, cond in conditions.items()], F.lit(None))


# ---------------------------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------------------------
def with_checks(dataset: str, as_of: str):
    """Adds ``reason`` / ``detail`` (null for a valid row) and the typed, canonical columns ``t_<name>``."""
    columns = DATASETS[dataset]

    def transform(df: DataFrame) -> DataFrame:
        typed = {c: parsed_number(c) for c in NUMBERS[dataset]}
        typed.update({c: parsed_date(c, fmt) for c, fmt in DATES[dataset].items()})
        typed.update({c: canonical_category(c) for c in CATEGORICALS[dataset]})
        df = df.select("*", *[expr.alias(f"t_{c}") for c, expr in typed.items()])
        t = lambda c: F.col(f"t_{c}")  # noqa: E731
        checks = {
            "invalid_utf8": first_column({c: F.col(c).contains("\ufffd") for c in columns}),
            "missing_required": first_column({c: is_blank(F.col(c)) for c in REQUIRED[dataset]}),
            "bad_number": first_column({c: ~is_blank(F.col(c)) & t(c).isNull() for c in NUMBERS[dataset]}),
            "bad_date": first_column({c: ~is_blank(F.col(c)) & t(c).isNull() for c in DATES[dataset]}),
            "unknown_category": first_column({c: ~is_blank(F.col(c)) & t(c).isNull()
                                              for c in CATEGORICALS[dataset]}),
            "out_of_range": first_column({c: ~t(c).between(lo, hi) for c, (lo, hi) in NUMBERS[dataset].items()}),
            "impossible_date": first_column(impossible_dates(dataset, as_of)),
        }
        reason = reduce(lambda acc, name: acc.when(checks[name].isNotNull(), F.lit(name)),
                        CLEAN_CHECK_ORDER[1:], F.when(checks[CLEAN_CHECK_ORDER[0]].isNotNull(),
                                                      F.lit(CLEAN_CHECK_ORDER[0])))
        detail = F.coalesce(*[checks[name] for name in CLEAN_CHECK_ORDER])
        return df.withColumn("reason", reason).withColumn("detail", detail)
    return transform


def impossible_dates(dataset: str, as_of: str) -> dict[str, Column]:
    """Dates that parse but cannot be true: after the as-of date, before EARLIEST_DATE, or (customers) an age
    at signup outside AGE_AT_SIGNUP_RANGE (whole years)."""
    as_of_d, earliest = F.lit(as_of).cast("date"), F.lit(EARLIEST_DATE).cast("date")
    if dataset == "events":
        day = F.to_date(F.col("t_event_ts"))
        return {"event_ts": (day > as_of_d) | (day < earliest)}
    signup = F.col("t_signup_date")
    age = F.floor(F.months_between(signup, F.col("t_birth_date")) / 12)
    lo, hi = AGE_AT_SIGNUP_RANGE
    return {"signup_date": (signup > as_of_d) | (signup < earliest), "birth_date": ~age.between(lo, hi)}


def with_duplicates_marked(columns: tuple[str, ...]):
    """``_fate`` = 'duplicate' for every valid row but the first (in input order) of identical raw fields;
    'kept' for the other valid rows, the reason for invalid ones. Exact means the CSV fields as read, byte for
    byte: two rows that differ only in spelling are different records (and, for customers, a conflict)."""
    def transform(df: DataFrame) -> DataFrame:
        # Invalid rows are partitioned apart: they are never duplicates, each keeps its own reason.
        ranked = (df.withColumn("_valid", F.col("reason").isNull())
                  .withColumn("_copy", F.row_number().over(Window.partitionBy("_valid", *columns)
                                                          .orderBy(*LINEAGE))))
        fate = (F.when(~F.col("_valid"), F.col("reason"))
                .when(F.col("_copy") > 1, F.lit(DUPLICATE)).otherwise(F.lit(KEPT)))
        return ranked.withColumn("_fate", fate).drop("_valid", "_copy")
    return transform


def with_superseded_marked(df: DataFrame) -> DataFrame:
    """Of the kept rows of one customer_id, the latest updated_at wins (ties: the later record in the input);
    the others get reason 'superseded' and, as detail, where the winning row is."""
    order = Window.partitionBy("_kept", "customer_id").orderBy(
        F.col("t_updated_at").desc(), F.col("source_file").desc(), F.col("record_number").desc())
    # The winner as a running first() over a ROWS frame: the order is total (record_number is unique within a
    # file), so it equals the default RANGE frame, and the RAPIDS Accelerator runs a ROWS frame on the GPU (a
    # RANGE frame over several order columns stays on the CPU).
    ranked = (df.withColumn("_kept", F.col("_fate") == KEPT)
              .withColumn("_rank", F.row_number().over(order))
              .withColumn("_winner", F.first(F.concat_ws(":", "source_file", F.col("record_number").cast("string")))
                          .over(order.rowsBetween(Window.unboundedPreceding, Window.currentRow))))
    loses = F.col("_kept") & (F.col("_rank") > 1)
    return (ranked
            .withColumn("reason", F.when(loses, F.lit("superseded")).otherwise(F.col("reason")))
            .withColumn("detail", F.when(loses, F.concat(F.lit("superseded by "), F.col("_winner")))
                        .otherwise(F.col("detail")))
            .withColumn("_fate", F.when(loses, F.lit("superseded")).otherwise(F.col("_fate")))
            .drop("_kept", "_rank", "_winner"))


def customer_row_ids(bronze_customers: DataFrame, quarantine: DataFrame) -> DataFrame:
    """customer_id of every customer record in the input: bronze rows, and the records ingest quarantined for
    a wrong field count (the first CSV field of their raw text; ids hold no comma or quote)."""
    malformed = quarantine.where((F.col("stage") == "ingest") & (F.col("dataset") == "customers"))
    first_field = F.regexp_extract(F.col("raw"), r'^"?([^",\r\n]*)', 1)
    return (bronze_customers.select("customer_id")
            .unionByName(malformed.select(first_field.alias("customer_id"))))


def with_customer_reasons(customer_ids: DataFrame, silver_customers: DataFrame):
    """Kept events whose customer is in no customer row -> 'unknown_customer'; in some but not in silver
    (every row of the customer quarantined) -> CASCADE_REASON. ``customer_ids``: see customer_row_ids."""
    def transform(df: DataFrame) -> DataFrame:
        known = (customer_ids.select(F.trim("customer_id").alias("_cid")).distinct()
                 .join(silver_customers.select(F.col("customer_id").alias("_cid"),
                                               F.lit(True).alias("_in_silver")), "_cid", "left"))
        joined = df.join(known, F.trim(df["customer_id"]) == known["_cid"], "left")
        kept = F.col("_fate") == KEPT
        new_reason = (F.when(kept & F.col("_cid").isNull(), F.lit("unknown_customer"))
                      .when(kept & F.col("_in_silver").isNull(), F.lit(CASCADE_REASON)))
        return (joined
                .withColumn("reason", F.coalesce(new_reason, F.col("reason")))
                .withColumn("detail", F.when(new_reason.isNotNull(), F.lit("customer_id"))
                            .otherwise(F.col("detail")))
                .withColumn("_fate", F.coalesce(new_reason, F.col("_fate")))
                .drop("_cid", "_in_silver"))
    return transform


def silver_rows(dataset: str):
    """Kept rows with typed, canonical columns in contract order, plus lineage."""
    columns = DATASETS[dataset]
    typed = set(NUMBERS[dataset]) | set(DATES[dataset]) | set(CATEGORICALS[dataset])

    def transform(df: DataFrame) -> DataFrame:
        out = [F.col(f"t_{c}").alias(c) if c in typed else F.trim(F.col(c)).alias(c) if c.endswith("_id")
               else F.col(c) for c in columns]
        return df.where(F.col("_fate") == KEPT).select(*out, *LINEAGE)
    return transform


def quarantine_rows(dataset: str):
    """Rows with a reason, in quarantine shape; ``raw`` holds every CSV field (nulls too) as JSON."""
    columns = DATASETS[dataset]

    def transform(df: DataFrame) -> DataFrame:
        raw = F.to_json(F.struct(*columns), {"ignoreNullFields": "false"})
        return df.where(F.col("reason").isNotNull()).select(
            F.lit(dataset).alias("dataset"), F.lit(STAGE.name).alias("stage"), *LINEAGE,
            raw.alias("raw"), "reason", "detail").select(*QUARANTINE_COLUMNS)
    return transform


# ---------------------------------------------------------------------------------------------------------
# Accounting: one aggregation over the tables read and written.
# ---------------------------------------------------------------------------------------------------------
def accounting(spark: SparkSession, lake: str, record: StageRecord) -> dict:
    """Per dataset and per file: bronze rows in = silver + quarantined (by reason) + duplicates removed."""
    parts = []
    for ds in DATASETS:
        bronze, _ = delta_io.read(spark, delta_io.table_path(lake, f"bronze_{ds}"), record.read[f"bronze_{ds}"])
        silver, _ = delta_io.read(spark, delta_io.table_path(lake, f"silver_{ds}"), record.wrote[f"silver_{ds}"])
        parts.append(bronze.select(F.lit(ds).alias("dataset"), "source_file", F.lit("bronze").alias("kind")))
        parts.append(silver.select(F.lit(ds).alias("dataset"), "source_file", F.lit("silver").alias("kind")))
    q, _ = delta_io.read(spark, delta_io.table_path(lake, "quarantine"), record.wrote["quarantine"])
    parts.append(q.where(F.col("stage") == STAGE.name).select("dataset", "source_file", F.col("reason").alias("kind")))
    rows = (reduce(DataFrame.unionByName, parts).groupBy("dataset", "source_file", "kind")
            .agg(F.count(F.lit(1)).alias("n")).collect())  # a few rows per input file
    files: dict = {ds: {} for ds in DATASETS}
    for r in rows:
        f = files[r["dataset"]].setdefault(r["source_file"], {"bronze": 0, "silver": 0, "quarantined": {}})
        if r["kind"] in ("bronze", "silver"):
            f[r["kind"]] = r["n"]
        else:
            f["quarantined"][r["kind"]] = r["n"]
    totals = {}
    for ds, per_file in files.items():
        for f in per_file.values():
            f["duplicates_removed"] = f["bronze"] - f["silver"] - sum(f["quarantined"].values())
        reasons: dict[str, int] = {}
        for f in per_file.values():
            for k, n in f["quarantined"].items():
                reasons[k] = reasons.get(k, 0) + n
        totals[ds] = {"bronze": sum(f["bronze"] for f in per_file.values()),
                      "silver": sum(f["silver"] for f in per_file.values()),
                      "quarantined": dict(sorted(reasons.items())),
                      "duplicates_removed": sum(f["duplicates_removed"] for f in per_file.values())}
    # Flat figures first (rows in silver per dataset, quarantined in all, duplicates per dataset) for
    # progress lines and the report.
    return {**{ds: totals[ds]["silver"] for ds in DATASETS},
            "quarantined": sum(sum(t["quarantined"].values()) for t in totals.values()),
            "duplicates_removed": {ds: totals[ds]["duplicates_removed"] for ds in DATASETS},
            "files": {ds: dict(sorted(files[ds].items())) for ds in DATASETS}, "totals": totals}
