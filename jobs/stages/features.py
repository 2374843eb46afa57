"""Features: silver -> gold/customer_features, one row per silver customer: id, label and contract.FEATURES,
all doubles, no nulls. Meanings: docs/features.md.

    scripts/submit features --lake data/lake --as-of YYYY-MM-DD

Time: the as-of date is a whole day, so the last instant that counts is ``as_of 23:59:59``; the cutoff is
that instant minus LABEL_WINDOW_DAYS. Features see only events at or before the cutoff; the label looks at
terminations in (cutoff, as_of 23:59:59]. Events are aggregated in one pass (conditional aggregates).
"""
from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from jobs.core.params import AS_OF, LAKE
from jobs.core.stage import REQUIRED, Stage, StageRecord
from jobs.lake import delta_io
from jobs.lake.contract import FEATURES, ID, LABEL, LABEL_WINDOW_DAYS, ONE_HOT, YES_NO_FEATURES, one_hot_name
from jobs.lake.session import conf_flag

TENURE_CAP_MONTHS = 72
SENIOR_AGE = 65
SERVICE_FLAGS = ("phone_service", "multiple_lines", "online_security", "online_backup", "device_protection",
                 "tech_support", "streaming_tv", "streaming_movies")
TS = "yyyy-MM-dd HH:mm:ss"
SINCE_SIGNUP = "_days_since_signup"
# Delta keeps min/max/null counts of the first 32 columns of each file it writes: on gold's 45 columns, doubles no
# reader filters on, that was ~10% of the stage's warm time (300k customers, 2 cores). Kept for the id alone, the
# column a customer is looked up by (gold's files come from the join's hash partitions, so even the id's ranges
# overlap and skip little). A table property, set when the table is created.
GOLD_PROPERTIES = {"delta.dataSkippingStatsColumns": ID}
# Gold's counts (customers, churned) are taken as the write passes its rows (Spark's observe(), no second scan), or,
# where false, from gold read back after the write: the RAPIDS Accelerator 25.04 fails to plan a query holding
# observe()'s CollectMetricsExec ("aggregation function in an unexpected context") and then runs the whole query on
# the CPU, so conf/rapids.conf sets it false for the gpu profiles. Either way they must equal the rows Delta's commit
# reports.
COUNT_WITH_WRITE_KEY = "spark.churn.features.countWithWrite"


def gold_counts() -> tuple[Column, Column]:
    return F.count(F.lit(1)).alias("customers"), F.sum(LABEL).alias("churned")


def run(spark: SparkSession, lake: str, as_of: str) -> StageRecord:
    record = StageRecord(STAGE.name, extra={"as_of": as_of, "cutoff": str(cutoff_of(as_of))})
    customers, record.read["silver_customers"] = delta_io.read_table(spark, lake, "silver_customers")
    events, record.read["silver_events"] = delta_io.read_table(spark, lake, "silver_events")

    gold = build_features(customers, events, as_of)
    path = delta_io.table_path(lake, "gold_features")
    counted = conf_flag(spark, COUNT_WITH_WRITE_KEY, True)
    if counted:
        observation = Observation("gold_features")
        gold = gold.observe(observation, *gold_counts())
    commit = delta_io.overwrite_counted(gold, path, properties=GOLD_PROPERTIES)
    record.wrote["gold_features"] = commit.version
    if counted:
        row = observation.get
    else:
        written, _ = delta_io.read(spark, path, commit.version)
        row = written.agg(*gold_counts()).first().asDict()
    if commit.rows is not None and commit.rows != row["customers"]:
        raise RuntimeError(f"gold's commit {commit.version} wrote {commit.rows} rows, but {row['customers']} "
                           f"customers were counted in it")
    record.counts = {"customers": row["customers"], "rows": row["customers"], "churned": int(row["churned"] or 0)}
    return record


STAGE = Stage("features", "silver -> gold customer features + label", run,
              params=(LAKE, AS_OF.but(default=REQUIRED)), reads=("silver_customers", "silver_events"),
              writes=("gold_features",),
              describe=lambda r: f"customers {r.counts['customers']:,}, churned {r.counts['churned']:,}")


def build_features(customers: DataFrame, events: DataFrame, as_of: str) -> DataFrame:
    """Each customer's own features, computed on its row, left-joined to its events' aggregates. The customer side
    is cut to its features before the join, so the shuffle carries the id and ~30 numbers a customer instead of
    the silver row's strings. A shuffled hash join: the aggregates (one row of a few dozen numbers per customer) are
    hashed per partition, and neither side is sorted, where Spark's default join of two large sides sorts both by
    the string id (figures for both in docs/etl.md, "Features")."""
    cutoff = cutoff_of(as_of)
    return (customers
            .transform(customer_features(cutoff))
            .join(events.transform(event_aggregates(cutoff)).hint("shuffle_hash"), ID, "left")
            .transform(with_event_features(cutoff))
            .transform(gold_columns))


# ---------------------------------------------------------------------------------------------------------
# Time helpers (Python datetimes turned into literals parsed in the session time zone)
# ---------------------------------------------------------------------------------------------------------
def cutoff_of(as_of: str) -> dt.datetime:
    last_instant = dt.datetime.combine(dt.date.fromisoformat(as_of), dt.time(23, 59, 59))
    return last_instant - dt.timedelta(days=LABEL_WINDOW_DAYS)


def cutoff_date(cutoff: dt.datetime) -> Column:
    return F.lit(cutoff.date().isoformat()).cast("date")


