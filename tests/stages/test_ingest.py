"""Unit tests of the ingest transforms and stage on small inline data; expected rows by hand."""
from __future__ import annotations

import contextlib

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.lake.contract import EVENTS_CSV_SCHEMA
from jobs.launch import profiles
from jobs.stages import ingest
from tests.support.etl_inputs import CUSTOMERS_HEADER, EVENTS_HEADER, good_customer_line, write_input


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
