"""Unit tests of the ingest, clean and features transforms on small inline data; expected rows by hand."""
from __future__ import annotations

import contextlib
import datetime as dt
import os

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.types import (DoubleType, LongType, StringType, StructField, StructType)

from jobs import clean, delta_io, features, ingest, profiles
from jobs.contract import (CUSTOMER_COLUMNS, EVENT_COLUMNS, FEATURES, ID, LABEL, CUSTOMERS_CSV_SCHEMA,
                           EVENTS_CSV_SCHEMA)
from jobs.errors import UserError

AS_OF = "2026-06-30"
CUSTOMERS_HEADER = ",".join(CUSTOMER_COLUMNS)
EVENTS_HEADER = ",".join(EVENT_COLUMNS)
QUARANTINE_SCHEMA = ("dataset string, stage string, source_file string, record_number long, raw string, "
                     "reason string, detail string")
LINEAGE_FIELDS = [StructField("source_file", StringType()), StructField("record_number", LongType())]


def customer(record_number: int = 0, **fields) -> dict:
    """A valid raw customer row (all strings, as bronze holds it), with some fields replaced."""
    row = dict(customer_id="C0000000001", updated_at="2026-01-01 10:00:00", signup_date="2020-01-15",
               birth_date="1980-05-05", gender="Female", region="North", partner="Yes", dependents="No",
               contract_type="One year", payment_method="Credit card", paperless_billing="Yes",
               phone_service="Yes", multiple_lines="No", internet_service="DSL", online_security="Yes",
               online_backup="No", device_protection="No", tech_support="No", streaming_tv="Yes",
               streaming_movies="No", monthly_charges="50.00", address="1 Main St")
    row.update(fields)
    row.update(source_file="customers-00000.csv", record_number=record_number)
    return row


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
# ingest
# ---------------------------------------------------------------------------------------------------------
def write_input(root, customers: str, events: dict[str, str]) -> str:
    (root / "customers").mkdir(parents=True)
    (root / "events").mkdir()
    (root / "customers" / "customers-00000.csv").write_text(customers)
    for name, text in events.items():
        (root / "events" / name).write_text(text)
    return str(root)


def good_customer_line(cid: str) -> str:
    r = customer(customer_id=cid)
    return ",".join(r[c] for c in CUSTOMER_COLUMNS)


def test_ingest_catches_short_and_long_rows_with_raw_text_file_and_record_number(spark, tmp_path):
    events_a = (EVENTS_HEADER + "\n"
                'E1,C1,2026-01-01 00:00:00,charge,1.00,web,"a, ""quoted""\nsecond line"\n'
                "E2,C1,2026-01-01 00:00:00,charge,1.00,web\n"                   # 6 fields: short
                "E3,C1,2026-01-01 00:00:00,charge,1.00,web,x,extra\n"          # 8 fields: long
                "E4,C1,2026-01-01 00:00:00,charge,1.00,web,\n")
    events_b = (EVENTS_HEADER + "\n"
                'E5,C1,2026-01-01 00:00:00,usage,2.00,app,"y\nz",extra\n'      # long, with a newline inside
                "E6,C1,2026-01-01 00:00:00,usage,2.00,app,ok\n")
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": events_a, "events-00001.csv": events_b})
    lake = str(tmp_path / "lake")

    record = ingest.run(spark, inp, lake)

    got_q = spark.read.format("delta").load(f"{lake}/quarantine")
    expected_q = spark.createDataFrame([
        ("events", "ingest", "events-00000.csv", 1, "E2,C1,2026-01-01 00:00:00,charge,1.00,web",
         "wrong_field_count", "expected 7 fields"),
        ("events", "ingest", "events-00000.csv", 2, "E3,C1,2026-01-01 00:00:00,charge,1.00,web,x,extra",
         "wrong_field_count", "expected 7 fields"),
        ("events", "ingest", "events-00001.csv", 0, 'E5,C1,2026-01-01 00:00:00,usage,2.00,app,"y\nz",extra',
         "wrong_field_count", "expected 7 fields"),
    ], got_q.schema)
    assert_df_equality(got_q, expected_q, ignore_row_order=True, ignore_nullable=True)

    got_b = spark.read.format("delta").load(f"{lake}/bronze/events").select("event_id", "note", "source_file",
                                                                            "record_number")
    expected_b = spark.createDataFrame([
        ("E1", 'a, "quoted"\nsecond line', "events-00000.csv", 0),
        ("E4", None, "events-00000.csv", 3),
        ("E6", "ok", "events-00001.csv", 1),
    ], got_b.schema)
    assert_df_equality(got_b, expected_b, ignore_row_order=True, ignore_nullable=True)

    assert record.counts["files"]["events"] == {
        "events-00000.csv": {"records": 4, "bronze": 2, "quarantined": 2},
        "events-00001.csv": {"records": 2, "bronze": 1, "quarantined": 1},
    }
    assert record.counts["totals"]["customers"] == {"records": 1, "bronze": 1, "quarantined": 0}
    assert set(record.wrote) == {"bronze_customers", "bronze_events", "quarantine"}
    # Bronze keeps Delta statistics on its lineage columns only; the quarantine keeps the default.
    props = {t: DeltaTable.forPath(spark, f"{lake}/{t}").detail().first()["properties"]
             for t in ("bronze/customers", "bronze/events", "quarantine")}
    assert props["bronze/events"]["delta.dataSkippingStatsColumns"] == "source_file,record_number"
    assert props["bronze/customers"]["delta.dataSkippingStatsColumns"] == "source_file,record_number"
    assert "delta.dataSkippingStatsColumns" not in props["quarantine"]
    assert spark.conf.get("spark.databricks.delta.properties.defaults.dataSkippingStatsColumns", None) is None


