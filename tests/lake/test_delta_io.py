"""Delta through the test session: writes, reads, time travel and schema enforcement, idempotent appends and
replaces, relative paths, and a snapshot scanned as exactly its Parquet files."""
from __future__ import annotations

import os

import pytest
from chispa import assert_df_equality
from pyspark.sql import Row
from pyspark.sql.utils import AnalysisException

from jobs.lake import delta_io


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


def test_append_once_skips_a_repeated_transaction(spark, tmp_path):
    path = str(tmp_path / "runs")
    row = spark.createDataFrame([Row(run_id="r1", auc=0.8)])
    delta_io.append_once(row, path, app_id="train", txn_version=7)
    delta_io.append_once(row, path, app_id="train", txn_version=7)
    assert spark.read.format("delta").load(path).count() == 1


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
    spark.conf.set(delta_io.FILES_AS_PARQUET_KEY, "true")
    try:
        latest, v = delta_io.read(spark, path)
        old, _ = delta_io.read(spark, path, 0)
        partitioned, _ = delta_io.read(spark, parts)
    finally:
        spark.conf.unset(delta_io.FILES_AS_PARQUET_KEY)
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
