"""Ingest: CSV files -> bronze Delta tables (every field a string) + the 'ingest' slice of the quarantine.

    scripts/submit --profile cpu ingest --input data/raw --lake data/lake

Reads ``<input>/customers/*.csv[.gz]`` and ``<input>/events/*.csv[.gz]`` with the contract's all-string
schemas (never inferred). A record whose field count differs from the header goes to quarantine with reason
``wrong_field_count`` and its raw text as read; nothing is dropped silently (see docs/etl.md):

- PERMISSIVE mode pads short records and truncates long ones without a word, unless the schema holds a
  corrupt-record column: then Spark puts the record's raw text there for both. We add that column and split
  on it.
- Each row carries its file name and its 0-based record number within the file (header excluded). CSV with
  multiLine is unsplittable, so one file is read by one task in order and ``monotonically_increasing_id``
  is contiguous within a file; minus the file's smallest id it is the record index.

The parsed rows are persisted once and fed to both writes, so the CSV is parsed once.
"""
from __future__ import annotations

import argparse
import time

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from jobs import delta_io
from jobs.contract import DATASETS, QUARANTINE_COLUMNS, string_schema
from jobs.errors import UserError
from jobs.session import get_spark

STAGE = "ingest"
CORRUPT = "_corrupt_record"
ROW_ID = "_row_id"
LINEAGE = ("source_file", "record_number")


def run(spark: SparkSession, input: str, lake: str) -> delta_io.StageRecord:
    started = time.time()
    files = {ds: find_csv_files(spark, input, ds) for ds in DATASETS}
    for ds, paths in files.items():
        check_headers(spark, paths, DATASETS[ds])

    record = delta_io.StageRecord(STAGE)
    quarantine_parts = []
    parsed_all = []
    for ds, columns in DATASETS.items():
        parsed = extract(spark, files[ds], columns).persist(StorageLevel.MEMORY_AND_DISK)
        parsed_all.append(parsed)
        numbered = parsed.transform(with_record_number)
        bronze_path = delta_io.table_path(lake, f"bronze_{ds}")
        record.wrote[f"bronze_{ds}"] = delta_io.overwrite(numbered.transform(bronze_rows(columns)), bronze_path)
        quarantine_parts.append(numbered.transform(wrong_field_count_rows(ds)))

    q_path = delta_io.table_path(lake, "quarantine")
    quarantine = quarantine_parts[0].unionByName(quarantine_parts[1])
    # Few rows: a shuffle that adaptive execution coalesces gives a few right-sized files, not one per input split.
    quarantine = quarantine.repartition("dataset", "source_file")
    record.wrote["quarantine"] = delta_io.replace_where(quarantine, q_path, f"stage = '{STAGE}'")
    for parsed in parsed_all:
        parsed.unpersist()

    record.counts = accounting(spark, lake, record.wrote, files)
    record.extra["input"] = input
    record.seconds = round(time.time() - started, 3)
    return record


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ingest", description="CSV -> bronze Delta tables + quarantine")
    p.add_argument("--input", required=True, help="folder holding customers/ and events/ CSV files")
    p.add_argument("--lake", required=True, help="root folder of the Delta tables")
    args = p.parse_args(argv)
    record = run(get_spark("ingest"), args.input, args.lake)
    print(f"ingest: wrote {record.wrote}; totals {record.counts['totals']}; record {record.save(args.lake)}")
    return 0


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
                f"write the file with that header line (jobs/contract.py), or move it out of the input folder"
            )


def extract(spark: SparkSession, paths: list[str], columns: tuple[str, ...]) -> DataFrame:
    """All fields as strings, plus the raw record text of malformed records, the file name and a row id."""
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
        .select("*", F.col("_metadata.file_name").alias("source_file"),
                F.monotonically_increasing_id().alias(ROW_ID))
    )


# ---------------------------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------------------------
def with_record_number(df: DataFrame) -> DataFrame:
    """0-based record index within the file: the row id minus the file's smallest row id.

    Correct because a multiLine CSV file is never split: its records are read in order by one task, and a task
    numbers its rows consecutively (several small files may share a task, one after another).
    """
    first_ids = df.groupBy("source_file").agg(F.min(ROW_ID).alias("_first_id"))
    return (df.join(F.broadcast(first_ids), "source_file")
            .withColumn("record_number", F.col(ROW_ID) - F.col("_first_id"))
            .drop("_first_id", ROW_ID))


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
            F.lit(STAGE).alias("stage"),
            "source_file",
            "record_number",
            F.col(CORRUPT).alias("raw"),
            F.lit("wrong_field_count").alias("reason"),
            F.lit(f"expected {expected} fields").alias("detail"),
        ).select(*QUARANTINE_COLUMNS)
    return transform


# ---------------------------------------------------------------------------------------------------------
# Accounting: one aggregation over the tables just written.
# ---------------------------------------------------------------------------------------------------------
def accounting(spark: SparkSession, lake: str, versions: dict[str, int], paths: dict[str, list[str]]) -> dict:
    """Per dataset and file: records (= last record number + 1), rows in bronze, rows quarantined.
    A file with a header and no records is listed with zeros."""
    parts = []
    for ds in DATASETS:
        bronze, _ = delta_io.read(spark, delta_io.table_path(lake, f"bronze_{ds}"), versions[f"bronze_{ds}"])
        parts.append(bronze.select(F.lit(ds).alias("dataset"), *LINEAGE, F.lit(0).alias("q")))
    q, _ = delta_io.read(spark, delta_io.table_path(lake, "quarantine"), versions["quarantine"])
    parts.append(q.where(F.col("stage") == STAGE).select("dataset", *LINEAGE, F.lit(1).alias("q")))
    rows = (parts[0].unionByName(parts[1]).unionByName(parts[2])
            .groupBy("dataset", "source_file")
            .agg(F.count(F.lit(1)).alias("rows"), F.sum("q").alias("quarantined"),
                 F.max("record_number").alias("last"))
            .collect())  # one small row per input file
    files: dict = {ds: {p.rsplit("/", 1)[-1]: {"records": 0, "bronze": 0, "quarantined": 0} for p in paths[ds]}
                   for ds in DATASETS}
    for r in rows:
        if r["last"] + 1 != r["rows"]:
            raise RuntimeError(f"{r['source_file']}: record numbers are not contiguous "
                               f"({r['rows']} rows, last record {r['last']}): a bug in ingest")
        files[r["dataset"]][r["source_file"]] = {
            "records": r["rows"], "bronze": r["rows"] - r["quarantined"], "quarantined": r["quarantined"]}
    totals = {ds: {k: sum(f[k] for f in files[ds].values()) for k in ("records", "bronze", "quarantined")}
              for ds in DATASETS}
    # Flat figures first (rows in bronze per dataset, quarantined in all) for progress lines and the report.
    return {**{ds: totals[ds]["bronze"] for ds in DATASETS},
            "quarantined": sum(t["quarantined"] for t in totals.values()),
            "files": {ds: dict(sorted(files[ds].items())) for ds in DATASETS}, "totals": totals}
