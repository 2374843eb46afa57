"""Delta through the test session: writes, reads, time travel and schema enforcement, idempotent appends and
replaces, relative paths, and a snapshot scanned as exactly its Parquet files."""
from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.utils import AnalysisException

from jobs.lake import delta_io
from jobs.lake.session import session_conf


def test_delta_write_read_time_travel_and_schema_enforcement(spark, tmp_path):
    path = str(tmp_path / "accounts")
    first = spark.createDataFrame([Row(id=1, plan="basic"), Row(id=2, plan="pro")])
    assert delta_io.overwrite(first, path) == 0
    second = spark.createDataFrame([Row(id=3, plan="team")])
    assert delta_io.overwrite(second, path) == 1

    latest, v = delta_io.read(spark, path)
    assert v == 1
    assert_df_equality(latest, spark.createDataFrame([Row(id=3, plan="team")]), ignore_row_order=True)
    v0, _ = delta_io.read(spark, path, at_version=0)
    expected_v0 = spark.createDataFrame([Row(id=1, plan="basic"), Row(id=2, plan="pro")])
    assert_df_equality(v0, expected_v0, ignore_row_order=True)

    wrong = spark.createDataFrame([Row(id=4, plan="x", seats=5)])
    with pytest.raises(AnalysisException, match="A schema mismatch detected when writing to the Delta table"):
        wrong.write.format("delta").mode("append").save(path)
    assert delta_io.version(spark, path) == 1  # the rejected append committed nothing


def test_a_small_tables_commits_keep_its_counts_not_its_file_list_in_the_checksum(spark, tmp_path):
    """base.conf: a commit to a table of few files does not list the version before it to write its file list into
    the checksum (a query of its own on the driver); the checksum still has the table's files and bytes."""
    path = tmp_path / "small"
    delta_io.overwrite(spark.createDataFrame([Row(id=1), Row(id=2)]).repartition(2), str(path))
    delta_io.overwrite(spark.createDataFrame([Row(id=3)]), str(path))
    for version in (0, 1):
        crc = json.loads((path / "_delta_log" / f"{version:020d}.crc").read_text())
        assert "allFiles" not in crc
        assert crc["numFiles"] == len(spark.read.format("delta").option("versionAsOf", version).load(str(path))
                                      .inputFiles())
        assert crc["tableSizeBytes"] > 0


def test_append_once_skips_a_repeated_transaction(spark, tmp_path):
    path = str(tmp_path / "runs")
    row = spark.createDataFrame([Row(run_id="r1", auc=0.8)])
    assert delta_io.append_once(row, path, app_id="train", txn_version=7) == 0
    assert delta_io.append_once(row, path, app_id="train", txn_version=7) == 0   # skipped: no commit
    assert delta_io.append_once(row, path, app_id="train", txn_version=6) == 0   # an older version: skipped too
    assert spark.read.format("delta").load(path).count() == 1
    # Under the cpu profile (file commits) the row is a Parquet file in a folder of its own, and the skipped appends
    # left no files behind.
    folders = [p.name for p in tmp_path.joinpath("runs").iterdir() if p.name.startswith(delta_io.WRITE_FOLDER_PREFIX)]
    assert len(folders) == 1
    # Delta's own writer reads the recorded transaction: it skips the same app id and version, appends a newer one.
    row.write.format("delta").mode("append").option("txnAppId", "train").option("txnVersion", 7).save(path)
    assert delta_io.version(spark, path) == 0
    assert delta_io.append_once(row, path, app_id="train", txn_version=8) == 1
    assert spark.read.format("delta").load(path).count() == 2


def test_append_once_to_a_partitioned_table_goes_through_delta(spark, tmp_path):
    path = str(tmp_path / "parts")
    spark.createDataFrame([Row(run_id="r1", auc=0.8)]).write.format("delta").partitionBy("run_id").save(path)
    assert delta_io.append_once(spark.createDataFrame([Row(run_id="r2", auc=0.7)]), path, "train", 1) == 1
    assert sorted(r["run_id"] for r in spark.read.format("delta").load(path).collect()) == ["r1", "r2"]
    assert not [p for p in tmp_path.joinpath("parts").iterdir() if p.name.startswith(delta_io.WRITE_FOLDER_PREFIX)]


