"""Ingest: CSV files -> bronze Delta tables (every field a string) + the 'ingest' slice of the quarantine.

    scripts/submit ingest --input data/raw --lake data/lake

Reads ``<input>/customers/*.csv[.gz]`` and ``<input>/events/*.csv[.gz]`` with the contract's all-string
schemas (never inferred). A record whose field count differs from the header goes to quarantine with reason
``wrong_field_count`` and its raw text as read; nothing is dropped silently (see docs/etl.md):

- PERMISSIVE mode pads short records and truncates long ones without a word, unless the schema holds a
  corrupt-record column: then Spark puts the record's raw text there for both. We add that column and split
  on it.
- Each row carries its file name and its 0-based record number within the file (header excluded). A CSV file
  read with multiLine is never split, and ingest makes every file its own task (``one_task_per_file``), so a
  task's rows are one file's records in order: the low 33 bits of ``monotonically_increasing_id`` (the row's
  index within its task) are the record number. No join, no second pass for it.

The CSV is parsed twice and never cached: once for bronze, once for the (few) malformed records, which is
cheaper than persisting every parsed row. The per-file accounting checks that both parses agree, and the input
files' sizes and modification times are compared before and after. It reads bronze's side from the bronze
commit's per-file statistics (row count, min/max of the lineage columns) rather than re-reading bronze, and
falls back to a scan of bronze's lineage columns whenever those statistics cannot be exact.
"""
from __future__ import annotations

from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from jobs.core.errors import UserError
from jobs.core.params import DATA_IN, LAKE
from jobs.core.stage import Stage, StageRecord
from jobs.lake import delta_io
from jobs.lake.contract import DATASETS, QUARANTINE_COLUMNS, string_schema
from jobs.lake.session import conf_flag, session_conf, together

CORRUPT = "_corrupt_record"
# monotonically_increasing_id() = task index << 33 | row index within the task.
ROW_INDEX_BITS = (1 << 33) - 1
LINEAGE = ("source_file", "record_number")
# Delta keeps min/max/null counts of the first 32 columns of every file it writes. On bronze's raw strings that
# is about a third of the write and serves no reader (clean reads bronze whole); bronze keeps them for its
# lineage columns only, what a lookup of one record filters on. A table property, set when the table is created.
BRONZE_TABLE_DEFAULTS = {"spark.databricks.delta.properties.defaults.dataSkippingStatsColumns": ",".join(LINEAGE)}


def run(spark: SparkSession, data: str, lake: str) -> StageRecord:
    files = {ds: find_csv_files(spark, data, ds) for ds in DATASETS}
    for ds, paths in files.items():
        check_headers(spark, paths, DATASETS[ds])
    before = file_states(spark, files)

    record = StageRecord(STAGE.name)
    with one_task_per_file(spark), session_conf(spark, plugin_conf(spark)):
        # The two bronze writes run side by side: a dataset of few files (the customers: one task per file) would
        # otherwise leave most cores idle for its whole write.
        bronze = {f"bronze_{ds}": extract(spark, files[ds], columns).transform(bronze_rows(columns))
                  for ds, columns in DATASETS.items()}
        with session_conf(spark, BRONZE_TABLE_DEFAULTS):
            record.wrote.update(together({
                name: partial(delta_io.overwrite, df, delta_io.table_path(lake, name)) for name, df in bronze.items()}))
        parts = [extract(spark, files[ds], columns).transform(wrong_field_count_rows(ds))
                 for ds, columns in DATASETS.items()]
        # Few rows: a shuffle that adaptive execution coalesces gives a few right-sized files, not one per input file.
        quarantine = parts[0].unionByName(parts[1]).repartition("dataset", "source_file")
        record.wrote["quarantine"] = delta_io.replace_where(
            quarantine, delta_io.table_path(lake, "quarantine"), f"stage = '{STAGE.name}'")
    if file_states(spark, files) != before:
        raise UserError(f"input files under {data} changed while ingest read them, so bronze and quarantine may "
                        f"come from different contents: run ingest again once nothing writes to that folder")

    record.counts = accounting(spark, lake, record.wrote, files)
    record.extra["input"] = data
    return record


def _describe(record: StageRecord) -> str:
    return "; ".join(f"{ds}: records {t['records']:,} bronze {t['bronze']:,} quarantined {t['quarantined']:,}"
                     for ds, t in record.counts["totals"].items())


STAGE = Stage("ingest", "CSV files -> bronze Delta tables + the quarantine's ingest slice", run,
              params=(DATA_IN, LAKE), writes=("bronze_customers", "bronze_events", "quarantine"),
              describe=_describe)


