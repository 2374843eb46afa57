"""Ingest: CSV files -> bronze Delta tables (every field a string, every record) + the 'ingest' slice of the
quarantine.

    scripts/submit ingest --input data/raw --lake data/lake

Reads ``<input>/customers/*.csv[.gz]`` and ``<input>/events/*.csv[.gz]`` with the contract's all-string
schemas (never inferred). A record whose field count differs from the header goes to quarantine with reason
``wrong_field_count`` and its raw text as read; nothing is dropped silently (see docs/etl.md):

- PERMISSIVE mode pads short records and truncates long ones without a word, unless the schema holds a
  corrupt-record column: then Spark puts the record's raw text there for both. We add that column and flag
  the record on it.
- Each row carries its file name and its 0-based record number within the file (header excluded). A CSV file
  read with multiLine is never split, and ingest makes every file its own task (``one_task_per_file``), so a
  task's rows are one file's records in order: the low 33 bits of ``monotonically_increasing_id`` (the row's
  index within its task) are the record number. No join, no second pass for it.

The CSV is parsed once: bronze holds every record, with ``malformed`` (why ingest rejects it: null for most)
beside its fields, and the quarantine's ingest slice is read back from bronze's flagged rows. Clean reads only
the others (``clean.well_formed``). The per-file accounting checks that bronze holds each record once, and the
input files' sizes and modification times are compared before and after. It reads bronze's side from the bronze
commit's per-file statistics (row count, min/max of the lineage columns) rather than re-reading bronze, and
falls back to a scan of bronze's lineage columns whenever those statistics cannot be exact.
"""
from __future__ import annotations

from functools import partial, reduce

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from jobs.core.errors import UserError
from jobs.core.params import DATA_IN, LAKE
from jobs.core.stage import Stage, StageRecord
from jobs.lake import delta_io
from jobs.lake.contract import DATASETS, MALFORMED, QUARANTINE_COLUMNS, string_schema
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
    try:
        wrote, physical = write_tables(spark, files, lake)
    except Py4JJavaError as e:
        raise unreadable(spark, files, e) from None
    record.wrote.update(wrote)
    if file_states(spark, files) != before:
        raise UserError(f"input files under {data} changed while ingest read them, so bronze and quarantine may "
                        f"come from different contents: run ingest again once nothing writes to that folder")

    record.counts = accounting(spark, lake, record.wrote, files)
    record.counts["input"] = reconciled(record.counts["files"], line_breaks_by_file(spark, lake, record.wrote),
                                        physical, {ds: {file_name(spark, p): before[p][0] for p in ps}
                                                   for ds, ps in files.items()})
    record.extra["input"] = data
    return record


def write_tables(spark: SparkSession, files: dict[str, list[str]],
                 lake: str) -> tuple[dict[str, int], dict[tuple[str, str], tuple[int, int]]]:
    """Bronze (every record, the malformed ones flagged) and the quarantine's ingest slice (bronze's malformed
    records); returns the versions written, and each file's physical and blank lines (``physical_lines``, read
    beside the bronze writes)."""
    with one_task_per_file(spark), session_conf(spark, plugin_conf(spark)):
        # The two bronze writes run side by side: a dataset of few files (the customers: one task per file) would
        # otherwise leave most cores idle for its whole write.
        bronze = {f"bronze_{ds}": extract(spark, files[ds], columns).transform(bronze_rows(columns))
                  for ds, columns in DATASETS.items()}
        with session_conf(spark, BRONZE_TABLE_DEFAULTS):
            done = together({**{name: partial(delta_io.overwrite, df, delta_io.table_path(lake, name))
                                for name, df in bronze.items()},
                             "physical": partial(physical_lines, spark, files)})
        wrote = {name: done[name] for name in bronze}
        # Read back from bronze, not parsed again: a scan of the flag (almost all null; Parquet's own null counts
        # let whole row groups be skipped), and of the other columns only where it is set.
        parts = [delta_io.read_table(spark, lake, f"bronze_{ds}", wrote[f"bronze_{ds}"])[0]
                 .transform(quarantine_rows(ds)) for ds in DATASETS]
        # Few rows: a shuffle that adaptive execution coalesces gives a few right-sized files, not one per input file.
        quarantine = parts[0].unionByName(parts[1]).repartition("dataset", "source_file")
        wrote["quarantine"] = delta_io.replace_where(
            quarantine, delta_io.table_path(lake, "quarantine"), f"stage = '{STAGE.name}'")
    return wrote, done["physical"]