def test_replace_where_only_touches_its_slice(spark, tmp_path):
    path = str(tmp_path / "q")
    rows = [Row(stage="ingest", n=1), Row(stage="clean", n=2)]
    delta_io.overwrite(spark.createDataFrame(rows), path)
    delta_io.replace_where(spark.createDataFrame([Row(stage="clean", n=9)]), path, "stage = 'clean'")
    delta_io.replace_where(spark.createDataFrame([Row(stage="clean", n=9)]), path, "stage = 'clean'")
    got = spark.read.format("delta").load(path)
    assert_df_equality(got, spark.createDataFrame([Row(stage="ingest", n=1), Row(stage="clean", n=9)]),
                       ignore_row_order=True)


def test_delta_versions_read_through_a_relative_path(spark, tmp_path):
    """The README's main command writes under runs/latest: a relative lake path must work end to end.
    (Relative to the process's start directory, which the JVM shares; a later chdir would not reach it.)"""
    rel = os.path.relpath(tmp_path / "t")
    delta_io.overwrite(spark.range(3), rel)
    assert delta_io.overwrite(spark.range(5), rel) == 1
    df, v = delta_io.read(spark, rel)
    assert (v, df.count()) == (1, 5)


def test_gpu_profiles_scan_a_delta_snapshot_as_exactly_its_parquet_files(spark, tmp_path):
    path = str(tmp_path / "t")
    delta_io.overwrite(spark.createDataFrame([(1, "a"), (2, "b")], "id long, s string"), path)        # v0
    delta_io.overwrite(spark.createDataFrame([(3, "c")], "id long, s string"), path)                  # v1: v0's file removed
    delta_io.append_once(spark.createDataFrame([(4, "d")], "id long, s string"), path, "t", 1)        # v2
    parts = str(tmp_path / "p")
    delta_io.overwrite(spark.createDataFrame([(5, "x")], "id long, s string"), parts, partition_by=("s",))
    with session_conf(spark, {delta_io.FILES_AS_PARQUET_KEY: "true"}):
        latest, v = delta_io.read(spark, path)
        old, _ = delta_io.read(spark, path, 0)
        partitioned, _ = delta_io.read(spark, parts)
    # A plain Parquet scan lists its files in memory; a Delta scan asks the Delta log (Tahoe*/Delta* index).
    assert v == 2 and _scan_file_indexes(latest) == ["InMemoryFileIndex"]
    # The files the pinned version lists, nothing the folder also holds: v0's removed file is not read at v2 ...
    assert_df_equality(latest, spark.createDataFrame([(3, "c"), (4, "d")], "id long, s string"),
                       ignore_row_order=True, ignore_nullable=True)
    # ... and time travel still works: v0 is its own two rows.
    assert_df_equality(old, spark.createDataFrame([(1, "a"), (2, "b")], "id long, s string"),
                       ignore_row_order=True, ignore_nullable=True)
    # A partitioned table's partition values live in its log, not its files: it is read through Delta.
    assert [("Delta" in i or "Tahoe" in i) for i in _scan_file_indexes(partitioned)] == [True], _scan_file_indexes(partitioned)
    assert [tuple(r) for r in partitioned.collect()] == [(5, "x")]


def test_a_plain_overwrite_reads_back_as_its_own_files_and_any_other_commit_through_delta(spark, tmp_path):
    """What ingest reads back from bronze: the files its overwrite just committed, with no Delta snapshot built;
    None (the caller reads through Delta) for a commit whose adds are not the whole table or a table with no rows."""
    path, schema = str(tmp_path / "t"), "id long, s string"
    delta_io.overwrite(spark.createDataFrame([(1, "a"), (2, "b")], schema), path)                        # v0
    delta_io.overwrite(spark.createDataFrame([(3, "c"), (4, None)], schema).repartition(2), path)        # v1
    delta_io.append_once(spark.createDataFrame([(5, "e")], schema), path, "t", 1)                        # v2
    delta_io.replace_where(spark.createDataFrame([(3, "f")], schema), path, "id = 3")                    # v3
    empty = str(tmp_path / "empty")
    delta_io.overwrite(spark.createDataFrame([], schema), empty)
    struct = spark.createDataFrame([], schema).schema
    v1 = delta_io.overwrite_files(spark, path, 1, struct)
    assert _scan_file_indexes(v1) == ["InMemoryFileIndex"]
    assert_df_equality(v1, spark.createDataFrame([(3, "c"), (4, None)], schema), ignore_row_order=True,
                       ignore_nullable=True)
    assert delta_io.overwrite_files(spark, path, 2, struct) is None    # an append adds to what is there
    assert delta_io.overwrite_files(spark, path, 3, struct) is None    # a replaceWhere overwrites a slice
    assert delta_io.overwrite_files(spark, path, 9, struct) is None    # no such commit
    assert delta_io.overwrite_files(spark, empty, 0, struct) is None   # no file: Delta's reader gives the schema


