"""Unit tests of the features transforms on small inline data; expected rows by hand."""
from __future__ import annotations

import datetime as dt

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType

from jobs.lake.contract import FEATURES, ID, LABEL
from jobs.stages import features
from tests.support.etl_inputs import AS_OF

CUTOFF = features.cutoff_of(AS_OF)   # 2026-04-01 23:59:59


def ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def silver_events(spark, rows: list[tuple]):
    """(customer_id, event_ts, event_type, amount) rows."""
    # Timestamps parsed by Spark (session time zone), not converted from Python's local time.
    return (spark.createDataFrame(rows, "customer_id string, event_ts string, event_type string, amount double")
            .withColumn("event_ts", F.to_timestamp("event_ts")))


def test_cutoff_is_the_last_second_of_the_as_of_day_minus_the_label_window():
    assert CUTOFF == dt.datetime(2026, 4, 1, 23, 59, 59)


def test_event_windows_at_their_boundaries_and_the_label(spark):
    s = dt.timedelta(seconds=1)
    d = dt.timedelta(days=1)
    events = silver_events(spark, [
        ("A", ts(CUTOFF), "charge", 30.0),                          # at cutoff: counts
        ("A", ts(CUTOFF + s), "charge", 1000.0),                    # 1s later: label window, not a feature
        ("A", ts(CUTOFF + s), "termination", 0.0),                  # -> label 1
        ("A", ts(CUTOFF - 90 * d), "charge", 10.0),                 # not in last 90d, in the 90d before
        ("A", ts(CUTOFF - 180 * d), "charge", 500.0),               # exactly 180d before: outside (cutoff-180d, ..]
        ("A", ts(CUTOFF - 30 * d + s), "support_call", 0.0),        # inside 30d
        ("A", ts(CUTOFF - 30 * d), "support_call", 0.0),            # 30d: outside 30d, inside 90d
        ("A", ts(CUTOFF - 365 * d), "support_call", 0.0),           # outside 365d
        ("A", ts(CUTOFF - 10 * d), "late_payment", 0.0),
        ("A", ts(CUTOFF - 100 * d), "late_payment", 0.0),
        ("A", ts(CUTOFF - 5 * d), "payment", 60.0),
        ("A", ts(CUTOFF - 5 * d), "usage", 2.5),
        ("A", ts(CUTOFF - 89 * d), "usage", 1.5),
        ("A", ts(CUTOFF - 179 * d), "plan_change", 0.0),
        ("B", ts(CUTOFF + 90 * d), "termination", 0.0),             # the as-of day's last second: label 1
        ("C", ts(CUTOFF + 90 * d + s), "termination", 0.0),         # after as-of: not in the label window
        ("C", ts(CUTOFF - 3 * d), "termination", 0.0),              # before cutoff: a feature-time event only
    ])
    got = events.transform(features.event_aggregates(CUTOFF)).select(
        ID, "charges_180d", "avg_charge_180d", "_avg_charge_0_90", "_avg_charge_90_180", "payments_180d",
        "late_payments_90d", "late_payments_180d", "support_calls_30d", "support_calls_90d",
        "support_calls_365d", "usage_events_90d", "usage_amount_90d", "plan_changes_180d",
        F.col("_last_event_ts").cast("string"), F.col("_last_payment_ts").cast("string"), "events_total", LABEL)
    expected = spark.createDataFrame([
        ("A", 40.0, 20.0, 30.0, 10.0, 1, 1, 2, 1, 2, 2, 2, 4.0, 1, ts(CUTOFF), ts(CUTOFF - 5 * d), 12, 1.0),
        ("B", None, None, None, None, 0, 0, 0, 0, 0, 0, 0, None, 0, None, None, 0, 1.0),
        ("C", None, None, None, None, 0, 0, 0, 0, 0, 0, 0, None, 0, ts(CUTOFF - 3 * d), None, 1, None),
    ], got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def two_customers(spark):
    """Silver customers A and B, and A's three events (a charge, a payment, a termination after the cutoff)."""
    customers = spark.createDataFrame([
        ("A", dt.date(2025, 10, 1), dt.date(1960, 4, 1), "Month-to-month", "Electronic check", "Fiber optic",
         "Female", "North", "Yes", "No", 80.0),
        ("B", dt.date(2010, 1, 1), dt.date(1961, 4, 2), "One year", "Bank transfer", "No",
         "Male", "Central", None, "Yes", 20.0),
    ], "customer_id string, signup_date date, birth_date date, contract_type string, payment_method string, "
       "internet_service string, gender string, region string, partner string, phone_service string, "
       "monthly_charges double")
    for c in ("dependents", "paperless_billing", "multiple_lines", "online_security", "online_backup",
              "device_protection", "tech_support", "streaming_tv", "streaming_movies"):
        customers = customers.withColumn(c, F.lit("No"))
    events = silver_events(spark, [
        ("A", "2026-03-01 08:00:00", "charge", 80.0), ("A", "2026-02-01 08:00:00", "payment", 80.0),
        ("A", "2026-05-01 00:00:00", "termination", 0.0)])
    return customers, events


def test_build_features_one_row_per_customer_all_doubles_no_nulls(spark):
    customers, events = two_customers(spark)

    got = features.build_features(customers, events, AS_OF)

    assert got.columns == [ID, LABEL, *FEATURES]
    assert all(isinstance(f.dataType, DoubleType) for f in got.schema.fields[1:])
    a = dict(label=1.0, tenure_months=6.0, age=66.0, senior=1.0, monthly_charges=80.0, services_count=0.0,
             charges_180d=80.0, avg_charge_180d=80.0, payments_180d=1.0, days_since_last_event=31.0,
             days_since_last_payment=59.0, events_total=2.0, partner=1.0, phone_service=0.0,
             contract_type__month_to_month=1.0, payment_method__electronic_check=1.0,
             internet_service__fiber_optic=1.0, gender__female=1.0, region__north=1.0)
    b = dict(label=0.0, tenure_months=72.0, age=64.0, senior=0.0, monthly_charges=20.0, services_count=1.0,
             days_since_last_event=5934.0, days_since_last_payment=5934.0, partner=0.0, phone_service=1.0)
    expected = spark.createDataFrame(
        [tuple([cid] + [vals.get(c, 0.0) for c in (LABEL, *FEATURES)]) for cid, vals in (("A", a), ("B", b))],
        got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_customers_meet_their_aggregates_in_a_hash_join_that_sorts_neither_side(spark, session_conf):
    session_conf(**{"spark.sql.autoBroadcastJoinThreshold": "-1"})   # as for tables too large to broadcast
    customers, events = two_customers(spark)

    plan = features.build_features(customers, events, AS_OF)._jdf.queryExecution().executedPlan().toString()

    assert "ShuffledHashJoin" in plan and "SortMergeJoin" not in plan


@pytest.mark.parametrize("with_write", ["true", "false"])
def test_the_stage_writes_gold_counts_its_rows_and_keeps_statistics_for_the_id_only(spark, tmp_path, session_conf,
                                                                                   with_write):
    """Counted as the write passes the rows (observe(), the cpu profile) or from gold read back (the gpu profiles,
    conf/rapids.conf): the same counts either way."""
    from delta.tables import DeltaTable

    from jobs.lake import delta_io
    from jobs.launch import profiles

    assert profiles.load_profile("gpu")[features.COUNT_WITH_WRITE_KEY] == "false"
    assert profiles.load_profile("gpu-explain")[features.COUNT_WITH_WRITE_KEY] == "false"
    assert features.COUNT_WITH_WRITE_KEY not in profiles.load_profile("cpu")
    session_conf(**{features.COUNT_WITH_WRITE_KEY: with_write})
    lake = str(tmp_path / "lake")
    customers, events = two_customers(spark)
    delta_io.overwrite(customers, delta_io.table_path(lake, "silver_customers"))
    delta_io.overwrite(events, delta_io.table_path(lake, "silver_events"))
    record = features.run(spark, lake, AS_OF)
    assert record.counts == {"customers": 2, "rows": 2, "churned": 1}
    gold = delta_io.table_path(lake, "gold_features")
    assert spark.read.format("delta").load(gold).count() == 2
    props = DeltaTable.forPath(spark, gold).detail().first()["properties"]
    assert props["delta.dataSkippingStatsColumns"] == "customer_id"
