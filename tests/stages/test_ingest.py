"""Unit tests of the ingest transforms and stage on small inline data; expected rows by hand."""
from __future__ import annotations

import glob

import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.lake import delta_io
from jobs.lake.contract import EVENTS_CSV_SCHEMA
from jobs.launch import profiles
from jobs.run.pipeline import Pipeline
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

    # Bronze holds every record; the malformed ones flagged (clean reads the others).
    got_b = spark.read.format("delta").load(f"{lake}/bronze/events").select(
        "event_id", "note", "source_file", "record_number", F.col("malformed.reason").alias("malformed"))
    expected_b = spark.createDataFrame([
        ("E1", 'a, "quoted"\nsecond line', "events-00000.csv", 0, None),
        ("E2", None, "events-00000.csv", 1, "wrong_field_count"),
        ("E3", "x", "events-00000.csv", 2, "wrong_field_count"),
        ("E4", None, "events-00000.csv", 3, None),
        ("E5", "y\nz", "events-00001.csv", 0, "wrong_field_count"),
        ("E6", "ok", "events-00001.csv", 1, None),
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
    # Bronze's strings are written plain, without Parquet dictionaries; the session's setting is put back after.
    for table in ("bronze/customers", "bronze/events"):
        files = glob.glob(f"{lake}/{table}/**/*.parquet", recursive=True)   # a file commit's are in a folder
        assert files
        for f in files:
            chunks = pq.ParquetFile(f).metadata.row_group(0)
            encodings = {chunks.column(i).path_in_schema: chunks.column(i).encodings for i in range(chunks.num_columns)}
            assert not any("DICTIONARY" in e for es in encodings.values() for e in es), (f, encodings)
    assert spark.conf.get("parquet.enable.dictionary", None) is None



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
    # Bronze holds every record once; the quarantine the malformed ones among them.
    assert sorted(tuple(r) for r in bronze.collect()) == sorted(expected)
    quarantined = [tuple(r) for r in q.collect()]
    assert set(quarantined) <= set(expected) and len(quarantined) == sum((40 + 17 * f) // 7 for f in range(4))
    assert record.counts["totals"]["events"]["records"] == len(expected)
    assert spark.conf.get("spark.sql.files.openCostInBytes") == open_cost   # restored


# Every rule of the reader in one file: a line break inside quotes (CR LF), a blank line, doubled quotes and commas
# inside quotes, a short and a long record, a blank line inside quotes, a lone CR ending a record, a byte that is not
# UTF-8, a quoted empty field, and a last record with no line break.
HOSTILE = (EVENTS_HEADER.encode() + b"\r\n"
           b'E1,C1,2026-01-01 00:00:00,charge,1.00,web,"two\r\nlines"\r\n'
           b"\r\n"
           b'E2,C1,2026-01-01 00:00:00,charge,1.00,web,"say ""hi"", then, go"\n'
           b"E3,C1,2026-01-01 00:00:00,charge,1.00,web\n"
           b'E4,C1,2026-01-01 00:00:00,usage,2.00,app,"a\n\nb"\r'
           b"E5,C1,2026-01-01 00:00:00,usage,2.00,app,caf\xe9\n"
           b'E6,C1,2026-01-01 00:00:00,usage,2.00,app,""\n'
           b'E7,C1,2026-01-01 00:00:00,usage,2.00,app,"x",extra\n'
           b"E8,C1,2026-01-01 00:00:00,usage,2.00,app,last without newline")
# (record_number, event_id, note, record_lines, malformed reason), by hand.
HOSTILE_BRONZE = [
    (0, "E1", "two\r\nlines", 2, None),
    (1, "E2", 'say "hi", then, go', 1, None),
    (2, "E3", None, 1, "wrong_field_count"),
    (3, "E4", "a\n\nb", 3, None),
    (4, "E5", "caf\ufffd", 1, None),
    (5, "E6", None, 1, None),
    (6, "E7", "x", 1, "wrong_field_count"),
    (7, "E8", "last without newline", 1, None),
]


@pytest.mark.parametrize("columnar", [False, True], ids=["rows", "arrow-batches"])
@pytest.mark.parametrize("chunk", [1, 7, 13, 64, 1 << 30])
def test_a_file_read_in_chunks_of_any_size_gives_the_same_records(spark, tmp_path, monkeypatch, session_conf, chunk,
                                                                   columnar):
    """The pre-pass cuts the file into chunks of ``chunk`` bytes (a record boundary, a CR LF, a quote may fall on any
    chunk edge); the splits it plans must give every record once, numbered and parsed as one whole read does. With
    chunks of half the file or more it is read whole and counted as it is parsed: the same records and lines. The
    reader's records as rows or as Arrow batches (of 3 rows: a file's records span several) give the same."""
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n", {})
    (tmp_path / "in" / "events" / "events-00000.csv").write_bytes(HOSTILE)
    monkeypatch.setattr(ingest, "chunk_bytes", lambda spark, total: chunk)
    monkeypatch.setattr(ingest, "COLUMNAR_BATCH_ROWS", 3)
    session_conf(**{ingest.COLUMNAR_KEY: str(columnar).lower()})
    lake = str(tmp_path / "lake")

    record = ingest.run(spark, inp, lake)

    got = (spark.read.format("delta").load(f"{lake}/bronze/events")
           .select("record_number", "event_id", "note", "record_lines", F.col("malformed.reason")).collect())
    assert sorted(tuple(r) for r in got) == HOSTILE_BRONZE
    q = spark.read.format("delta").load(f"{lake}/quarantine").where("dataset = 'events'").collect()
    assert sorted((r["record_number"], r["raw"]) for r in q) == [
        (2, "E3,C1,2026-01-01 00:00:00,charge,1.00,web"), (6, 'E7,C1,2026-01-01 00:00:00,usage,2.00,app,"x",extra')]
    # 13 lines: the header, E1 on two, a blank one, E2, E3, E4 on three (one of them blank), E5 to E8.
    assert record.counts["input"]["events"]["files"]["events-00000.csv"] == {
        "bytes": len(HOSTILE), "lines": 13, "blank_lines": 2}
    assert record.counts["files"]["events"]["events-00000.csv"] == {"records": 8, "bronze": 6, "quarantined": 2}


def test_the_columnar_key_makes_the_reader_hand_over_arrow_batches(spark, tmp_path, session_conf):
    """With the key on, the scan is columnar (Spark turns its batches into rows for a CPU plan, the RAPIDS Accelerator
    copies them to the GPU as they are): the records of HOSTILE, as by hand above."""
    path = tmp_path / "events.csv"
    path.write_bytes(HOSTILE)
    files = [ingest.InputFile(str(path), "events.csv", len(HOSTILE))]
    session_conf(**{ingest.COLUMNAR_KEY: "true"})
    df = ingest.extract(spark, files, [[0, 0, len(HOSTILE), 0, 0]], tuple(EVENTS_CSV_SCHEMA.fieldNames()), "unused")
    assert "ColumnarToRow" in df._jdf.queryExecution().executedPlan().toString()
    got = df.select("record_number", "event_id", "note", "record_lines", "field_count").collect()
    assert sorted((r[0], r[1], r[2], r[3]) for r in got) == [row[:4] for row in HOSTILE_BRONZE]
    assert [r["field_count"] for r in sorted(got)] == [7, 7, 6, 7, 7, 7, 8, 7]


def test_ingest_fails_loudly_when_a_split_is_numbered_wrong(spark, tmp_path, monkeypatch):
    """If a split's first record number were ever off (a bug in the pre-pass or the plan), the accounting stops the
    stage instead of writing numbers that overlap or leave a gap."""
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n",
                      numbered_events(3, bad_every=5))
    monkeypatch.setattr(ingest, "chunk_bytes", lambda spark, total: 300)
    right = ingest.planned

    def off_by_one(inputs, chunks, whole):
        layouts = right(inputs, chunks, whole)
        splits = layouts["events"].splits
        assert len(splits) > 3, "the files must be read in several splits for this test"
        splits[2][3] += 1
        return layouts

    monkeypatch.setattr(ingest, "planned", off_by_one)
    with pytest.raises(RuntimeError, match="not each record once: ingest's accounting does not add up"):
        ingest.run(spark, inp, str(tmp_path / "lake"))


def test_ingest_fails_loudly_when_a_file_read_whole_has_no_count(spark, tmp_path, monkeypatch):
    """A file read whole is checked against the count its read took as it went; a read whose count never reached
    the driver (a task that stopped short of its file's end) fails the stage rather than pass unchecked."""
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n",
                      numbered_events(3, bad_every=5))
    right = ingest.take_tally

    def first_file_lost(spark, tally):
        got = right(spark, tally)
        assert got["counts"].pop("0", None) is not None, "the files must be read whole for this test"
        return got

    monkeypatch.setattr(ingest, "take_tally", first_file_lost)
    with pytest.raises(RuntimeError, match="was read whole but its count is missing"):
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
                             for ds, files in record.counts["files"].items()})[0] == {
        k: v for k, v in record.counts.items() if k != "input"}   # "input": the independent count, apart


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
    with pytest.raises(UserError, match=r"no customers CSV files \(\*.csv, \*.csv.gz or \*.csv.bz2\)"):
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