@pytest.fixture
def session_conf(spark):
    """Set Spark SQL settings for one test, restored afterwards."""
    saved = {}

    def set_(**conf):
        for k, v in conf.items():
            saved.setdefault(k, spark.conf.get(k, None))
            spark.conf.set(k, v)
    yield set_
    for k, v in saved.items():
        spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def numbered_events(n_files: int, bad_every: int) -> dict[str, str]:
    """Event files of different lengths; a record with a quoted newline every 3rd, a short one every ``bad_every``."""
    out = {}
    for f in range(n_files):
        lines = [EVENTS_HEADER]
        for i in range(40 + 17 * f):
            if i % bad_every == bad_every - 1:
                lines.append(f"E{f}-{i},C1,short")
            else:
                note = f'"line\nbreak {i}"' if i % 3 == 0 else f"n{i}"
                lines.append(f"E{f}-{i},C1,2026-01-01 00:00:00,usage,1.00,app,{note}")
        out[f"events-{f:05d}.csv"] = "\n".join(lines) + "\n"
    return out


@pytest.mark.parametrize("conf", [
    # Spark would pack all small files into a few tasks: ingest still gives each file a task of its own.
    {"spark.sql.files.openCostInBytes": "0", "spark.sql.files.maxPartitionBytes": "1g"},
    # A partition far smaller than each file: a multiLine CSV file is still read whole by one task.
    {"spark.sql.files.maxPartitionBytes": "256"},
], ids=["small-files-packed", "big-files-split"])
def test_ingest_record_numbers_count_each_file_from_zero_however_spark_packs_or_splits(
        spark, tmp_path, session_conf, conf):
    events = numbered_events(4, bad_every=7)
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n", events)
    lake = str(tmp_path / "lake")
    session_conf(**conf)
    open_cost = spark.conf.get("spark.sql.files.openCostInBytes")

    record = ingest.run(spark, inp, lake)

    expected = [(name, i, f"E{f}-{i}") for f, name in enumerate(events) for i in range(40 + 17 * f)]
    bronze = spark.read.format("delta").load(f"{lake}/bronze/events").select("source_file", "record_number",
                                                                             "event_id")
    q = (spark.read.format("delta").load(f"{lake}/quarantine")
         .select("source_file", "record_number", F.split("raw", ",")[0].alias("event_id")))
    assert sorted(tuple(r) for r in bronze.unionByName(q).collect()) == sorted(expected)
    assert q.count() == sum((40 + 17 * f) // 7 for f in range(4))
    assert record.counts["totals"]["events"]["records"] == len(expected)
    assert spark.conf.get("spark.sql.files.openCostInBytes") == open_cost   # restored


def test_ingest_fails_loudly_when_a_task_reads_two_files(spark, tmp_path, session_conf, monkeypatch):
    """If record numbers ever ran on across files (two files in one task), the accounting stops the stage."""
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n",
                      numbered_events(3, bad_every=5))
    session_conf(**{"spark.sql.files.openCostInBytes": "0", "spark.sql.files.maxPartitionBytes": "1g",
                    "spark.sql.files.minPartitionNum": "1"})
    monkeypatch.setattr(ingest, "one_task_per_file", lambda spark: contextlib.nullcontext())
    with pytest.raises(RuntimeError, match="not each record once: ingest's accounting does not add up"):
        ingest.run(spark, inp, str(tmp_path / "lake"))