def test_a_plain_overwrites_rows_are_counted_from_its_files_statistics_and_no_other_commits(spark, tmp_path):
    path, schema = str(tmp_path / "t"), "id long, s string"
    delta_io.overwrite(spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], schema).repartition(2), path)  # v0
    delta_io.append_once(spark.createDataFrame([(5, "e")], schema), path, "t", 1)                            # v1
    delta_io.replace_where(spark.createDataFrame([(3, "f")], schema), path, "id = 3")                        # v2
    empty = str(tmp_path / "empty")
    delta_io.overwrite(spark.createDataFrame([], schema), empty)
    assert delta_io.overwrite_rows(spark, path, 0) == 3
    assert delta_io.overwrite_rows(spark, path, 1) is None    # an append: its adds are not the table
    assert delta_io.overwrite_rows(spark, path, 2) is None    # a replaceWhere: a slice
    assert delta_io.overwrite_rows(spark, path, 9) is None    # no such commit
    assert delta_io.overwrite_rows(spark, empty, 0) == 0
    # With a file's row count gone from its statistics, the count is not guessed.
    log = tmp_path / "t" / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    for a in actions:
        if "add" in a:
            a["add"]["stats"] = json.dumps({k: v for k, v in json.loads(a["add"]["stats"]).items() if k != "numRecords"})
    log.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    assert delta_io.overwrite_rows(spark, path, 0) is None


def test_every_profile_reads_a_plain_overwrite_as_its_commits_files_and_anything_else_through_delta(spark, tmp_path):
    """The cpu profile too: a version a plain overwrite wrote is read as the files that commit adds, with the schema
    from the log (no Delta snapshot, no Spark job to replay the log); any other commit, a partitioned table, a table
    whose protocol needs more than reader version 1, or the key set false, through Delta's reader."""
    schema = "id long, s string, d date"
    path = str(tmp_path / "t")
    rows0 = [(1, "a", dt.date(2024, 1, 1)), (2, None, None)]
    rows1 = [(3, "c", dt.date(2024, 2, 29))]
    delta_io.overwrite(spark.createDataFrame(rows0, schema), path)                                     # v0
    delta_io.overwrite(spark.createDataFrame(rows1, schema), path)                                     # v1
    delta_io.append_once(spark.createDataFrame([(4, "d", None)], schema), path, "t", 1)                # v2
    # v1 repeats neither schema nor protocol: they are found in v0's commit.
    assert not any("metaData" in a or "protocol" in a for a in delta_io.commit_actions(spark, path, 1))
    metadata, protocol = delta_io.table_metadata(spark, path, 1)
    assert protocol["minReaderVersion"] == 1 and json.loads(metadata["schemaString"])["fields"][2]["name"] == "d"

    delta = {v: spark.read.format("delta").option("versionAsOf", v).load(path) for v in (0, 1, 2)}
    for v, rows in ((0, rows0), (1, rows1)):
        df, got = delta_io.read(spark, path, v)
        assert got == v and _scan_file_indexes(df) == ["InMemoryFileIndex"]
        assert df.schema == delta[v].schema
        assert_df_equality(df, spark.createDataFrame(rows, schema), ignore_row_order=True, ignore_nullable=True)
    appended, v = delta_io.read(spark, path)                         # an append: Delta's reader
    assert v == 2 and ["Delta" in i or "Tahoe" in i for i in _scan_file_indexes(appended)] == [True]
    assert sorted(r["id"] for r in appended.collect()) == [3, 4]

    with session_conf(spark, {delta_io.READ_COMMIT_FILES_KEY: "false"}):
        through_delta, _ = delta_io.read(spark, path, 1)
    assert ["Delta" in i or "Tahoe" in i for i in _scan_file_indexes(through_delta)] == [True]

    # Deletion vectors need reader version 3: such a table is read through Delta whatever its commits.
    dv = str(tmp_path / "dv")
    delta_io.overwrite_counted(spark.createDataFrame(rows0, schema), dv,
                               properties={"delta.enableDeletionVectors": "true"})
    assert delta_io.table_metadata(spark, dv, 0)[1]["minReaderVersion"] == 3
    assert delta_io.commit_snapshot(spark, dv, 0) is None
    parts = str(tmp_path / "p")
    delta_io.overwrite(spark.createDataFrame(rows0, schema), parts, partition_by=("s",))
    assert delta_io.commit_snapshot(spark, parts, 0) is None
    assert delta_io.commit_snapshot(spark, path, 7) is None          # no such commit