def test_a_header_with_another_separator_is_refused_naming_it():
    """Excel where the decimal mark is a comma saves "CSV" with semicolons; a TSV has tabs: the refusal says so."""
    columns = ("event_id", "customer_id", "amount")
    for line, name in (("event_id;customer_id;amount", "semicolons"), ('"event_id"\t"customer_id"\t"amount"\r', "tabs"),
                       ("event_id|customer_id|amount", "vertical bars")):
        with pytest.raises(UserError, match=f"^e.csv: the header's fields are separated by {name}, not commas: "
                                            f"the reader takes commas only; export the file with comma separators"):
            ingest.check_header("e.csv", line, columns)
    ingest.check_header("e.csv", '\ufeffevent_id, customer_id ,"amount"\r', columns)   # commas: accepted
    with pytest.raises(UserError, match="^e.csv: header 'event_id;amount' does not match the contract columns"):
        ingest.check_header("e.csv", "event_id;amount", columns)                     # other columns: the usual refusal


def test_a_wrong_header_is_refused_naming_what_differs():
    """The refusal says which columns are missing or not in the contract, or that the columns are all there in another
    order (read by position, they would land in the wrong columns)."""
    columns = ("event_id", "customer_id", "amount")
    cases = {"customer_id,event_id,amount": "(the same columns in another order: they are read by position)",
             "event_id,customer,amount,extra": "(missing: customer_id) (not in the contract: customer, extra)",
             "event_id,customer_id": "(missing: amount)",
             "Event_ID,customer_id,amount": "(missing: event_id) (not in the contract: Event_ID)"}
    for line, why in cases.items():
        with pytest.raises(UserError) as e:
            ingest.check_header("e.csv", line, columns)
        assert str(e.value) == (f"e.csv: header {line!r} does not match the contract columns event_id,customer_id,amount "
                                f"{why}: write the file with that header line (jobs/lake/contract.py), or move it out "
                                f"of the input folder")