# What a read failure's message says, and what it means for the file (its cause and the fix).
UNREADABLE = (
    (("Unexpected end of input stream", "Not in GZIP format", "incorrect header check", "invalid block type",
      "Stream is not BZip2 formatted", "unexpected end of stream", "CRC"),
     "is a truncated or corrupt compressed file ({cause}): export it again, or move it out of the input folder"),
    (("maxColumns", "exceeds the maximum number of columns", "ArrayIndexOutOfBoundsException"),
     "holds a record with more fields than the CSV parser can hold (its limit is 20,480; {cause}): the file is "
     "not CSV of this contract; fix or remove that record, or move the file out of the input folder"),
    (("MalformedInputException", "CharacterCodingException"),
     "could not be decoded ({cause}): write it as UTF-8, or move it out of the input folder"),
)


def unreadable(spark: SparkSession, files: dict[str, list[str]], error: Exception) -> Exception:
    """The UserError for a read that failed: Spark's error names no file, so each file is parsed alone until one
    fails (only on this path); the error as it was if none does."""
    for ds, paths in files.items():
        for path in paths:
            try:
                with one_task_per_file(spark):
                    extract(spark, [path], DATASETS[ds]).select("record_number").count()
            except Py4JJavaError as e:
                text = str(e)
                for marks, explanation in UNREADABLE:
                    cause = next((m for m in marks if m in text), None)
                    if cause:
                        return UserError(f"{path} {explanation.format(cause=cause)}")
                return UserError(f"{path} could not be read ({text.splitlines()[0][:300]}): fix it, or move it out "
                                 f"of the input folder")
    return error


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


# What a dataset folder may hold. Spark's file index skips names that start with "_" or "." even when they are named
# explicitly, and Hadoop picks a decompressor by the lower-case suffix, so such files would lose their records
# without a word: every file is either read or refused, naming the file and the fix.
COMPRESSIONS = (".gz", ".bz2")
SIDE_FILE_SUFFIXES = (".crc",)   # Hadoop's checksum files beside the data files they describe


def input_verdict(name: str, size: int, is_file: bool = True) -> str | None:
    """None if ingest reads the file, "" if it is left aside as a side file holding no records (an empty marker
    such as Spark's ``_SUCCESS``, a Hadoop ``.crc``), else why it is refused, with the fix."""
    if not is_file:
        return "is a folder: ingest reads only the files directly in a dataset folder; move its files up, or move it out"
    if name.startswith(("_", ".")):
        if size == 0 or name.endswith(SIDE_FILE_SUFFIXES):
            return ""
        return ("starts with '_' or '.', a name Spark's file reader skips, so its records would be lost: rename it "
                f"(e.g. {name.lstrip('_.') or 'data.csv'})")
    lower = name.lower()
    if lower.endswith(".csv"):
        return None
    for suffix in COMPRESSIONS:
        if lower.endswith(".csv" + suffix):
            if name.endswith(suffix):
                return None
            return (f"ends in {name[-len(suffix):]!r}: Hadoop picks the decompressor by the lower-case suffix, so it "
                    f"would be read as plain text: rename it to end in {suffix!r}")
    return ("is not a CSV file ingest reads (*.csv, *.csv.gz, *.csv.bz2; 'csv' in any case): move it out of the "
            "folder, or convert it")


def find_csv_files(spark: SparkSession, input: str, dataset: str) -> list[str]:
    """The dataset's CSV files (Hadoop file system, so local, HDFS and object stores work); any other file in the
    folder is refused (``input_verdict``), before anything is read."""
    jvm, root, fs = _hadoop_fs(spark, input)
    if not fs.exists(root):
        raise UserError(f"input folder {input} does not exist: pass --input the folder the generate stage "
                        f"wrote (it holds customers/ and events/)")
    folder = jvm.org.apache.hadoop.fs.Path(root, dataset)
    statuses = fs.listStatus(folder) if fs.exists(folder) else []
    paths = []
    for st in sorted(statuses, key=lambda st: st.getPath().getName()):
        verdict = input_verdict(st.getPath().getName(), st.getLen(), st.isFile())
        if verdict is None:
            paths.append(st.getPath().toString())
        elif verdict:
            raise UserError(f"{st.getPath().toString()} {verdict}")
    if not paths:
        raise UserError(f"no {dataset} CSV files (*.csv, *.csv.gz or *.csv.bz2) in {input}/{dataset}: pass --input "
                        f"the folder the generate stage wrote, or put the {dataset} files there")
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
        check_header(path, first_line(spark, path), columns)


def check_header(path: str, line: str | None, columns: tuple[str, ...]) -> None:
    """``line``, the first of the file at ``path`` (None: the file is empty, so no header and no records)."""
    if line is None:
        return
    got = tuple(f.strip().strip('"') for f in line.lstrip("\ufeff").rstrip("\r").split(","))
    if got != columns:
        raise UserError(f"{path}: header {line!r} does not match the contract columns {','.join(columns)}: "
                        f"write the file with that header line (jobs/lake/contract.py), or move it out of the "
                        f"input folder")


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


