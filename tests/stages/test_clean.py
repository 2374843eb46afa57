"""Unit tests of the clean transforms on small inline data, expected rows by hand; then the clean stage on a tiny
lake (idempotence of the writes)."""
from __future__ import annotations

import datetime as dt

import pytest
from chispa import assert_df_equality
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from jobs.core.errors import UserError
from jobs.lake import delta_io
from jobs.lake.contract import CUSTOMER_COLUMNS, CUSTOMERS_CSV_SCHEMA, EVENT_COLUMNS, EVENTS_CSV_SCHEMA
from jobs.lake.session import release
from jobs.launch import profiles
from jobs.stages import clean
from tests.support.etl_inputs import AS_OF, customer

QUARANTINE_SCHEMA = ("dataset string, stage string, source_file string, record_number long, raw string, "
                     "reason string, detail string")
LINEAGE_FIELDS = [StructField("source_file", StringType()), StructField("record_number", LongType())]


def event(record_number: int = 0, **fields) -> dict:
    row = dict(event_id="E000000000001", customer_id="C0000000001", event_ts="2026-03-01 12:00:00",
               event_type="charge", amount="10.00", channel="web", note=None)
    row.update(fields)
    row.update(source_file="events-00000.csv", record_number=record_number)
    return row


def bronze(spark, dataset: str, rows: list[dict]):
    schema = StructType(list((CUSTOMERS_CSV_SCHEMA if dataset == "customers" else EVENTS_CSV_SCHEMA).fields)
                        + LINEAGE_FIELDS)
    return spark.createDataFrame([Row(**r) for r in rows], schema)


