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
from jobs.lake.sqltext import expr, ident, literal

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


def cutoff_date(cutoff: dt.datetime) -> str:
    return f"CAST({literal(cutoff.date().isoformat())} AS DATE)"


def ts_lit(t: dt.datetime) -> str:
    return f"to_timestamp({literal(t.strftime('%Y-%m-%d %H:%M:%S'))}, {literal(TS)})"


def in_window(cutoff: dt.datetime, days_from: int, days_to: int = 0) -> str:
    """event_ts in (cutoff - days_from, cutoff - days_to]."""
    return (f"(event_ts > {ts_lit(cutoff - dt.timedelta(days=days_from))}"
            f" AND event_ts <= {ts_lit(cutoff - dt.timedelta(days=days_to))})")


# ---------------------------------------------------------------------------------------------------------
# Transforms: expressions as SQL text (jobs/lake/sqltext.py), one call to the JVM each
# ---------------------------------------------------------------------------------------------------------
def event_aggregates(cutoff: dt.datetime):
    """One row per customer with events: every event feature's raw aggregate and the label, in one pass."""
    label_end = cutoff + dt.timedelta(days=LABEL_WINDOW_DAYS)
    seen = f"event_ts <= {ts_lit(cutoff)}"
    kind = lambda k: f"event_type = {literal(k)}"  # noqa: E731
    charge, late, support, usage = kind("charge"), kind("late_payment"), kind("support_call"), kind("usage")
    # Each aggregate's condition as its FILTER clause, not a CASE inside it: a row the condition leaves out does not
    # touch that aggregate's buffer (with CASE every row updated all 20 buffer fields; a row counts in 2-5 of the
    # 17 aggregates). The same rows reach each aggregate in the same order: the same values to the last bit.
    n = lambda cond: f"count(1) FILTER (WHERE {cond})"  # noqa: E731
    total = lambda cond: f"sum(amount) FILTER (WHERE {cond})"  # noqa: E731
    mean = lambda cond: f"avg(amount) FILTER (WHERE {cond})"  # noqa: E731
    aggregates = {
        "charges_180d": total(f"{charge} AND {in_window(cutoff, 180)}"),
        "avg_charge_180d": mean(f"{charge} AND {in_window(cutoff, 180)}"),
        "_avg_charge_0_90": mean(f"{charge} AND {in_window(cutoff, 90)}"),
        "_avg_charge_90_180": mean(f"{charge} AND {in_window(cutoff, 180, 90)}"),
        "payments_180d": n(f"{kind('payment')} AND {in_window(cutoff, 180)}"),
        "late_payments_90d": n(f"{late} AND {in_window(cutoff, 90)}"),
        "late_payments_180d": n(f"{late} AND {in_window(cutoff, 180)}"),
        "support_calls_30d": n(f"{support} AND {in_window(cutoff, 30)}"),
        "support_calls_90d": n(f"{support} AND {in_window(cutoff, 90)}"),
        "support_calls_365d": n(f"{support} AND {in_window(cutoff, 365)}"),
        "usage_events_90d": n(f"{usage} AND {in_window(cutoff, 90)}"),
        "usage_amount_90d": total(f"{usage} AND {in_window(cutoff, 90)}"),
        "plan_changes_180d": n(f"{kind('plan_change')} AND {in_window(cutoff, 180)}"),
        "_last_event_ts": f"max(event_ts) FILTER (WHERE {seen})",
        "_last_payment_ts": f"max(event_ts) FILTER (WHERE {seen} AND {kind('payment')})",
        "events_total": n(seen),
        LABEL: f"max(1.0D) FILTER (WHERE {kind('termination')} AND event_ts > {ts_lit(cutoff)}"
               f" AND event_ts <= {ts_lit(label_end)})",
    }

    def transform(df: DataFrame) -> DataFrame:
        return df.groupBy(ID).agg(*[expr(f"{e} AS {ident(name)}") for name, e in aggregates.items()])
    return transform


def customer_features(cutoff: dt.datetime):
    """Features of the customer row itself, measured at the cutoff date, with the days from signup to the cutoff
    date (``SINCE_SIGNUP``, the recency features' fallback): the id and numbers only (``gold_columns`` makes them
    doubles)."""
    cutoff_day = cutoff_date(cutoff)
    tenure = f"floor(months_between({cutoff_day}, signup_date))"
    yes = lambda c: f"coalesce(CAST({ident(c)} = 'Yes' AS DOUBLE), 0.0D)"  # noqa: E731
    columns = {
        SINCE_SIGNUP: f"greatest(datediff({cutoff_day}, signup_date), 0)",
        "tenure_months": f"least(greatest({tenure}, 0), {TENURE_CAP_MONTHS})",
        "age": "age",
        "senior": f"CAST(age >= {SENIOR_AGE} AS DOUBLE)",
        "monthly_charges": "monthly_charges",
        "services_count": " + ".join(yes(c) for c in SERVICE_FLAGS),
        **{c: yes(c) for c in YES_NO_FEATURES},
        **{one_hot_name(c, v): f"CAST({ident(c)} = {literal(v)} AS DOUBLE)" for c, values in ONE_HOT.items()
           for v in values},
    }

    def transform(df: DataFrame) -> DataFrame:
        return (df.withColumn("age", expr(f"floor(months_between({cutoff_day}, birth_date) / 12)"))
                .selectExpr(ident(ID), *[f"{e} AS {ident(name)}" for name, e in columns.items()]))
    return transform


def with_event_features(cutoff: dt.datetime):
    """Event features for customers without events default to 0; recency falls back to days since signup."""
    def days_since(col: str) -> str:
        # greatest() skips nulls, so the fallback is chosen explicitly for customers without such events.
        return (f"CASE WHEN {col} IS NULL THEN {SINCE_SIGNUP} "
                f"ELSE datediff({cutoff_date(cutoff)}, to_date({col})) END")

    def transform(df: DataFrame) -> DataFrame:
        return df.selectExpr("*", "coalesce(_avg_charge_0_90 - _avg_charge_90_180, 0.0D) AS charge_trend_90d",
                             f"{days_since('_last_event_ts')} AS days_since_last_event",
                             f"{days_since('_last_payment_ts')} AS days_since_last_payment")
    return transform


def gold_columns(df: DataFrame) -> DataFrame:
    """id, label, then FEATURES in contract order; all doubles, nulls (no events, no value) as 0."""
    return df.selectExpr(ident(ID), *[f"coalesce(CAST({ident(c)} AS DOUBLE), 0.0D) AS {ident(c)}"
                                      for c in (LABEL, *FEATURES)])