def _scan_file_indexes(df) -> list[str]:
    """The class of each file scan's file index in ``df``'s physical plan."""
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves().iterator()
    found = []
    while leaves.hasNext():
        node = leaves.next()
        if node.nodeName().endswith("FileSourceScanExec") or node.nodeName().startswith("Scan"):
            found.append(node.relation().location().getClass().getSimpleName())
    return found


def test_a_scan_of_many_local_files_looks_them_up_without_a_spark_job(spark, tmp_path):
    """Past 32 named files Spark checks them in a Spark job of one task per file; on a local disk the scan does it
    on the driver (no job), and reads the same rows."""
    folder = str(tmp_path / "many")
    spark.range(0, 40, 1, 40).write.parquet(folder)   # one file per partition
    files = sorted(str(f) for f in (tmp_path / "many").glob("*.parquet"))
    assert len(files) == 40

    def jobs_of(group: str, read) -> tuple[list[int], object]:
        spark.sparkContext.setJobGroup(group, group)
        try:
            df = read()
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)), df

    plain_jobs, _ = jobs_of("plain-listing", lambda: spark.read.schema("id long").parquet(*files))
    ours_jobs, ours = jobs_of("driver-listing", lambda: delta_io.parquet_files(spark, files, "id long"))
    assert len(plain_jobs) == 1   # Spark's own lookup: one job (what the driver-side one saves)
    assert ours_jobs == []
    assert sorted(r.id for r in ours.collect()) == list(range(40))
    # the session's threshold is left as it was
    assert spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold", "32") == "32"