# ---------------------------------------------------------------------------------------------------------
# Extract: find files, check them, parse them (all before anything is written).
# ---------------------------------------------------------------------------------------------------------
def _hadoop_fs(spark: SparkSession, path: str):
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return jvm, hpath, hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def find_csv_files(spark: SparkSession, input: str, dataset: str) -> list[str]:
    """The dataset's ``*.csv`` / ``*.csv.gz`` files (Hadoop file system, so local, HDFS and object stores work)."""
    jvm, root, fs = _hadoop_fs(spark, input)
    if not fs.exists(root):
        raise UserError(f"input folder {input} does not exist: pass --input the folder the generate stage "
                        f"wrote (it holds customers/ and events/)")
    folder = jvm.org.apache.hadoop.fs.Path(root, dataset)
    statuses = fs.listStatus(folder) if fs.exists(folder) else []
    paths = sorted(s.getPath().toString() for s in statuses
                   if s.isFile() and s.getPath().getName().endswith((".csv", ".csv.gz")))
    if not paths:
        raise UserError(f"no {dataset} CSV files (*.csv or *.csv.gz) in {input}/{dataset}: pass --input the "
                        f"folder the generate stage wrote, or put the {dataset} files there")
    return paths


def first_line(spark: SparkSession, path: str) -> str | None:
    jvm, hpath, fs = _hadoop_fs(spark, path)
    stream = fs.open(hpath)
    try:
        codec = jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(
            spark.sparkContext._jsc.hadoopConfiguration()).getCodec(hpath)
        if codec is not None:
            stream = codec.createInputStream(stream)
        return jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8")).readLine()
    finally:
        stream.close()


def check_headers(spark: SparkSession, paths: list[str], columns: tuple[str, ...]) -> None:
    """Every file must start with the contract's header: the schema is applied by position, so a file with
    other or reordered columns would load silently into the wrong columns."""
    for path in paths:
        line = first_line(spark, path)
        got = tuple(f.strip().strip('"') for f in (line or "").lstrip("\ufeff").rstrip("\r").split(","))
        if got != columns:
            raise UserError(
                f"{path}: header {line!r} does not match the contract columns {','.join(columns)}: "
                f"write the file with that header line (jobs/lake/contract.py), or move it out of the input folder"
            )


def file_states(spark: SparkSession, files: dict[str, list[str]]) -> dict[str, tuple[int, int]]:
    """Size and modification time of each input file (one listing per dataset folder)."""
    states = {}
    for paths in files.values():
        jvm, folder, fs = _hadoop_fs(spark, paths[0].rsplit("/", 1)[0])
        wanted = set(paths)
        for s in fs.listStatus(folder):
            if s.getPath().toString() in wanted:
                states[s.getPath().toString()] = (s.getLen(), s.getModificationTime())
    return states


# Profile switch: "false" runs ingest's queries with the RAPIDS SQL plugin off (conf/gpu.conf). Its CSV scan stays
# on the CPU (corrupt-record column, file names) and so does the Delta write of bronze (RAPIDS 25.04 has no
# Delta 3.3 writer for Spark 3.5), so the GPU only adds a row -> column -> row trip between them: on an H200
# ingest took 39.8 s with the plugin on and 29.7 s with it off (docs/gpu.md).
RAPIDS_SQL_KEY = "spark.churn.ingest.rapidsSql"


def plugin_conf(spark: SparkSession) -> dict[str, str]:
    """The RAPIDS settings ingest's queries run with: the plugin's SQL off when the profile says so."""
    if not conf_flag(spark, RAPIDS_SQL_KEY, True):
        return {"spark.rapids.sql.enabled": "false"}
    return {}


def one_task_per_file(spark: SparkSession):
    """Within the block, every input file is read by a task of its own: Spark packs small files into one task
    until ``spark.sql.files.maxPartitionBytes`` is reached, counting ``openCostInBytes`` per file; a cost above
    any partition size closes the task after each file. (A multiLine CSV file is never split, whatever its
    size, so one task reads it whole.) The accounting fails loudly if a task ever held more than one file."""
    return session_conf(spark, {"spark.sql.files.openCostInBytes": str(1 << 50)})


def extract(spark: SparkSession, paths: list[str], columns: tuple[str, ...]) -> DataFrame:
    """All fields as strings, plus the raw record text of malformed records, the file name and the record
    number (read inside ``one_task_per_file``)."""
    schema = StructType(list(string_schema(columns).fields) + [StructField(CORRUPT, StringType(), True)])
    return (
        spark.read.schema(schema)
        .option("header", True)
        .option("multiLine", True)          # quoted fields may hold newlines
        .option("quote", '"').option("escape", '"')
        .option("encoding", "UTF-8")        # bad bytes decode to U+FFFD; clean quarantines them
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .csv(paths)
        .transform(with_record_number)
    )