def scanned_bronze_counts(spark, lake: str, dataset: str) -> dict:
    rows = (spark.read.format("delta").load(f"{lake}/bronze/{dataset}").groupBy("source_file")
            .agg(F.count(F.lit(1)).alias("n"), F.min("record_number").alias("lo"), F.max("record_number").alias("hi"))
            .collect())
    return {r["source_file"]: (r["n"], r["lo"], r["hi"]) for r in rows}


def test_ingest_reads_bronze_counts_from_its_commit_and_they_match_a_scan(spark, tmp_path, monkeypatch):
    """The accounting takes bronze's per-file figures from the statistics of the bronze commit: they must be
    what a scan of bronze finds, and the StageRecord the same as with the scan it replaces."""
    events = numbered_events(3, bad_every=5)
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n", events)
    lake = str(tmp_path / "lake")
    record = ingest.run(spark, inp, lake)

    for ds in ("customers", "events"):
        from_commit = ingest.bronze_counts_from_commit(spark, f"{lake}/bronze/{ds}", record.wrote[f"bronze_{ds}"],
                                                       set(record.counts["files"][ds]))
        assert from_commit is not None, ds
        assert from_commit == scanned_bronze_counts(spark, lake, ds), ds
    # No commit file for that version: no figures from it (the accounting then scans bronze).
    assert ingest.bronze_counts_from_commit(spark, f"{lake}/bronze/events", 99, {"events-00000.csv"}) is None

    monkeypatch.setattr(ingest, "bronze_counts_from_commit", lambda *a: None)   # force the scan
    assert ingest.accounting(spark, lake, record.wrote, {ds: [f"{inp}/{ds}/{n}" for n in files]
                             for ds, files in record.counts["files"].items()}) == record.counts


def test_ingest_accounts_for_files_with_long_or_unusual_names(spark, tmp_path):
    """A name over Delta's 32-character string statistics (bronze counted by a scan instead) and a name with a
    space (``source_file`` is the name as Spark reports it, URL-encoded like ``_metadata.file_name``)."""
    long_name = "events-2026-06-30-region-north-part-00000.csv"
    events = {long_name: EVENTS_HEADER + "\nE1,C1,2026-03-01 12:00:00,charge,10.00,web,\nE2,C1,short\n",
              "events 2.csv": EVENTS_HEADER + "\nE3,C1,2026-03-01 12:00:00,charge,10.00,web,x\n"}
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n", events)
    lake = str(tmp_path / "lake")

    record = ingest.run(spark, inp, lake)

    assert record.counts["files"]["events"] == {
        long_name: {"records": 2, "bronze": 1, "quarantined": 1},
        "events%202.csv": {"records": 1, "bronze": 1, "quarantined": 0},
    }
    meta = (spark.read.schema(EVENTS_CSV_SCHEMA).option("header", True).csv(f"{inp}/events")
            .select(F.col("_metadata.file_name")).distinct().collect())
    assert {r[0] for r in meta} == set(record.counts["files"]["events"])
    assert ingest.bronze_counts_from_commit(spark, f"{lake}/bronze/events", record.wrote["bronze_events"],
                                            set(record.counts["files"]["events"])) is None


def test_ingest_missing_folder_is_a_user_error_and_writes_nothing(spark, tmp_path):
    lake = tmp_path / "lake"
    with pytest.raises(UserError, match="does not exist: pass --input"):
        ingest.run(spark, str(tmp_path / "nowhere"), str(lake))
    (tmp_path / "in" / "customers").mkdir(parents=True)
    with pytest.raises(UserError, match=r"no customers CSV files \(\*.csv or \*.csv.gz\)"):
        ingest.run(spark, str(tmp_path / "in"), str(lake))
    assert not lake.exists()


def test_ingest_wrong_header_is_a_user_error_and_writes_nothing(spark, tmp_path):
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    swapped = "customer_id,event_id,event_ts,event_type,amount,channel,note\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": swapped + "C1,E1,x,charge,1,web,\n"})
    lake = tmp_path / "lake"
    with pytest.raises(UserError, match="events-00000.csv: header .* does not match the contract columns"):
        ingest.run(spark, inp, str(lake))
    assert not lake.exists()