def test_a_file_commit_overwrites_as_deltas_own_writer_does(spark, tmp_path):
    """The gpu profile's overwrite (``WRITE_FILES_KEY``): Parquet files written, then committed to Delta. The table
    reads back as the frame, its commit is a WRITE / Overwrite with the rows, files and statistics Delta's own
    writer would give it, a new table takes the properties, a later overwrite replaces the schema and every file,
    and time travel still reads the old version."""
    path = str(tmp_path / "t")
    long_note = "n" * 40   # longer than the 32 characters strings get min/max for
    first = spark.createDataFrame(
        [("c2", 5, dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5), long_note),
         ("c1", -3, dt.date(2023, 12, 31), None, "short"),
         (None, 7, None, dt.datetime(2024, 5, 6, 7, 8, 9), None)],
        "customer_id string, n long, d date, ts timestamp, note string").coalesce(1)
    properties = {"delta.dataSkippingStatsColumns": "customer_id,n,d,ts,note"}
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "true"}):
        assert delta_io.overwrite_counted(first, path, properties=properties) == (0, 3)
        second = spark.createDataFrame([("c9", 1, 2.5), ("c8", 2, 0.5)], "customer_id string, n long, x double")
        second = second.select("customer_id", "n", *[F.lit(None).cast(t).alias(c) for c, t in
                                                      (("d", "date"), ("ts", "timestamp"), ("note", "string"))], "x")
        assert delta_io.overwrite_counted(second.repartition(2), path) == (1, 2)

    assert_df_equality(delta_io.read(spark, path, 0)[0], first, ignore_row_order=True, ignore_nullable=True)
    latest, v = delta_io.read(spark, path)
    assert v == 1
    assert_df_equality(latest, spark.createDataFrame(
        [("c9", 1, None, None, None, 2.5), ("c8", 2, None, None, None, 0.5)],
        "customer_id string, n long, d date, ts timestamp, note string, x double"),
        ignore_row_order=True, ignore_nullable=True)

    history = {r["version"]: r for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()}
    assert history[0]["operation"] == "WRITE" and history[0]["operationParameters"]["mode"] == "Overwrite"
    assert history[0]["operationMetrics"]["numOutputRows"] == "3"
    assert history[1]["operationMetrics"]["numOutputRows"] == "2"
    assert history[1]["operationMetrics"]["numFiles"] == "2"
    from delta.tables import DeltaTable
    assert DeltaTable.forPath(spark, path).detail().first()["properties"] == properties   # kept at v1

    (add,) = [a["add"] for a in delta_io.commit_actions(spark, path, 0) if "add" in a]
    stats = json.loads(add["stats"])
    assert stats == {"numRecords": 3,
                     "minValues": {"customer_id": "c1", "n": -3, "d": "2023-12-31"},
                     "maxValues": {"customer_id": "c2", "n": 7, "d": "2024-01-02"},
                     "nullCount": {"customer_id": 1, "n": 0, "d": 1, "ts": 1, "note": 1}}
    actions = delta_io.commit_actions(spark, path, 1)
    assert [a["remove"]["path"] for a in actions if "remove" in a] == [add["path"]]
    assert sorted(json.loads(a["add"]["stats"])["numRecords"] for a in actions if "add" in a) == [1, 1]
    # ingest's and features' read-back of a plain overwrite works on it too.
    assert_df_equality(delta_io.overwrite_files(spark, path, 1, latest.schema), latest, ignore_row_order=True)
    # An independent reader of the protocol (delta-rs) sees both versions as Delta's own does.
    import deltalake
    table = deltalake.DeltaTable(path)
    assert table.version() == 1 and sorted(table.to_pyarrow_table().column("customer_id").to_pylist()) == ["c8", "c9"]
    table.load_as_version(0)
    assert table.to_pyarrow_table().num_rows == 3
    # Delta's own writer takes over from a file commit (a profile switched): its overwrite removes the commit's files.
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "false"}):
        assert delta_io.overwrite(first, path) == 2
    assert [a["remove"]["path"].split("/")[0][:2] for a in delta_io.commit_actions(spark, path, 2) if "remove" in a] == ["w-", "w-"]
    assert_df_equality(delta_io.read(spark, path)[0], first, ignore_row_order=True, ignore_nullable=True)


def test_a_failed_file_commit_leaves_the_table_and_its_folder_as_they_were(spark, tmp_path):
    path = str(tmp_path / "t")
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "false"}):   # a table of Delta's writer: no folder but its log
        delta_io.overwrite(spark.createDataFrame([(1, "a")], "id long, s string"), path)
    failing = spark.range(3).select(F.col("id"), F.when(F.col("id") < 5, F.raise_error("no")).cast("string").alias("s"))
    empty = spark.createDataFrame([], "id long, s string")
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "true"}):
        with pytest.raises(Exception, match="no"):
            delta_io.overwrite_counted(failing, path)
        assert delta_io.version(spark, path) == 0
        assert sorted(p.name for p in (tmp_path / "t").iterdir() if p.is_dir()) == ["_delta_log"]
        assert delta_io.overwrite_counted(empty, path) == (1, 0)
    assert delta_io.read(spark, path)[0].count() == 0


def test_a_file_commit_takes_each_files_statistics_from_all_of_its_row_groups(spark, tmp_path):
    """The footer holds one set of statistics per row group: a file's are their union (rows summed, nulls summed,
    the least min and the greatest max)."""
    path = str(tmp_path / "t")
    ids = [f"a{i:04d}" for i in range(1000)]
    rows = [(ids[(i * 7) % 1000], None if i % 10 == 0 else i) for i in range(1000)]   # every id once, out of order
    small_groups = {"parquet.block.size": "2048", "parquet.page.size": "512", delta_io.WRITE_FILES_KEY: "true"}
    with session_conf(spark, small_groups):
        delta_io.overwrite_counted(spark.createDataFrame(rows, "id string, n long").coalesce(1), path)
    (add,) = [a["add"] for a in delta_io.commit_actions(spark, path, 0) if "add" in a]
    assert pq.ParquetFile(tmp_path / "t" / add["path"]).metadata.num_row_groups > 3
    assert json.loads(add["stats"]) == {"numRecords": 1000, "minValues": {"id": "a0000", "n": 1},
                                        "maxValues": {"id": "a0999", "n": 999}, "nullCount": {"id": 0, "n": 100}}