# ---------------------------------------------------------------------------------------------------------
# clean
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lookups", clean.LOOKUP_MODES)
def test_canonical_category_maps_case_space_and_known_spellings_and_nulls_unknowns(spark, lookups):
    values = ["Month-to-month", "  MONTH   to  month ", "m2m", "Annual", "two-year", "Two\tYear", "weekly", "",
              None, "Two\nYear", "two \x0b year", "  two-year", "TWO  YEAR\r", "Two\u00a0Year"]
    df = spark.createDataFrame([(v,) for v in values], "contract_type string")
    lookup = (clean.keyed_category("contract_type", clean.category_key("contract_type")) if lookups == "keyed"
              else clean.canonical_category("contract_type"))
    got = df.select("contract_type", F.expr(lookup).alias("canonical"))
    expected = spark.createDataFrame(
        [("Month-to-month", "Month-to-month"), ("  MONTH   to  month ", "Month-to-month"),
         ("m2m", "Month-to-month"), ("Annual", "One year"), ("two-year", "Two year"), ("Two\tYear", "Two year"),
         ("weekly", None), ("", None), (None, None), ("Two\nYear", "Two year"), ("two \x0b year", "Two year"),
         ("  two-year", "Two year"), ("TWO  YEAR\r", "Two year"), ("Two\u00a0Year", None)],
        "contract_type string, canonical string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("lookups", clean.LOOKUP_MODES)
def test_each_customer_check_names_its_reason_and_column(spark, lookups):
    rows = [
        customer(0),
        customer(1, address="caf\ufffd"),
        customer(2, birth_date="  "),
        customer(3, monthly_charges="12,50"),
        customer(4, monthly_charges="NaN"),
        customer(5, signup_date="2021-02-30"),
        customer(6, updated_at="2026-01-01"),
        customer(7, payment_method="bitcoin"),
        customer(8, monthly_charges="1000.01"),
        customer(9, monthly_charges="-1"),
        customer(10, signup_date="2026-07-01"),
        customer(11, signup_date="1999-12-31"),
        customer(12, birth_date="2004-01-16"),    # one day short of 16 at signup 2020-01-15
        customer(13, birth_date="2004-01-15"),    # exactly 16 at signup: fine
        customer(14, gender=None, region=""),     # optional categoricals may be empty
        # several defects: the first in CLEAN_CHECK_ORDER wins
        customer(15, contract_type="", monthly_charges="abc", address="\ufffd"),
        customer(16, monthly_charges="x", signup_date="never"),
        customer(17, gender="X", monthly_charges="5000"),
    ]
    got = (bronze(spark, "customers", rows).transform(clean.with_checks("customers", AS_OF, lookups))
           .select("record_number", "reason", "detail"))
    expected = spark.createDataFrame([
        (0, None, None), (1, "invalid_utf8", "address"), (2, "missing_required", "birth_date"),
        (3, "bad_number", "monthly_charges"), (4, "bad_number", "monthly_charges"),
        (5, "bad_date", "signup_date"), (6, "bad_date", "updated_at"),
        (7, "unknown_category", "payment_method"), (8, "out_of_range", "monthly_charges"),
        (9, "out_of_range", "monthly_charges"), (10, "impossible_date", "signup_date"),
        (11, "impossible_date", "signup_date"), (12, "impossible_date", "birth_date"), (13, None, None),
        (14, None, None), (15, "invalid_utf8", "address"), (16, "bad_number", "monthly_charges"),
        (17, "unknown_category", "gender"),
    ], "record_number long, reason string, detail string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("lookups", clean.LOOKUP_MODES)
def test_each_event_check_names_its_reason_and_column(spark, lookups):
    rows = [
        event(0, event_type=" Late  Payment ", channel="Mobile"),
        event(1, note="bad \ufffd byte"),
        event(2, event_id=""),
        event(3, amount="1.2.3"),
        event(4, event_ts="2026-03-01T12:00:00"),
        event(5, channel="fax"),
        event(6, amount="10000.01"),
        event(7, event_ts="2026-06-30 23:59:59"),   # last second of the as-of day: possible
        event(8, event_ts="2026-07-01 00:00:00"),
        event(9, event_ts="1999-12-31 23:59:59"),
    ]
    checked = bronze(spark, "events", rows).transform(clean.with_checks("events", AS_OF, lookups))
    expected = spark.createDataFrame([
        (0, None, None, "late_payment", "app"), (1, "invalid_utf8", "note", "charge", "web"),
        (2, "missing_required", "event_id", "charge", "web"), (3, "bad_number", "amount", "charge", "web"),
        (4, "bad_date", "event_ts", "charge", "web"), (5, "unknown_category", "channel", "charge", None),
        (6, "out_of_range", "amount", "charge", "web"), (7, None, None, "charge", "web"),
        (8, "impossible_date", "event_ts", "charge", "web"), (9, "impossible_date", "event_ts", "charge", "web"),
    ], "record_number long, reason string, detail string, t_event_type string, t_channel string")
    assert_df_equality(checked.select("record_number", "reason", "detail", "t_event_type", "t_channel"),
                       expected, ignore_row_order=True, ignore_nullable=True)


def test_exact_duplicates_keep_the_first_copy_and_ignore_invalid_and_respelled_rows(spark):
    df = bronze(spark, "events", [
        event(0), event(1), event(2),                       # three identical: two duplicates
        event(3, channel="WEB"),                            # differs in raw text: not a duplicate
        event(4, amount="x"), event(5, amount="x"),         # identical but invalid: both keep their reason
    ]).withColumn("reason", F.when(F.col("amount") == "x", F.lit("bad_number")))
    got = (df.transform(clean.with_copies_numbered(EVENT_COLUMNS)).transform(clean.with_duplicates_marked)
           .select("record_number", "_fate"))
    expected = spark.createDataFrame([(0, "kept"), (1, "duplicate"), (2, "duplicate"), (3, "kept"),
                                      (4, "bad_number"), (5, "bad_number")], "record_number long, _fate string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_conflicting_customers_latest_updated_at_wins_ties_go_to_the_later_record(spark):
    rows = [
        customer(0, customer_id="C1", updated_at="2026-01-01 00:00:00"),
        customer(1, customer_id="C1", updated_at="2026-03-01 00:00:00", region="South"),
        customer(2, customer_id="C1", updated_at="2026-02-01 00:00:00", region="East"),
        customer(3, customer_id="C2", updated_at="2026-01-01 00:00:00"),
        customer(4, customer_id="C2", updated_at="2026-01-01 00:00:00", region="West"),   # tie: later wins
        customer(5, customer_id="C3", updated_at="2026-05-01 00:00:00", monthly_charges="x"),  # invalid
        customer(6, customer_id="C3", updated_at="2026-01-01 00:00:00"),
        customer(7, customer_id=" C4", updated_at="2026-01-01 00:00:00"),   # the same customer as silver knows it
        customer(8, customer_id="C4 ", updated_at="2026-02-01 00:00:00"),
    ]
    got = (bronze(spark, "customers", rows).transform(clean.with_copies_numbered(CUSTOMER_COLUMNS))
           .transform(clean.with_checks("customers", AS_OF))
           .transform(clean.with_duplicates_marked).transform(clean.with_superseded_marked)
           .select("record_number", "_fate", "reason", "detail"))
    expected = spark.createDataFrame([
        (0, "superseded", "superseded", "superseded by customers-00000.csv:1"),
        (1, "kept", None, None),
        (2, "superseded", "superseded", "superseded by customers-00000.csv:1"),
        (3, "superseded", "superseded", "superseded by customers-00000.csv:4"),
        (4, "kept", None, None),
        (5, "bad_number", "bad_number", "monthly_charges"),
        (6, "kept", None, None),
        (7, "superseded", "superseded", "superseded by customers-00000.csv:8"),
        (8, "kept", None, None),
    ], "record_number long, _fate string, reason string, detail string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_customer_status_covers_bronze_rows_and_records_ingest_quarantined(spark):
    customers = spark.createDataFrame([("C1", "kept"), (" C1", "superseded"), ("C5 ", "bad_date"),
                                       ("C6", "duplicate"), ("C6", "kept")], "customer_id string, _fate string")
    q = spark.createDataFrame([
        ("customers", "ingest", "customers-00000.csv", 1, "C2,2026-01-01 00:00:00,x", "wrong_field_count", ""),
        ("customers", "ingest", "customers-00000.csv", 4, '"C1",x', "wrong_field_count", ""),
        ("customers", "clean", "customers-00000.csv", 2, '{"customer_id":"C3"}', "bad_date", "signup_date"),
        ("events", "ingest", "events-00000.csv", 3, "E1,C4,x", "wrong_field_count", ""),
    ], QUARANTINE_SCHEMA)
    got = clean.customer_status(customers, q)
    assert_df_equality(got, spark.createDataFrame([("C1", 1), ("C2", 0), ("C5", 0), ("C6", 1)],
                                                  "_known string, _in_silver int"),
                       ignore_row_order=True, ignore_nullable=True)


def test_events_of_unknown_and_rejected_customers(spark):
    status = spark.createDataFrame([("C1", 1), ("C2", 0)], "_known string, _in_silver int")
    events = bronze(spark, "events", [
        event(0, customer_id="C1"), event(1, customer_id="C2"), event(2, customer_id="C9"),
        event(3, customer_id="C9", amount="x"),   # its own defect comes first
        event(4, customer_id=" C1 "),             # known by its trimmed id
    ]).withColumn("reason", F.when(F.col("amount") == "x", F.lit("bad_number"))) \
      .withColumn("detail", F.when(F.col("amount") == "x", F.lit("amount"))) \
      .withColumn("_fate", F.coalesce(F.col("reason"), F.lit("kept")))
    got = (events.transform(clean.with_customer_reasons(status))
           .select("record_number", "_fate", "reason", "detail"))
    expected = spark.createDataFrame([
        (0, "kept", None, None), (1, "customer_rejected", "customer_rejected", "customer_id"),
        (2, "unknown_customer", "unknown_customer", "customer_id"), (3, "bad_number", "bad_number", "amount"),
        (4, "kept", None, None),
    ], "record_number long, _fate string, reason string, detail string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_quarantine_rows_keep_every_raw_field_as_json_nulls_included(spark):
    df = (bronze(spark, "events", [event(7, amount="x", note=None), event(8)])
          .transform(clean.with_checks("events", AS_OF)).withColumn("_fate", F.coalesce("reason", F.lit("kept"))))
    got = df.transform(clean.outcome("events")).transform(clean.quarantine_rows("events"))
    raw = ('{"event_id":"E000000000001","customer_id":"C0000000001","event_ts":"2026-03-01 12:00:00",'
           '"event_type":"charge","amount":"x","channel":"web","note":null}')
    expected = spark.createDataFrame([("events", "clean", "events-00000.csv", 7, raw, "bad_number", "amount")],
                                     got.schema)
    assert_df_equality(got, expected)


def test_quarantine_json_escapes_every_character_as_to_json_does(spark):
    # Hand-written: a quote, a backslash, a line break, a tab and U+0001; then every control character, the
    # characters JSON leaves alone (/, U+2028, DEL, non-ASCII, U+FFFD) and a null, against Spark's own to_json.
    awkward = "".join(chr(i) for i in range(32)) + '"\\/\u2028\x7f\u00e9\ufffd'
    df = spark.createDataFrame([('say "hi"\\\n\t\x01', None), (awkward, "plain"), ("", "")], "a string, b string")
    got = [r[0] for r in df.select(clean.json_object(("a", "b"))).collect()]
    assert got[0] == '{"a":"say \\"hi\\"\\\\\\n\\t\\u0001","b":null}'
    assert got[2] == '{"a":"","b":""}'
    spark_json = [r[0] for r in df.select(F.to_json(F.struct("a", "b"), {"ignoreNullFields": "false"})).collect()]
    assert got == spark_json
    import json
    assert json.loads(got[1]) == {"a": awkward, "b": "plain"}


def test_silver_rows_are_typed_and_canonical(spark):
    df = (bronze(spark, "customers", [customer(0, contract_type=" monthly ", internet_service="FIBRE optic",
                                               partner="y", monthly_charges=" 70.25 ")])
          .transform(clean.with_checks("customers", AS_OF)).withColumn("_fate", F.lit("kept")))
    got = df.transform(clean.outcome("customers")).transform(clean.silver_rows("customers")).select(
        "contract_type", "internet_service", "partner", "monthly_charges", "signup_date",
        F.col("updated_at").cast("string"))
    expected = spark.createDataFrame(
        [("Month-to-month", "Fiber optic", "Yes", 70.25, dt.date(2020, 1, 15), "2026-01-01 10:00:00")],
        got.schema)
    assert_df_equality(got, expected)


# ---------------------------------------------------------------------------------------------------------
# clean through the stage entry point on a tiny lake (idempotence of the writes)
# ---------------------------------------------------------------------------------------------------------
def test_an_unknown_materialise_mode_stops_clean_before_it_writes(spark, tmp_path, session_conf):
    lake = str(tmp_path / "lake")
    delta_io.overwrite(bronze(spark, "customers", [customer(0)]), delta_io.table_path(lake, "bronze_customers"))
    delta_io.overwrite(bronze(spark, "events", [event(0)]), delta_io.table_path(lake, "bronze_events"))
    delta_io.overwrite(spark.createDataFrame([], QUARANTINE_SCHEMA), delta_io.table_path(lake, "quarantine"))
    session_conf(**{clean.MATERIALISE_KEY: "disk"})
    with pytest.raises(UserError, match=r"spark.churn.clean.materialise='disk' is not one of true, false, files"):
        clean.run(spark, lake, AS_OF)
    assert not delta_io.exists(spark, delta_io.table_path(lake, "silver_customers"))
    assert not (tmp_path / "lake" / clean.SCRATCH).exists()


def test_clean_rerun_leaves_tables_unchanged_and_accounts_every_row(spark, tmp_path, session_conf):
    """The rerun also recomputes its classified frames instead of materialising them (gpu profiles do): same rows."""
    lake = str(tmp_path / "lake")
    bc = bronze(spark, "customers", [customer(0, customer_id="C1"), customer(1, customer_id="C1"),
                                     customer(2, customer_id="C2", contract_type="??")])
    be = bronze(spark, "events", [event(0, customer_id="C1"), event(1, customer_id="C2"),
                                  event(2, customer_id="C3")])
    delta_io.overwrite(bc, delta_io.table_path(lake, "bronze_customers"))
    delta_io.overwrite(be, delta_io.table_path(lake, "bronze_events"))
    delta_io.overwrite(spark.createDataFrame([], QUARANTINE_SCHEMA), delta_io.table_path(lake, "quarantine"))

    first = clean.run(spark, lake, AS_OF)
    snapshot = {t: spark.read.format("delta").load(delta_io.table_path(lake, t)).collect()
                for t in ("silver_customers", "silver_events", "quarantine")}
    assert profiles.load_profile("gpu")[clean.MATERIALISE_KEY] == "files"
    assert profiles.load_profile("gpu-explain")[clean.MATERIALISE_KEY] == "files"
    assert clean.MATERIALISE_KEY not in profiles.load_profile("cpu")
    assert profiles.load_profile("gpu")[clean.LOOKUP_KEY] == profiles.load_profile("gpu-explain")[clean.LOOKUP_KEY] == "keyed"
    assert clean.LOOKUP_KEY not in profiles.load_profile("cpu")
    kept = clean.materialised(spark, bc)
    assert kept._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LogicalRDD"
    assert sorted(kept.collect()) == sorted(bc.collect())
    release(kept)
    session_conf(**{clean.MATERIALISE_KEY: "false"})
    assert clean.materialised(spark, bc) is bc
    second = clean.run(spark, lake, AS_OF)
    session_conf(**{clean.MATERIALISE_KEY: " Files "})
    third = clean.run(spark, lake, AS_OF)
    assert not (tmp_path / "lake" / clean.SCRATCH).exists(), "the files mode left its scratch files behind"
    for t, rows in snapshot.items():
        again = spark.read.format("delta").load(delta_io.table_path(lake, t))
        assert sorted(again.collect()) == sorted(rows), t
    assert first.counts == second.counts == third.counts
    assert first.counts["totals"] == {
        "customers": {"bronze": 3, "silver": 1, "quarantined": {"unknown_category": 1},
                      "duplicates_removed": 1},
        "events": {"bronze": 3, "silver": 1, "quarantined": {"customer_rejected": 1, "unknown_customer": 1},
                   "duplicates_removed": 0},
    }
    assert second.read == {"bronze_customers": 0, "bronze_events": 0, "quarantine": 1}