def test_a_utf16_file_is_refused_naming_its_encoding_and_nothing_is_written(spark, tmp_path):
    """A file saved as UTF-16 (a byte-order mark FF FE, then two bytes a character) is refused before anything is
    written, by ingest on Spark and by scripts/pipeline's check of a local --input alike, with the cause and the
    fix rather than the garbled header."""
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": GOOD_EVENTS})
    utf16 = (EVENTS_HEADER + "\r\nE1,C1,2026-01-01 00:00:00,charge,1.00,web,n1\r\n").encode("utf-16")
    assert utf16[:2] == b"\xff\xfe"
    (tmp_path / "in" / "events" / "events-00001.csv").write_bytes(utf16)
    lake = tmp_path / "lake"
    expected = r"events-00001.csv: the header line holds zero bytes, .* it looks UTF-16 encoded; save it as UTF-8"
    with pytest.raises(UserError, match=expected):
        ingest.run(spark, inp, str(lake))
    assert not lake.exists()
    with pytest.raises(UserError, match=expected):
        Pipeline.check_input(tmp_path / "in")


def test_ingest_runs_with_the_plugins_sql_off_where_the_key_says_so(spark, tmp_path, session_conf):
    """gpu keeps the RAPIDS SQL plugin on for ingest (bronze written on the GPU by the file commits), gpu-explain by
    default, so the CI gate judges ingest's transforms; false turns it off for the stage only."""
    assert profiles.load_profile("gpu")[ingest.RAPIDS_SQL_KEY] == "true"
    assert ingest.RAPIDS_SQL_KEY not in profiles.load_profile("gpu-explain")
    assert ingest.plugin_conf(spark) == {}
    session_conf(**{ingest.RAPIDS_SQL_KEY: "false"})
    # ... and bronze is then written by Delta's writer, not as a file commit (whose Parquet write would be the CPU's).
    assert ingest.plugin_conf(spark) == {"spark.rapids.sql.enabled": "false", delta_io.WRITE_FILES_KEY: "false"}
    session_conf(**{delta_io.WRITE_FILES_KEY: "true"})
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n", numbered_events(3, bad_every=5))
    record = ingest.run(spark, inp, str(tmp_path / "lake"))
    assert record.counts["totals"]["customers"]["bronze"] == 1
    assert spark.conf.get("spark.rapids.sql.enabled", None) is None
    # Delta's writer puts its files at the table's top; a file commit's are in a folder of their own.
    adds = delta_io.commit_actions(spark, str(tmp_path / "lake" / "bronze" / "customers"), record.wrote["bronze_customers"])
    assert [a["add"]["path"].count("/") for a in adds if "add" in a] == [0]