def test_a_file_commit_describes_the_columns_its_table_keeps_statistics_of(spark, tmp_path):
    """Without delta.dataSkippingStatsColumns, the first delta.dataSkippingNumIndexedCols columns: set when the table
    is created, read from the table's properties afterwards."""
    path = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "x", 2.5)], "a long, b string, c double").coalesce(1)
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "true"}):
        delta_io.overwrite_counted(df, path, properties={"delta.dataSkippingNumIndexedCols": "2"})
        delta_io.overwrite_counted(df, path)
    for version in (0, 1):
        (add,) = [a["add"] for a in delta_io.commit_actions(spark, path, version) if "add" in a]
        assert json.loads(add["stats"]) == {"numRecords": 1, "minValues": {"a": 1, "b": "x"},
                                            "maxValues": {"a": 1, "b": "x"}, "nullCount": {"a": 0, "b": 0}}


def test_a_file_commit_replaces_a_slice_as_deltas_replace_where_does(spark, tmp_path):
    """The gpu profile's replace of one slice (``column = 'value'``) of an unpartitioned table: the slice's files
    (by their statistics, each holds one stage) removed, the new files added, in one WRITE / Overwrite commit with
    the predicate; the other slice untouched, the same slice again idempotent, a row outside the slice refused
    with nothing committed or left behind."""
    path = str(tmp_path / "q")
    schema = "stage string, reason string, n long"
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "false"}):   # the slices first written by Delta's writer
        delta_io.overwrite(spark.createDataFrame([("ingest", "wrong_field_count", 1), ("ingest", "unclosed_quote", 2)],
                                                 schema).coalesce(1), path)
        delta_io.replace_where(spark.createDataFrame([("clean", "bad_date", 3)], schema).coalesce(1), path,
                               "stage = 'clean'")
    old_clean = [a["add"]["path"] for a in delta_io.commit_actions(spark, path, 1) if "add" in a]
    new_clean = spark.createDataFrame([("clean", "bad_number", 4), ("clean", "bad_date", 5), ("clean", "x", 6)],
                                      schema).repartition(2)
    outside = spark.createDataFrame([("clean", "bad_date", 7), ("ingest", "bad_date", 8)], schema)
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "true"}):
        assert delta_io.replace_where_counted(new_clean, path, "stage = 'clean'") == (2, 3)
        with pytest.raises(Exception, match="does not match replaceWhere"):
            delta_io.replace_where_counted(outside, path, "stage = 'clean'")
        assert delta_io.version(spark, path) == 2
        assert len([p for p in (tmp_path / "q").iterdir() if p.name.startswith("w-")]) == 1
        assert delta_io.replace_where_counted(new_clean, path, "stage = 'clean'") == (3, 3)

    expected = spark.createDataFrame([("ingest", "wrong_field_count", 1), ("ingest", "unclosed_quote", 2),
                                      ("clean", "bad_number", 4), ("clean", "bad_date", 5), ("clean", "x", 6)], schema)
    assert_df_equality(delta_io.read(spark, path)[0], expected, ignore_row_order=True, ignore_nullable=True)
    actions = delta_io.commit_actions(spark, path, 2)
    assert sorted(a["remove"]["path"] for a in actions if "remove" in a) == sorted(old_clean)
    assert {a["add"]["path"].split("/")[0][:2] for a in actions if "add" in a} == {"w-"}
    history = {r["version"]: r for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()}
    assert history[2]["operation"] == "WRITE" and history[2]["operationParameters"] == {
        "mode": "Overwrite", "partitionBy": "[]", "predicate": "stage = 'clean'"}
    assert history[1]["operationParameters"] == history[2]["operationParameters"]   # Delta's own replaceWhere
    assert history[2]["operationMetrics"]["numOutputRows"] == "3"
    import deltalake
    assert sorted(deltalake.DeltaTable(path).to_pyarrow_table().column("n").to_pylist()) == [1, 2, 4, 5, 6]