# ---------------------------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------------------------
def with_record_number(df: DataFrame) -> DataFrame:
    """``source_file`` and ``record_number``, the 0-based index of the record within its file: the row's index
    within its task, i.e. the low 33 bits of ``monotonically_increasing_id``.

    Right when a task reads one whole file, in order: a multiLine CSV file is never split, and
    ``one_task_per_file`` keeps files from sharing a task. Must sit right on the scan (nothing that drops or
    reorders rows before it).

    The name is ``_metadata.file_name``, not ``input_file_name()``: that one is cheaper on the CPU, but over a
    CPU scan (ingest's CSV scan is one under the gpu profile) it keeps the filter and projection above the scan
    off the GPU as well ("GPU plans may get incorrect file name ... from a CPU scan").
    """
    return df.select("*", F.col("_metadata.file_name").alias("source_file"),
                     F.monotonically_increasing_id().bitwiseAND(F.lit(ROW_INDEX_BITS)).alias("record_number"))


def bronze_rows(columns: tuple[str, ...]):
    def transform(df: DataFrame) -> DataFrame:
        return df.where(F.col(CORRUPT).isNull()).select(*columns, *LINEAGE)
    return transform


def wrong_field_count_rows(dataset: str):
    """Malformed records in quarantine shape, raw text exactly as Spark read it."""
    expected = len(DATASETS[dataset])

    def transform(df: DataFrame) -> DataFrame:
        return df.where(F.col(CORRUPT).isNotNull()).select(
            F.lit(dataset).alias("dataset"),
            F.lit(STAGE.name).alias("stage"),
            "source_file",
            "record_number",
            F.col(CORRUPT).alias("raw"),
            F.lit("wrong_field_count").alias("reason"),
            F.lit(f"expected {expected} fields").alias("detail"),
        ).select(*QUARANTINE_COLUMNS)
    return transform


# ---------------------------------------------------------------------------------------------------------
# Accounting: per input file, from the tables just written (bronze from its commit's statistics).
# ---------------------------------------------------------------------------------------------------------
# A Delta commit file holds one JSON action per line (Delta's PROTOCOL.md); only what the accounting reads.
COMMIT_SCHEMA = ("commitInfo struct<operation: string, operationParameters: map<string, string>>, "
                 "add struct<path: string, stats: string>")
FILE_STATS_SCHEMA = ("numRecords long, minValues struct<source_file: string, record_number: long>, "
                     "maxValues struct<source_file: string, record_number: long>")


def accounting(spark: SparkSession, lake: str, versions: dict[str, int], paths: dict[str, list[str]]) -> dict:
    """Per dataset and file: records (= last record number + 1), rows in bronze, rows quarantined.
    A file with a header and no records is listed with zeros.

    Bronze's per-file figures come from the statistics Delta wrote with each of its data files (row count and
    min/max of ``source_file`` / ``record_number``, ``bronze_counts_from_commit``); where those cannot be exact,
    from a scan of bronze's lineage columns. The quarantine's from its ingest slice (few rows)."""
    names = {ds: {file_name(spark, p) for p in paths[ds]} for ds in DATASETS}
    bronze = {ds: bronze_counts_from_commit(spark, delta_io.table_path(lake, f"bronze_{ds}"),
                                            versions[f"bronze_{ds}"], names[ds]) for ds in DATASETS}
    q, _ = delta_io.read(spark, delta_io.table_path(lake, "quarantine"), versions["quarantine"])
    parts = [q.where(F.col("stage") == STAGE.name).select(F.lit(True).alias("quarantined"), "dataset", *LINEAGE)]
    for ds in DATASETS:
        if bronze[ds] is None:
            b, _ = delta_io.read(spark, delta_io.table_path(lake, f"bronze_{ds}"), versions[f"bronze_{ds}"])
            parts.append(b.select(F.lit(False).alias("quarantined"), F.lit(ds).alias("dataset"), *LINEAGE))
            bronze[ds] = {}
    found: dict = {(ds, name): {"bronze": counts} for ds in DATASETS for name, counts in bronze[ds].items()}
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    for r in (union.groupBy("quarantined", "dataset", "source_file")
              .agg(F.count(F.lit(1)).alias("rows"), F.min("record_number").alias("first"),
                   F.max("record_number").alias("last"))
              .collect()):  # small: at most two aggregated rows per input file
        found.setdefault((r["dataset"], r["source_file"]), {})[
            "quarantined" if r["quarantined"] else "bronze"] = (r["rows"], r["first"], r["last"])

    files: dict = {ds: {name: {"records": 0, "bronze": 0, "quarantined": 0} for name in names[ds]}
                   for ds in DATASETS}
    for (ds, name), got in found.items():
        b_rows, b_first, b_last = got.get("bronze", (0, None, None))
        q_rows, q_first, q_last = got.get("quarantined", (0, None, None))
        rows = b_rows + q_rows
        first = min(x for x in (b_first, q_first) if x is not None)
        last = max(x for x in (b_last, q_last) if x is not None)
        # Every record in exactly one of bronze / quarantine, numbered 0..n-1: anything else (a task that read
        # two files, a record in both tables or in neither, a row naming no input file) fails the stage here.
        if name not in names[ds] or first != 0 or last + 1 != rows:
            raise RuntimeError(f"{ds} {name}: bronze + quarantine hold {rows} rows numbered {first}..{last}"
                               f"{'' if name in names[ds] else ' of a file not in the input'}, not each record "
                               f"once: ingest's accounting does not add up (a task read more than one file, or "
                               f"a bug in ingest)")
        files[ds][name] = {"records": rows, "bronze": b_rows, "quarantined": q_rows}
    totals = {ds: {k: sum(f[k] for f in files[ds].values()) for k in ("records", "bronze", "quarantined")}
              for ds in DATASETS}
    # Flat figures first (rows in bronze per dataset, quarantined in all) for progress lines and the report.
    return {**{ds: totals[ds]["bronze"] for ds in DATASETS},
            "quarantined": sum(t["quarantined"] for t in totals.values()),
            "files": {ds: dict(sorted(files[ds].items())) for ds in DATASETS}, "totals": totals}