def test_ingest_takes_its_own_gpu_batch_size_where_the_key_sets_one(spark, session_conf):
    """gpuBatchBytes sets the plugin's batch size for ingest's queries only (plugin_conf's settings wrap them); unset,
    the session's stands; a size it cannot read, or under a MiB, stops ingest naming the key. With the plugin off the
    size does not matter."""
    session_conf(**{ingest.RAPIDS_SQL_KEY: "true"})
    assert ingest.plugin_conf(spark) == {}
    session_conf(**{ingest.GPU_BATCH_KEY: "64m"})
    assert ingest.plugin_conf(spark) == {"spark.rapids.sql.batchSizeBytes": "67108864"}
    session_conf(**{ingest.GPU_BATCH_KEY: " 2g "})
    assert ingest.plugin_conf(spark) == {"spark.rapids.sql.batchSizeBytes": "2147483648"}
    for bad in ("lots", "512k", "-5m"):
        session_conf(**{ingest.GPU_BATCH_KEY: bad})
        with pytest.raises(UserError, match=r"spark\.churn\.ingest\.gpuBatchBytes=.* is not a size of at least 1m"):
            ingest.plugin_conf(spark)
    session_conf(**{ingest.RAPIDS_SQL_KEY: "false"})
    assert ingest.plugin_conf(spark) == {"spark.rapids.sql.enabled": "false", delta_io.WRITE_FILES_KEY: "false"}