def ts_lit(t: dt.datetime) -> Column:
    return F.to_timestamp(F.lit(t.strftime("%Y-%m-%d %H:%M:%S")), TS)


def in_window(cutoff: dt.datetime, days_from: int, days_to: int = 0) -> Column:
    """event_ts in (cutoff - days_from, cutoff - days_to]."""
    ts = F.col("event_ts")
    return ((ts > ts_lit(cutoff - dt.timedelta(days=days_from)))
            & (ts <= ts_lit(cutoff - dt.timedelta(days=days_to))))


# ---------------------------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------------------------
def event_aggregates(cutoff: dt.datetime):
    """One row per customer with events: every event feature's raw aggregate and the label, in one pass."""
    label_end = cutoff + dt.timedelta(days=LABEL_WINDOW_DAYS)

    def transform(df: DataFrame) -> DataFrame:
        ts, kind, amount = F.col("event_ts"), F.col("event_type"), F.col("amount")
        seen = ts <= ts_lit(cutoff)

        def n(cond: Column) -> Column:
            return F.count(F.when(cond, F.lit(1)))

        def total(cond: Column) -> Column:
            return F.sum(F.when(cond, amount))

        def mean(cond: Column) -> Column:
            return F.avg(F.when(cond, amount))

        charge, late = kind == "charge", kind == "late_payment"
        support, usage = kind == "support_call", kind == "usage"
        return df.groupBy(ID).agg(
            total(charge & in_window(cutoff, 180)).alias("charges_180d"),
            mean(charge & in_window(cutoff, 180)).alias("avg_charge_180d"),
            mean(charge & in_window(cutoff, 90)).alias("_avg_charge_0_90"),
            mean(charge & in_window(cutoff, 180, 90)).alias("_avg_charge_90_180"),
            n((kind == "payment") & in_window(cutoff, 180)).alias("payments_180d"),
            n(late & in_window(cutoff, 90)).alias("late_payments_90d"),
            n(late & in_window(cutoff, 180)).alias("late_payments_180d"),
            n(support & in_window(cutoff, 30)).alias("support_calls_30d"),
            n(support & in_window(cutoff, 90)).alias("support_calls_90d"),
            n(support & in_window(cutoff, 365)).alias("support_calls_365d"),
            n(usage & in_window(cutoff, 90)).alias("usage_events_90d"),
            total(usage & in_window(cutoff, 90)).alias("usage_amount_90d"),
            n((kind == "plan_change") & in_window(cutoff, 180)).alias("plan_changes_180d"),
            F.max(F.when(seen, ts)).alias("_last_event_ts"),
            F.max(F.when(seen & (kind == "payment"), ts)).alias("_last_payment_ts"),
            n(seen).alias("events_total"),
            F.max(F.when((kind == "termination") & (ts > ts_lit(cutoff)) & (ts <= ts_lit(label_end)),
                         F.lit(1.0))).alias(LABEL),
        )
    return transform


def customer_features(cutoff: dt.datetime):
    """Features of the customer row itself, measured at the cutoff date, with the days from signup to the cutoff
    date (``SINCE_SIGNUP``, the recency features' fallback): the id and numbers only (``gold_columns`` makes them
    doubles)."""
    def transform(df: DataFrame) -> DataFrame:
        cutoff_day = cutoff_date(cutoff)
        tenure = F.floor(F.months_between(cutoff_day, F.col("signup_date")))
        age = F.floor(F.months_between(cutoff_day, F.col("birth_date")) / 12)
        yes = lambda c: F.coalesce((F.col(c) == "Yes").cast("double"), F.lit(0.0))  # noqa: E731
        return (df
                .withColumn("age", age)
                .select(F.col(ID),
                        F.greatest(F.datediff(cutoff_day, F.col("signup_date")), F.lit(0)).alias(SINCE_SIGNUP),
                        F.least(F.greatest(tenure, F.lit(0)), F.lit(TENURE_CAP_MONTHS)).alias("tenure_months"),
                        F.col("age"),
                        (F.col("age") >= SENIOR_AGE).cast("double").alias("senior"),
                        F.col("monthly_charges"),
                        sum(yes(c) for c in SERVICE_FLAGS).alias("services_count"),
                        *[yes(c).alias(c) for c in YES_NO_FEATURES],
                        *[(F.col(c) == v).cast("double").alias(one_hot_name(c, v))
                          for c, values in ONE_HOT.items() for v in values]))
    return transform


def with_event_features(cutoff: dt.datetime):
    """Event features for customers without events default to 0; recency falls back to days since signup."""
    def days_since(col: str) -> Column:
        # greatest() skips nulls, so the fallback is chosen explicitly for customers without such events.
        return (F.when(F.col(col).isNull(), F.col(SINCE_SIGNUP))
                .otherwise(F.datediff(cutoff_date(cutoff), F.to_date(col))))

    def transform(df: DataFrame) -> DataFrame:
        trend = F.coalesce(F.col("_avg_charge_0_90") - F.col("_avg_charge_90_180"), F.lit(0.0))
        return (df.withColumn("charge_trend_90d", trend)
                .withColumn("days_since_last_event", days_since("_last_event_ts"))
                .withColumn("days_since_last_payment", days_since("_last_payment_ts")))
    return transform


def gold_columns(df: DataFrame) -> DataFrame:
    """id, label, then FEATURES in contract order; all doubles, nulls (no events, no value) as 0."""
    return df.select(F.col(ID), *[F.coalesce(F.col(c).cast("double"), F.lit(0.0)).alias(c)
                                  for c in (LABEL, *FEATURES)])