def test_a_slice_some_file_shares_with_another_is_replaced_through_delta(spark, tmp_path):
    """Where a file's statistics do not say it holds one stage (here a file of both), only Delta's own replaceWhere
    can split it: the profile's file commit steps aside and the result is the same."""
    path = str(tmp_path / "q")
    schema = "stage string, n long"
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "false"}):   # one file of both stages, by Delta's writer
        delta_io.overwrite(spark.createDataFrame([("ingest", 1), ("clean", 2)], schema).coalesce(1), path)
    with session_conf(spark, {delta_io.WRITE_FILES_KEY: "true"}):
        # Delta rewrites the shared file's other row beside the new one: two rows written.
        assert delta_io.replace_where_counted(spark.createDataFrame([("clean", 9)], schema), path,
                                              "stage = 'clean'") == (1, 2)
    assert not [p for p in (tmp_path / "q").iterdir() if p.name.startswith("w-")]
    assert_df_equality(delta_io.read(spark, path)[0], spark.createDataFrame([("ingest", 1), ("clean", 9)], schema),
                       ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("part_size, replayed", [(None, True), (1, False)], ids=["one-file", "multi-part"])
def test_a_file_commit_on_a_checkpointed_table_replays_a_one_file_checkpoint_on_the_driver(spark, tmp_path, part_size,
                                                                                           replayed):
    """A file commit replays the log on the driver from a classic one-file checkpoint too (its adds, then the commits
    after it): no Spark job of the commit's own. A checkpoint of several parts is left to Delta's snapshot, whose
    jobs the commit then runs. Both ways the slice's files, and only they, are replaced."""
    path = str(tmp_path / "q")
    schema = "stage string, n long"
    delta_io.overwrite(spark.createDataFrame([("ingest", 1)], schema).coalesce(1), path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    parts = {} if part_size is None else {"spark.databricks.delta.checkpoint.partSize": str(part_size)}
    with session_conf(spark, parts):
        for n in (2, 3):
            spark.createDataFrame([("clean", n)], schema).coalesce(1).write.format("delta").mode("append").save(path)
    log = tmp_path / "q" / "_delta_log"
    assert (log / "00000000000000000002.checkpoint.parquet").exists() == replayed
    assert bool(list(log.glob("00000000000000000002.checkpoint.0000000001.*.parquet"))) != replayed
    group = f"checkpointed-commit-{part_size}"
    spark.sparkContext.setJobGroup(group, group)
    try:
        with session_conf(spark, {delta_io.WRITE_FILES_KEY: "true"}):
            assert delta_io.replace_where_counted(spark.createDataFrame([("clean", 9)], schema).coalesce(1), path,
                                                  "stage = 'clean'") == (4, 1)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(group)
              for s in tracker.getJobInfo(j).stageIds]
    from_commit = [s.name for s in stages if s is not None and "FileCommit.java" in s.name]
    assert (from_commit == []) == replayed, from_commit
    removed = sorted(a["remove"]["path"] for a in delta_io.commit_actions(spark, path, 4) if "remove" in a)
    clean_files = sorted(a["add"]["path"] for v in (2, 3) for a in delta_io.commit_actions(spark, path, v)
                         if "add" in a)
    assert removed == clean_files
    assert_df_equality(delta_io.read(spark, path)[0], spark.createDataFrame([("ingest", 1), ("clean", 9)], schema),
                       ignore_row_order=True, ignore_nullable=True)


def test_scans_side_by_side_look_their_files_up_without_a_spark_job(spark, tmp_path):
    """The threshold that keeps the lookup on the driver is a session-wide setting, and stages read tables side by
    side (``together``: ingest's quarantine and accounting both read bronze back). Each scan still looks its files up
    without a job, whichever restores the setting first, and the session's threshold is left as it was."""
    from jobs.lake.session import together

    folders = {}
    for name in ("a", "b"):
        spark.range(0, 40, 1, 40).write.parquet(str(tmp_path / name))
        folders[name] = sorted(str(f) for f in (tmp_path / name).glob("*.parquet"))
    group = "side-by-side-listing"
    spark.sparkContext.setJobGroup(group, group)
    try:
        for _ in range(12):
            together({name: (lambda files=files: delta_io.parquet_files(spark, files, "id long"))
                      for name, files in folders.items()})
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    assert spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold", "32") == "32"