def test_ingest_with_the_plugin_on_writes_bronze_as_a_file_commit(spark, tmp_path, session_conf):
    """The gpu profile's ingest (plugin on, file commits): bronze committed from Parquet files in a folder of their
    own, every record in it, and the accounting exact from that commit. Three event files of 40, 57 and 74 records,
    a short record every 5th (8 + 11 + 14 = 33 quarantined)."""
    session_conf(**{ingest.RAPIDS_SQL_KEY: "true", delta_io.WRITE_FILES_KEY: "true"})
    assert ingest.plugin_conf(spark) == {}
    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n", numbered_events(3, bad_every=5))
    lake = tmp_path / "lake"
    record = ingest.run(spark, inp, str(lake))
    assert record.counts["totals"]["customers"]["bronze"] == 1
    assert {k: record.counts["totals"]["events"][k] for k in ("records", "bronze", "quarantined")} == \
        {"records": 171, "bronze": 138, "quarantined": 33}
    for table in ("customers", "events"):
        adds = delta_io.commit_actions(spark, str(lake / "bronze" / table), record.wrote[f"bronze_{table}"])
        assert {a["add"]["path"].count("/") for a in adds if "add" in a} == {1}
    bronze = spark.read.format("delta").load(str(lake / "bronze" / "events"))
    assert bronze.count() == 171
    assert bronze.where("malformed IS NOT NULL").count() == 33


GOOD_EVENTS = EVENTS_HEADER + "\n" + "".join(f"E{i},C1,2026-01-01 00:00:00,charge,1.00,web,n{i}\n" for i in range(3))


@pytest.mark.parametrize("name, why", [
    ("_part-00001.csv", "starts with '_' or '.'"),      # Spark's file index would skip it, records and all
    (".events-00001.csv", "starts with '_' or '.'"),
    ("events-00001.csv.GZ", "rename it to end in '.gz'"),
    ("events-00001.txt", "is not a CSV file ingest reads"),
    ("events-00001.csv.zip", "is not a CSV file ingest reads"),
])
def test_a_file_ingest_would_not_read_is_refused_with_one_line_and_nothing_is_written(spark, tmp_path, name, why):
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": GOOD_EVENTS, name: GOOD_EVENTS})
    with pytest.raises(UserError, match=why) as e:
        ingest.run(spark, inp, str(tmp_path / "lake"))
    assert name in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "lake").exists()


def test_upper_case_bzip2_gzip_and_empty_files_are_read_and_side_files_left_aside(spark, tmp_path):
    import bz2
    import gzip

    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.CSV": GOOD_EVENTS, "events-00004.csv": ""})
    events = tmp_path / "in" / "events"
    (events / "events-00001.csv.bz2").write_bytes(bz2.compress(GOOD_EVENTS.encode()))
    (events / "events-00002.Csv.gz").write_bytes(gzip.compress(GOOD_EVENTS.encode()))
    (events / "_SUCCESS").write_text("")                           # Spark's marker: no records
    (events / ".events-00000.CSV.crc").write_bytes(b"\x00crc")      # Hadoop's checksum of a file beside it
    record = ingest.run(spark, inp, str(tmp_path / "lake"))
    assert record.counts["files"]["events"] == {
        "events-00000.CSV": {"records": 3, "bronze": 3, "quarantined": 0},
        "events-00001.csv.bz2": {"records": 3, "bronze": 3, "quarantined": 0},
        "events-00002.Csv.gz": {"records": 3, "bronze": 3, "quarantined": 0},
        "events-00004.csv": {"records": 0, "bronze": 0, "quarantined": 0},
    }


def test_a_quote_that_never_closes_sends_its_record_and_the_ones_it_swallowed_to_quarantine(spark, tmp_path):
    swallowed = "".join(f"E{i},C1,2026-01-02 00:00:00,usage,2.00,app,n{i}\n" for i in range(3, 17))
    events = (EVENTS_HEADER + "\n"
              'E1,C1,2026-01-01 00:00:00,charge,1.00,web,"a note\nover two lines"\n'   # a quoted newline: fine
              'E2,C1,2026-01-01 00:00:00,charge,1.00,web,"opens a quote\n'               # never closed
              + swallowed)
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": events})
    lake = str(tmp_path / "lake")
    record = ingest.run(spark, inp, lake)

    bronze = spark.read.format("delta").load(f"{lake}/bronze/events").orderBy("record_number")
    assert [(r["event_id"], r["malformed"] and r["malformed"]["reason"]) for r in bronze.collect()] == [
        ("E1", None), ("E2", "unclosed_quote")]
    q = spark.read.format("delta").load(f"{lake}/quarantine").collect()
    assert [(r["record_number"], r["reason"], r["detail"]) for r in q] == [
        (1, "unclosed_quote", "note holds whole records: a quote opened there is never closed")]
    # The raw text is the record's, exactly as in the file: from its first field to the end of the file.
    assert q[0]["raw"] == 'E2,C1,2026-01-01 00:00:00,charge,1.00,web,"opens a quote\n' + swallowed
    assert record.counts["files"]["events"]["events-00000.csv"] == {"records": 2, "bronze": 1, "quarantined": 1}