def file_name(spark: SparkSession, path: str) -> str:
    """The name Spark gives ``source_file`` for the file at ``path``: its last segment, URL-encoded as in the
    path's URI (as ``_metadata.file_name`` reports it in Spark 3.5); the plain name for ordinary names."""
    return str(spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path).toUri().toString()).rsplit("/", 1)[-1]


def bronze_counts_from_commit(spark: SparkSession, table: str, version: int,
                              names: set[str]) -> dict[str, tuple[int, int, int]] | None:
    """Per input file name: (rows, first record number, last record number) in bronze at ``version``, read
    from the statistics in that version's commit file instead of from bronze itself; None where they cannot
    be exact, and the caller scans bronze.

    Exact when: the commit is an overwrite (its ``add`` actions are then the whole table at that version),
    and every data file it adds has a row count and lineage statistics whose min and max ``source_file`` are
    one and the same input file name (not a prefix: Delta cuts string statistics at 32 characters). Ingest
    writes bronze one task per input file, so that is each data file; compaction, a user-set
    ``maxRecordsPerFile`` or a table whose statistics skip the lineage columns keep it correct (scan or not)."""
    commit = f"{table.rstrip('/')}/_delta_log/{version:020d}.json"
    jvm, hpath, fs = _hadoop_fs(spark, commit)
    if not fs.exists(hpath):
        return None
    stats = F.from_json("add.stats", FILE_STATS_SCHEMA)
    rows = (spark.read.schema(COMMIT_SCHEMA).json(commit)
            .where(F.col("commitInfo").isNotNull() | F.col("add.path").isNotNull())
            .select(((F.col("commitInfo.operation") == "WRITE")
                     & (F.col("commitInfo.operationParameters")["mode"] == "Overwrite")).alias("overwrite"),
                    F.col("add.path").alias("data_file"), stats.alias("s"))
            .select("overwrite", "data_file", F.col("s.numRecords").alias("rows"),
                    F.col("s.minValues.source_file").alias("first_file"),
                    F.col("s.maxValues.source_file").alias("last_file"),
                    F.col("s.minValues.record_number").alias("first"), F.col("s.maxValues.record_number").alias("last"))
            .collect())  # small: the commit's own line and one per data file (one per input file); no shuffle
    if sum(1 for r in rows if r["overwrite"]) != 1:
        return None
    counts: dict[str, tuple[int, int, int]] = {}
    for r in rows:
        if r["data_file"] is None:
            continue
        if (r["first_file"] is None or r["first_file"] != r["last_file"] or r["first_file"] not in names
                or r["rows"] is None or r["first"] is None or r["last"] is None):
            return None
        rows_, first, last = counts.get(r["first_file"], (0, r["first"], r["last"]))
        counts[r["first_file"]] = (rows_ + r["rows"], min(first, r["first"]), max(last, r["last"]))
    return counts