def swallowed_records(columns: tuple[str, ...]) -> Column:
    """Name of the first field that holds whole records, else null: a line break followed by a line with as many
    separators as a record has, the mark of a quote opened and never closed, whose field swallowed the records
    after it (the parser then keeps the field count right, and nothing else would notice). The pattern excludes
    commas from its repeated parts, so it runs in linear time, and spells the repetition out (the GPU's regular
    expressions do not repeat groups)."""
    whole_record = r"\n[^\n,]*" + r",[^\n,]*" * (len(columns) - 1)
    return F.coalesce(*[F.when(F.col(c).contains("\n") & F.col(c).rlike(whole_record), F.lit(c))
                        for c in columns])


def malformed(columns: tuple[str, ...]) -> Column:
    """Null for a well-formed record; else why ingest rejects it, as the quarantine's (reason, detail, raw): a wrong
    field count with the raw text exactly as Spark read it; a field that swallowed whole records
    (``swallowed_records``, given as the column ``_swallowed``) with the fields written back as CSV."""
    corrupt, swallowed = F.col(CORRUPT), F.col("_swallowed")
    return (F.when(corrupt.isNotNull(),
                   F.struct(F.lit("wrong_field_count").alias("reason"),
                            F.lit(f"expected {len(columns)} fields").alias("detail"), corrupt.alias("raw")))
            .when(swallowed.isNotNull(),
                  F.struct(F.lit("unclosed_quote").alias("reason"),
                           F.concat(swallowed, F.lit(" holds whole records: a quote opened there is never closed"))
                           .alias("detail"),
                           as_csv(columns).alias("raw"))))


def bronze_rows(columns: tuple[str, ...]):
    """Every parsed record: its fields, lineage, ``record_lines`` and ``MALFORMED`` (null unless ingest rejects
    it). One parse feeds bronze, and the quarantine's ingest slice is read back from it (``quarantine_rows``)."""
    def transform(df: DataFrame) -> DataFrame:
        return (df.select("*", swallowed_records(columns).alias("_swallowed"))
                .select(*columns, *LINEAGE, record_lines(columns).alias("record_lines"),
                        malformed(columns).alias(MALFORMED)))
    return transform


LINE_BREAK = r"\r\n|\r|\n"   # as Spark's text reader splits lines


def line_breaks(c: Column) -> Column:
    """Line breaks in a string (0 for null)."""
    return F.greatest(F.size(F.split(c, LINE_BREAK)) - 1, F.lit(0))


def record_lines(columns: tuple[str, ...]) -> Column:
    """Physical lines of the input the record spans: 1 + the line breaks inside its (quoted) fields; the breaks
    are counted only in records that have one (most have none)."""
    has_break = reduce(lambda a, b: a | b, [F.col(c).contains("\n") | F.col(c).contains("\r") for c in columns])
    return F.when(has_break, F.lit(1) + reduce(lambda a, b: a + b, [line_breaks(F.col(c)) for c in columns])) \
        .otherwise(F.lit(1))


def as_csv(columns: tuple[str, ...]) -> Column:
    """The parsed fields written back as one CSV record (every field quoted, quotes doubled, nulls empty)."""
    return F.concat_ws(",", *[F.when(F.col(c).isNull(), F.lit(""))
                              .otherwise(F.concat(F.lit('"'), F.regexp_replace(c, '"', '""'), F.lit('"')))
                              for c in columns])


def quarantine_rows(dataset: str):
    """Bronze's malformed records (``bronze_rows``) in quarantine shape."""
    def transform(df: DataFrame) -> DataFrame:
        return (df.where(F.col(MALFORMED).isNotNull())
                .select(F.lit(dataset).alias("dataset"), F.lit(STAGE.name).alias("stage"), *LINEAGE,
                        *[F.col(f"{MALFORMED}.{f}").alias(f) for f in ("raw", "reason", "detail")])
                .select(*QUARANTINE_COLUMNS))
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
    """Per dataset and file: records (bronze holds every one), rows kept (``bronze``: well-formed, what clean
    reads) and rows quarantined (bronze's malformed ones). A file with a header and no records is listed with zeros.

    Bronze's per-file figures (rows, first and last record number) come from the statistics Delta wrote with
    each of its data files (``bronze_counts_from_commit``); where those cannot be exact, from a scan of bronze's
    lineage columns. The quarantine's from its ingest slice (few rows)."""
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
        rows, first, last = got.get("bronze", (0, 0, -1))
        q_rows, q_first, q_last = got.get("quarantined", (0, 0, -1))
        # Every record once in bronze, numbered 0..n-1, and the quarantined ones among them: anything else (a task
        # that read two files, a record missing or twice, a row naming no input file) fails the stage here.
        if (name not in names[ds] or first != 0 or last + 1 != rows
                or q_rows > rows or (q_rows and (q_first < 0 or q_last >= rows))):
            raise RuntimeError(f"{ds} {name}: bronze holds {rows} rows numbered {first}..{last} and the quarantine "
                               f"{q_rows} numbered {q_first}..{q_last}"
                               f"{'' if name in names[ds] else ', of a file not in the input'}, not each record "
                               f"once: ingest's accounting does not add up (a task read more than one file, or "
                               f"a bug in ingest)")
        files[ds][name] = {"records": rows, "bronze": rows - q_rows, "quarantined": q_rows}
    totals = {ds: {k: sum(f[k] for f in files[ds].values()) for k in ("records", "bronze", "quarantined")}
              for ds in DATASETS}
    # Flat figures first (rows in bronze per dataset, quarantined in all) for progress lines and the report.
    return {**{ds: totals[ds]["bronze"] for ds in DATASETS},
            "quarantined": sum(t["quarantined"] for t in totals.values()),
            "files": {ds: dict(sorted(files[ds].items())) for ds in DATASETS}, "totals": totals}