def test_a_corrupt_file_ends_with_one_line_naming_it_and_every_table_as_it_was(spark, tmp_path, capsys):
    import gzip

    from jobs.lake import delta_io
    from jobs.run import runner

    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    big = EVENTS_HEADER + "\n" + "".join(f"E{i},C1,2026-01-01 00:00:00,charge,1.00,web,n{i}\n" for i in range(20000))
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": GOOD_EVENTS})
    lake = str(tmp_path / "lake")
    assert runner.main(["ingest", "--input", inp, "--lake", lake]) == 0
    before = {t: delta_io.committed_version(spark, delta_io.table_path(lake, t)) for t in ingest.STAGE.writes}

    data = gzip.compress(big.encode())
    (tmp_path / "in" / "events" / "events-00001.csv.gz").write_bytes(data[: len(data) // 2])  # cut short
    capsys.readouterr()
    assert runner.main(["ingest", "--input", inp, "--lake", lake]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "events-00001.csv.gz is a truncated or corrupt compressed file" in err[0], err
    for table, version in before.items():   # each table is back to its rows of before (restored or untouched)
        now = spark.read.format("delta").load(delta_io.table_path(lake, table))
        then = spark.read.format("delta").option("versionAsOf", version).load(delta_io.table_path(lake, table))
        assert sorted(now.collect()) == sorted(then.collect()), table
    assert spark.read.format("delta").load(delta_io.table_path(lake, "bronze_events")).count() == 3


def test_a_record_of_thirty_thousand_fields_is_quarantined_with_its_raw_text(spark, tmp_path):
    """No field limit: a record far wider than the contract is one more wrong field count, kept whole."""
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    wide = ",".join(["x"] * 30001)
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": GOOD_EVENTS + wide + "\n"})
    lake = str(tmp_path / "lake")
    record = ingest.run(spark, inp, lake)
    q = spark.read.format("delta").load(f"{lake}/quarantine").collect()
    assert [(r["record_number"], r["reason"], r["raw"]) for r in q] == [(3, "wrong_field_count", wide)]
    assert record.counts["files"]["events"]["events-00000.csv"] == {"records": 4, "bronze": 3, "quarantined": 1}


def test_the_independent_count_explains_every_physical_line_of_every_file(spark, tmp_path):
    events = (EVENTS_HEADER + "\r\n"
              'E1,C1,2026-01-01 00:00:00,charge,1.00,web,"two\r\nlines"\r\n'   # CRLF, one inside quotes
              "\r\n"                                                          # a blank line: skipped by the parser
              "E2,C1,2026-01-01 00:00:00,charge,1.00,web\r\n"                  # short: quarantined
              'E3,C1,2026-01-01 00:00:00,usage,2.00,app,"a\n\nb"\n')          # a blank line inside quotes
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": events})
    record = ingest.run(spark, inp, str(tmp_path / "lake"))
    assert record.counts["files"]["events"]["events-00000.csv"] == {"records": 3, "bronze": 2, "quarantined": 1}
    assert record.counts["input"]["events"] == {
        "files": {"events-00000.csv": {"bytes": len(events.encode()), "lines": 8, "blank_lines": 2}},
        "bytes": len(events.encode()), "lines": 8}
    assert record.counts["input"]["customers"]["lines"] == 2


def test_lines_the_parsed_records_do_not_explain_stop_the_stage_naming_the_file():
    files = {"events": {"a.csv": {"records": 2}, "b.csv": {"records": 2}}}
    sizes = {"events": {"a.csv": 100, "b.csv": 100}}
    # a.csv: header + 2 one-line records + 1 blank line; b.csv: 6 lines for a header and 2 records, 1 blank.
    physical = {("events", "a.csv"): (4, 1), ("events", "b.csv"): (6, 1)}
    with pytest.raises(UserError, match=r"events file b\.csv: 6 lines \(1 blank\), but its header and 2 parsed "
                                        r"records span 3: .*records may be lost"):
        ingest.reconciled(files, {}, physical, sizes)
    # The same six lines are explained when one record spans three of them (two quoted line breaks).
    got = ingest.reconciled(files, {("events", "b.csv"): 2}, physical, sizes)
    assert got["events"]["files"]["b.csv"] == {"bytes": 100, "lines": 6, "blank_lines": 1}


def test_a_line_of_spaces_a_nul_byte_and_a_last_record_without_newline_are_each_accounted_for(spark, tmp_path):
    """A line of white space is a record of one field (not a blank line); a NUL byte is data, kept for clean's
    checks; the file's last record needs no line end."""
    events = (EVENTS_HEADER + "\n"
              "E1,C1,2026-01-01 00:00:00,charge,1.00,web,n1\n"
              "   \n"
              "E2,C1,2026-01-01 00:00:00,charge,1\x00.00,web,a\x00b\n"
              "E3,C1,2026-01-01 00:00:00,usage,2.00,app,last")
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": events})
    lake = str(tmp_path / "lake")
    record = ingest.run(spark, inp, lake)
    bronze = spark.read.format("delta").load(f"{lake}/bronze/events").where(F.col("malformed").isNull())
    assert sorted((r["event_id"], r["amount"], r["note"]) for r in bronze.collect()) == [
        ("E1", "1.00", "n1"), ("E2", "1\x00.00", "a\x00b"), ("E3", "2.00", "last")]
    q = spark.read.format("delta").load(f"{lake}/quarantine").collect()
    assert [(r["record_number"], r["reason"], r["raw"]) for r in q] == [(1, "wrong_field_count", "   ")]
    assert record.counts["files"]["events"]["events-00000.csv"] == {"records": 4, "bronze": 3, "quarantined": 1}


def test_a_file_that_starts_with_a_byte_order_mark_ingests_like_one_without(spark, tmp_path):
    """Excel's "CSV UTF-8" export starts the file with a UTF-8 byte-order mark (EF BB BF) before the header, and ends
    its lines with CR LF: the header still matches the contract and every record is read, none changed."""
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {})
    (tmp_path / "in" / "events" / "events-00000.csv").write_bytes(
        b"\xef\xbb\xbf" + EVENTS_HEADER.encode() + b"\r\n"
        b"E1,C1,2026-01-01 00:00:00,charge,1.00,web,n1\r\n"
        b"E2,C1,2026-01-02 00:00:00,usage,2.00,app,n2\r\n")
    lake = str(tmp_path / "lake")
    record = ingest.run(spark, inp, lake)
    bronze = spark.read.format("delta").load(f"{lake}/bronze/events")
    assert sorted((r["event_id"], r["note"], r["record_number"], r["malformed"]) for r in bronze.collect()) == [
        ("E1", "n1", 0, None), ("E2", "n2", 1, None)]
    assert record.counts["files"]["events"]["events-00000.csv"] == {"records": 2, "bronze": 2, "quarantined": 0}


def test_a_file_of_blank_lines_only_is_refused_as_a_missing_header_and_nothing_is_written(spark, tmp_path):
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    inp = write_input(tmp_path / "in", customers, {"events-00000.csv": GOOD_EVENTS, "events-00001.csv": "\n\n"})
    with pytest.raises(UserError, match="events-00001.csv: header '' does not match the contract columns") as e:
        ingest.run(spark, inp, str(tmp_path / "lake"))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "lake").exists()