# ---------------------------------------------------------------------------------------------------------
# clean
# ---------------------------------------------------------------------------------------------------------
def test_canonical_category_maps_case_space_and_known_spellings_and_nulls_unknowns(spark):
    values = ["Month-to-month", "  MONTH   to  month ", "m2m", "Annual", "two-year", "Two\tYear", "weekly", "",
              None]
    df = spark.createDataFrame([(v,) for v in values], "contract_type string")
    got = df.select("contract_type", clean.canonical_category("contract_type").alias("canonical"))
    expected = spark.createDataFrame(
        [("Month-to-month", "Month-to-month"), ("  MONTH   to  month ", "Month-to-month"),
         ("m2m", "Month-to-month"), ("Annual", "One year"), ("two-year", "Two year"), ("Two\tYear", "Two year"),
         ("weekly", None), ("", None), (None, None)], "contract_type string, canonical string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_each_customer_check_names_its_reason_and_column(spark):
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
    got = (bronze(spark, "customers", rows).transform(clean.with_checks("customers", AS_OF))
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


def test_each_event_check_names_its_reason_and_column(spark):
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
    checked = bronze(spark, "events", rows).transform(clean.with_checks("events", AS_OF))
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
    got = df.transform(clean.with_duplicates_marked(EVENT_COLUMNS)).select("record_number", "_fate")
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
    ]
    got = (bronze(spark, "customers", rows).transform(clean.with_checks("customers", AS_OF))
           .transform(clean.with_duplicates_marked(CUSTOMER_COLUMNS)).transform(clean.with_superseded_marked)
           .select("record_number", "_fate", "reason", "detail"))
    expected = spark.createDataFrame([
        (0, "superseded", "superseded", "superseded by customers-00000.csv:1"),
        (1, "kept", None, None),
        (2, "superseded", "superseded", "superseded by customers-00000.csv:1"),
        (3, "superseded", "superseded", "superseded by customers-00000.csv:4"),
        (4, "kept", None, None),
        (5, "bad_number", "bad_number", "monthly_charges"),
        (6, "kept", None, None),
    ], "record_number long, _fate string, reason string, detail string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_customer_row_ids_include_records_ingest_quarantined(spark):
    bronze_c = bronze(spark, "customers", [customer(0, customer_id="C1")])
    q = spark.createDataFrame([
        ("customers", "ingest", "customers-00000.csv", 1, "C2,2026-01-01 00:00:00,x", "wrong_field_count", ""),
        ("customers", "clean", "customers-00000.csv", 2, '{"customer_id":"C3"}', "bad_date", "signup_date"),
        ("events", "ingest", "events-00000.csv", 3, "E1,C4,x", "wrong_field_count", ""),
    ], QUARANTINE_SCHEMA)
    got = clean.customer_row_ids(bronze_c, q)
    assert_df_equality(got, spark.createDataFrame([("C1",), ("C2",)], "customer_id string"),
                       ignore_row_order=True, ignore_nullable=True)


def test_events_of_unknown_and_rejected_customers(spark):
    bronze_c = spark.createDataFrame([("C1",), (" C2",)], "customer_id string")
    silver_c = spark.createDataFrame([("C1",)], "customer_id string")
    events = bronze(spark, "events", [
        event(0, customer_id="C1"), event(1, customer_id="C2"), event(2, customer_id="C9"),
        event(3, customer_id="C9", amount="x"),   # its own defect comes first
    ]).withColumn("reason", F.when(F.col("amount") == "x", F.lit("bad_number"))) \
      .withColumn("detail", F.when(F.col("amount") == "x", F.lit("amount"))) \
      .withColumn("_fate", F.coalesce(F.col("reason"), F.lit("kept")))
    got = (events.transform(clean.with_customer_reasons(bronze_c, silver_c))
           .select("record_number", "_fate", "reason", "detail"))
    expected = spark.createDataFrame([
        (0, "kept", None, None), (1, "customer_rejected", "customer_rejected", "customer_id"),
        (2, "unknown_customer", "unknown_customer", "customer_id"), (3, "bad_number", "bad_number", "amount"),
    ], "record_number long, _fate string, reason string, detail string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_quarantine_rows_keep_every_raw_field_as_json_nulls_included(spark):
    df = bronze(spark, "events", [event(7, amount="x", note=None)]) \
        .withColumn("reason", F.lit("bad_number")).withColumn("detail", F.lit("amount"))
    got = df.transform(clean.quarantine_rows("events"))
    raw = ('{"event_id":"E000000000001","customer_id":"C0000000001","event_ts":"2026-03-01 12:00:00",'
           '"event_type":"charge","amount":"x","channel":"web","note":null}')
    expected = spark.createDataFrame([("events", "clean", "events-00000.csv", 7, raw, "bad_number", "amount")],
                                     got.schema)
    assert_df_equality(got, expected)


def test_silver_rows_are_typed_and_canonical(spark):
    df = (bronze(spark, "customers", [customer(0, contract_type=" monthly ", internet_service="FIBRE optic",
                                               partner="y", monthly_charges=" 70.25 ")])
          .transform(clean.with_checks("customers", AS_OF)).withColumn("_fate", F.lit("kept")))
    got = df.transform(clean.silver_rows("customers")).select(
        "contract_type", "internet_service", "partner", "monthly_charges", "signup_date",
        F.col("updated_at").cast("string"))
    expected = spark.createDataFrame(
        [("Month-to-month", "Fiber optic", "Yes", 70.25, dt.date(2020, 1, 15), "2026-01-01 10:00:00")],
        got.schema)
    assert_df_equality(got, expected)


# ---------------------------------------------------------------------------------------------------------
# features
# ---------------------------------------------------------------------------------------------------------
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


def test_build_features_one_row_per_customer_all_doubles_no_nulls(spark):
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


# ---------------------------------------------------------------------------------------------------------
# clean + features through the stage entry points on a tiny lake (idempotence of the writes)
# ---------------------------------------------------------------------------------------------------------
def test_clean_rerun_leaves_tables_unchanged_and_accounts_every_row(spark, tmp_path, session_conf):
    """The rerun also recomputes its classified frames instead of persisting them (gpu profiles do): same rows."""
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
    assert profiles.load_profile("gpu")[clean.PERSIST_KEY] == "false"
    assert profiles.load_profile("gpu-explain")[clean.PERSIST_KEY] == "false"
    assert clean.PERSIST_KEY not in profiles.load_profile("cpu")
    kept = clean.held(spark, bc)
    assert kept.is_cached
    kept.unpersist()
    session_conf(**{clean.PERSIST_KEY: "false"})
    assert not clean.held(spark, bc).is_cached
    second = clean.run(spark, lake, AS_OF)
    for t, rows in snapshot.items():
        again = spark.read.format("delta").load(delta_io.table_path(lake, t))
        assert sorted(again.collect()) == sorted(rows), t
    assert first.counts == second.counts
    assert first.counts["totals"] == {
        "customers": {"bronze": 3, "silver": 1, "quarantined": {"unknown_category": 1},
                      "duplicates_removed": 1},
        "events": {"bronze": 3, "silver": 1, "quarantined": {"customer_rejected": 1, "unknown_customer": 1},
                   "duplicates_removed": 0},
    }
    assert second.read == {"bronze_customers": 0, "bronze_events": 0, "quarantine": 1}


def test_stages_take_a_relative_lake_path(spark, tmp_path):
    """ingest -> clean -> features with relative --input/--lake (the README's runs/latest): versions are read
    through delta_io, which resolves relative paths itself. Relative to the process's start directory, which
    the JVM shares (no chdir)."""
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    events = EVENTS_HEADER + "\nE1,C1,2026-03-01 12:00:00,charge,10.00,web,\nE2,C1,short\n"
    inp = os.path.relpath(write_input(tmp_path / "in", customers, {"events-00000.csv": events}))
    lake = os.path.relpath(tmp_path / "lake")
    assert not os.path.isabs(lake)

    ing = ingest.run(spark, inp, lake)
    cl = clean.run(spark, lake, AS_OF)
    ft = features.run(spark, lake, AS_OF)

    assert ing.counts["totals"]["events"] == {"records": 2, "bronze": 1, "quarantined": 1}
    assert cl.read == {"bronze_customers": ing.wrote["bronze_customers"],
                       "bronze_events": ing.wrote["bronze_events"], "quarantine": ing.wrote["quarantine"]}
    assert ft.counts["customers"] == 1
    assert spark.read.format("delta").load(str(tmp_path / "lake" / "gold" / "customer_features")).count() == 1


def test_ingest_runs_with_the_plugins_sql_off_where_the_gpu_profile_says_so(spark, tmp_path, session_conf):
    """gpu turns the RAPIDS SQL plugin off for ingest (its scan and write stay on the CPU anyway); gpu-explain
    keeps it on so that the CI gate still judges ingest's transforms; the setting ends with the stage."""
    assert profiles.load_profile("gpu")[ingest.RAPIDS_SQL_KEY] == "false"
    assert ingest.RAPIDS_SQL_KEY not in profiles.load_profile("gpu-explain")
    assert ingest.plugin_conf(spark) == {}
    session_conf(**{ingest.RAPIDS_SQL_KEY: "false"})
    assert ingest.plugin_conf(spark) == {"spark.rapids.sql.enabled": "false"}
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n", numbered_events(3, bad_every=5))
    record = ingest.run(spark, inp, str(tmp_path / "lake"))
    assert record.counts["totals"]["customers"]["bronze"] == 1
    assert spark.conf.get("spark.rapids.sql.enabled", None) is None