# ---------------------------------------------------------------------------------------------------------
# The independent count: each file's physical lines, from Spark's text reader, against the lines its parsed
# records span. It does not trust the CSV parser: a record the parser dropped or merged shows up here.
# ---------------------------------------------------------------------------------------------------------
def physical_lines(spark: SparkSession, files: dict[str, list[str]]) -> dict[tuple[str, str], tuple[int, int]]:
    """(dataset, file name) -> (lines, blank lines), as the text reader splits each file (one aggregated row a
    file comes back)."""
    out = {}
    for ds, paths in files.items():
        text = spark.read.text(paths).select(F.col("_metadata.file_name").alias("source_file"), "value")
        for r in (text.groupBy("source_file")
                  .agg(F.count(F.lit(1)).alias("lines"), F.count(F.when(F.col("value") == "", 1)).alias("blank"))
                  .collect()):  # one row per input file
            out[(ds, r["source_file"])] = (r["lines"], r["blank"])
    return out


def line_breaks_by_file(spark: SparkSession, lake: str, versions: dict[str, int]) -> dict[tuple[str, str], int]:
    """(dataset, file name) -> line breaks inside the file's records: bronze's ``record_lines`` of its well-formed
    records (a scan of narrow columns) and the quarantined records' raw text. A field swallowed by a quote that
    never closes runs to the end of its file, so its last line break is the file's own, which the text reader does
    not count as a line."""
    out: dict[tuple[str, str], int] = {}
    for ds in DATASETS:
        b, _ = delta_io.read_table(spark, lake, f"bronze_{ds}", versions[f"bronze_{ds}"])
        for r in (b.where(F.col(MALFORMED).isNull() & (F.col("record_lines") > 1)).groupBy("source_file")
                  .agg(F.sum(F.col("record_lines") - 1).alias("breaks")).collect()):  # one row per input file
            out[(ds, r["source_file"])] = int(r["breaks"])
    q, _ = delta_io.read_table(spark, lake, "quarantine", versions["quarantine"])
    trailing = (F.col("reason") == "unclosed_quote") & F.col("raw").rlike('[\r\n]"$')
    for r in (q.where(F.col("stage") == STAGE.name)
              .groupBy("dataset", "source_file")
              .agg(F.sum(line_breaks(F.col("raw")) - F.when(trailing, 1).otherwise(0)).alias("breaks"))
              .collect()):  # one row per input file with quarantined records
        key = (r["dataset"], r["source_file"])
        out[key] = out.get(key, 0) + int(r["breaks"])
    return out


def reconciled(files: dict, breaks: dict[tuple[str, str], int], physical: dict[tuple[str, str], tuple[int, int]],
               sizes: dict[str, dict[str, int]]) -> dict:
    """Per dataset and file: bytes, physical lines and blank lines; every line must be the header, a line of a
    record (kept or quarantined), or a blank line the parser skips. Else the file was read differently from its
    lines, and records may be lost: the stage fails naming the file."""
    out: dict = {}
    for ds, per_file in files.items():
        mine = out.setdefault(ds, {"files": {}, "bytes": 0, "lines": 0})
        for name, f in per_file.items():
            lines, blank = physical.get((ds, name), (0, 0))
            explained = (1 if lines else 0) + f["records"] + breaks.get((ds, name), 0)
            if not 0 <= lines - explained <= blank:
                raise UserError(
                    f"{ds} file {name}: {lines:,} lines ({blank:,} blank), but its header and {f['records']:,} "
                    f"parsed records span {explained:,}: the CSV parser read it differently from its lines, so "
                    f"records may be lost; check the file's quoting and line endings (nothing was kept)")
            mine["files"][name] = {"bytes": sizes[ds].get(name, 0), "lines": lines, "blank_lines": blank}
            mine["bytes"] += sizes[ds].get(name, 0)
            mine["lines"] += lines
    return out


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
