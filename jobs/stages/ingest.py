"""Ingest: CSV files -> bronze Delta tables (every field a string, every record) + the 'ingest' slice of the
quarantine.

    scripts/submit ingest --input data/raw --lake data/lake

Reads ``<input>/customers/*.csv[.gz]`` and ``<input>/events/*.csv[.gz]`` with the project's own CSV reader
(``jvm/churn/ingest``, a Spark data source): every field a string, never inferred. A record whose field count
differs from the header goes to quarantine with reason ``wrong_field_count`` and its raw text as read; nothing is
dropped silently (see docs/etl.md):

- A file of at most ``WHOLE_FILE_CHUNKS`` chunks, and every compressed file, is one split, read whole by one
  task, which counts its bytes as the parser reads them: the records that start in it and its physical lines, by
  the pre-pass's rules and code (jvm/churn/ingest/ChunkScan.java), apart from the parser's. The counts reach the
  driver as a Spark accumulator (``Tally``) with the tasks' results: such a file is read once.
- A larger file goes through a pre-pass (``scanned``) that reads it in chunks and counts, per chunk, its quotes,
  physical lines and, for either quote parity the chunk may start at, where its first record boundary lies and how
  many records start in it. Chained over a file's chunks (``planned``), that gives splits that start and end on
  record boundaries (quoted line breaks respected) with the record number of each split's first record: a file of
  any size is read by many tasks, in parallel, and every record is numbered exactly (0-based, header excluded) with
  no join and no second parse.
- The reader gives each record its fields (the first N; missing ones null), its file name, record number, the
  physical lines it spans, its field count, and its raw text where the count is wrong or a field swallowed whole
  records (a quote opened and never closed).

The CSV is parsed once: bronze holds every record, with ``malformed`` (why ingest rejects it: null for most)
beside its fields, and the quarantine's ingest slice is read back from bronze's flagged rows. Clean reads only
the others (``clean.well_formed``). The per-file accounting checks that bronze holds each record once, as many as
the pre-pass counted, and the pre-pass's physical lines (counted apart from the parser) must all be explained by
the header, the records and blank lines. The input files' sizes and modification times are compared before and
after. Bronze's side is read from the bronze commit's per-file statistics (row count, min/max of the lineage
columns) rather than by re-reading bronze, falling back to a scan of bronze's lineage columns whenever those
statistics cannot be exact.
"""
from __future__ import annotations

import json
import re
import uuid
from functools import partial
from typing import NamedTuple

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.core.params import DATA_IN, LAKE
from jobs.core.stage import Stage, StageRecord
from jobs.lake import delta_io
from jobs.lake.contract import DATASETS, MALFORMED, QUARANTINE_COLUMNS
from jobs.lake.session import conf_flag, hadoop_fs, project_source, session_conf, together

LINEAGE = ("source_file", "record_number")
# Settings on the session while ingest writes bronze (Spark passes its SQL settings to Delta and the Parquet writer).
BRONZE_WRITE_SETTINGS = {
    # Delta keeps min/max/null counts of the first 32 columns of every file it writes. On bronze's raw strings that
    # is about a third of the write and serves no reader (clean reads bronze whole); bronze keeps them for its
    # lineage columns only, what a lookup of one record filters on. A table property, set when the table is created.
    "spark.databricks.delta.properties.defaults.dataSkippingStatsColumns": ",".join(LINEAGE),
    # Parquet's dictionary encoding looks every value up in a hash map of the column chunk's distinct values: on
    # bronze's raw strings a quarter of ingest's task time (1M customers, 2 cores). Bronze is written once and read
    # once, by clean, whose scan would copy each dictionary value it reads; its files are written plain instead.
    "parquet.enable.dictionary": "false",
}


def run(spark: SparkSession, data: str, lake: str) -> StageRecord:
    files = {ds: find_csv_files(spark, data, ds) for ds in DATASETS}
    for ds, paths in files.items():
        check_headers(spark, paths, DATASETS[ds])
    before = file_states(spark, files)
    inputs = {ds: [InputFile(p, file_name(spark, p), before[p][0]) for p in paths] for ds, paths in files.items()}

    record = StageRecord(STAGE.name)
    chunk = chunk_bytes(spark, sum(f.size for fs in inputs.values() for f in fs))
    whole = {f for fs in inputs.values() for f in fs if read_whole(f, chunk)}
    try:
        layouts = planned(inputs, scanned(spark, inputs, whole, chunk), whole)
        wrote, schemas, tallies = write_bronze(spark, inputs, layouts, lake)
    except Py4JJavaError as e:
        raise unreadable(files, e) from None
    layouts = {ds: counted(layout, inputs[ds], tallies[ds]) for ds, layout in layouts.items()}
    record.wrote.update(wrote)
    if file_states(spark, files) != before:
        raise UserError(f"input files under {data} changed while ingest read them, so bronze and quarantine may "
                        f"come from different contents: run ingest again once nothing writes to that folder")

    # The quarantine's slice and the accounting both read the bronze just written, independently: side by side
    # (under ingest's plugin settings, which a session's threads share), the one's commit and the other's driver
    # work leave no core idle; the slice's committed rows are checked against the accounting's count after both.
    expected = {ds: {f.name: n for f, n in layout.records.items()} for ds, layout in layouts.items()}
    with session_conf(spark, plugin_conf(spark)):
        done = together({
            "quarantine": partial(write_quarantine, spark, lake, wrote, schemas),
            "accounting": partial(accounting, spark, lake, dict(wrote), files, expected, schemas),
        })
    record.wrote["quarantine"] = done["quarantine"].version
    record.counts, breaks = done["accounting"]
    check_quarantine_rows(done["quarantine"].rows, record.counts["quarantined"])
    physical = {(ds, f.name): lines for ds, layout in layouts.items() for f, lines in layout.lines.items()}
    record.counts["input"] = reconciled(record.counts["files"], breaks, physical,
                                        {ds: {f.name: f.size for f in fs} for ds, fs in inputs.items()})
    record.extra["input"] = data
    return record


def write_bronze(spark: SparkSession, inputs: dict[str, list["InputFile"]], layouts: dict[str, "Layout"],
                 lake: str) -> tuple[dict[str, int], dict, dict[str, dict]]:
    """Bronze (every record, the malformed ones flagged); returns the versions written, bronze's schema and the
    tally of the files read whole (``take_tally``) per dataset."""
    tally_ids = {ds: f"ingest-{ds}-{uuid.uuid4()}" for ds in DATASETS}
    try:
        with session_conf(spark, plugin_conf(spark)):
            # The two bronze writes run side by side: the smaller one's last tasks would otherwise leave cores idle.
            bronze = {f"bronze_{ds}": extract(spark, inputs[ds], layouts[ds].splits, columns, tally_ids[ds])
                      .transform(bronze_rows(columns)) for ds, columns in DATASETS.items()}
            with session_conf(spark, BRONZE_WRITE_SETTINGS):
                wrote = together({name: partial(delta_io.overwrite, df, delta_io.table_path(lake, name))
                                  for name, df in bronze.items()})
    finally:
        tallies = {ds: take_tally(spark, tally_id) for ds, tally_id in tally_ids.items()}
    return wrote, {ds: bronze[f"bronze_{ds}"].schema for ds in DATASETS}, tallies


def write_quarantine(spark: SparkSession, lake: str, wrote: dict[str, int], schemas: dict):
    """The quarantine's ingest slice: bronze's malformed records (at the versions in ``wrote``), read back from
    bronze, not parsed again; returns the write's commit (version, rows)."""
    parts = [bronze_at(spark, lake, ds, wrote[f"bronze_{ds}"], schemas[ds]).transform(quarantine_rows(ds))
             for ds in DATASETS]
    # Few rows: a shuffle that adaptive execution coalesces gives a few right-sized files, not one per split.
    quarantine = parts[0].unionByName(parts[1]).repartition("dataset", "source_file")
    return delta_io.replace_where_counted(
        quarantine, delta_io.table_path(lake, "quarantine"), f"stage = '{STAGE.name}'")


def check_quarantine_rows(committed: int | None, flagged: int) -> None:
    """The rows the quarantine's write committed (None: its commit reported none) must be bronze's malformed ones
    (the accounting's count)."""
    if committed is not None and committed != flagged:
        raise RuntimeError(f"the quarantine's write committed {committed:,} rows for bronze's {flagged:,} "
                           f"malformed records: a bug in ingest or in the table writer")


def bronze_at(spark: SparkSession, lake: str, ds: str, version: int, schema) -> DataFrame:
    """Bronze ``ds`` at ``version``, which this run's overwrite wrote: the files of that commit as Parquet
    (``delta_io.overwrite_files``: no Delta snapshot to build), else through Delta's reader."""
    path = delta_io.table_path(lake, f"bronze_{ds}")
    files = delta_io.overwrite_files(spark, path, version, schema)
    return files if files is not None else delta_io.read(spark, path, version)[0]


# What a read failure's message says, and what it means for the file (its cause and the fix).
UNREADABLE = (
    (("Unexpected end of input stream", "Not in GZIP format", "incorrect header check", "invalid block type",
      "Stream is not BZip2 formatted", "unexpected end of stream", "CRC"),
     "is a truncated or corrupt compressed file ({cause}): export it again, or move it out of the input folder"),
    (("MiB: a quote opened and never closed",),
     "holds a record of over 1 GiB ({cause}): a quote opened and never closed holds the rest of the file; fix "
     "that record, or move the file out of the input folder"),
)
# The reader's failures name the file they happened in (jvm/churn/ingest/CsvSource.java, ``failure``).
FAILED_FILE = re.compile(r"churn\.ingest\.CsvSource could not read (.+?): ")


def unreadable(files: dict[str, list[str]], error: Exception) -> Exception:
    """The UserError for a read that failed, naming the file and, where known, the cause and the fix; the error as
    it was if it names no input file."""
    text = str(error)
    named = FAILED_FILE.search(text)
    path = named.group(1) if named else None
    if path not in {p for paths in files.values() for p in paths}:
        return error
    for marks, explanation in UNREADABLE:
        cause = next((m for m in marks if m in text), None)
        if cause:
            return UserError(f"{path} {explanation.format(cause=cause)}")
    detail = text[named.end():].splitlines()[0][:300]
    return UserError(f"{path} could not be read ({detail}): fix it, or move it out of the input folder")


def _describe(record: StageRecord) -> str:
    return "; ".join(f"{ds}: records {t['records']:,} bronze {t['bronze']:,} quarantined {t['quarantined']:,}"
                     for ds, t in record.counts["totals"].items())


STAGE = Stage("ingest", "CSV files -> bronze Delta tables + the quarantine's ingest slice", run,
              params=(DATA_IN, LAKE), writes=("bronze_customers", "bronze_events", "quarantine"),
              describe=_describe)


# ---------------------------------------------------------------------------------------------------------
# Extract: find files, check them, parse them (all before anything is written).
# ---------------------------------------------------------------------------------------------------------

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
    jvm, root, fs = hadoop_fs(spark, input)
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
    jvm, hpath, fs = hadoop_fs(spark, path)
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


# Separators other exports use (Excel in locales whose decimal mark is a comma writes semicolons; TSV): named in the
# refusal of a header that holds the contract's columns separated by one of them.
OTHER_SEPARATORS = {";": "semicolons", "\t": "tabs", "|": "vertical bars"}


def check_header(path: str, line: str | None, columns: tuple[str, ...]) -> None:
    """``line``, the first of the file at ``path`` (None: the file is empty, so no header and no records). A refusal
    names the cause where it can tell: another separator, UTF-16 text, the columns missing or not in the contract, or
    the contract's columns in another order."""
    if line is None:
        return
    text = line.lstrip("\ufeff").rstrip("\r")   # a UTF-8 byte-order mark (Excel's "CSV UTF-8") is allowed

    def fields(separator: str) -> tuple[str, ...]:
        return tuple(f.strip().strip('"') for f in text.split(separator))

    got = fields(",")
    if got == columns:
        return
    for separator, name in OTHER_SEPARATORS.items():
        if fields(separator) == columns:
            raise UserError(f"{path}: the header's fields are separated by {name}, not commas: the reader takes "
                            f"commas only; export the file with comma separators, or move it out of the input folder")
    if "\x00" in line:
        # UTF-16 puts a zero byte beside every ASCII letter (Excel's "Unicode Text" and Windows PowerShell's Out-File
        # write it).
        raise UserError(f"{path}: the header line holds zero bytes, so the file is not UTF-8 text: it looks UTF-16 "
                        f"encoded; save it as UTF-8 (Excel: \"CSV UTF-8\"), or move it out of the input folder")
    missing, unexpected = [c for c in columns if c not in got], [c for c in got if c not in columns]
    if not missing and not unexpected and len(got) == len(columns):
        why = " (the same columns in another order: they are read by position)"
    else:
        why = "".join(f" ({label}: {', '.join(names)})" for label, names in
                      (("missing", missing), ("not in the contract", unexpected)) if names)
    raise UserError(f"{path}: header {line!r} does not match the contract columns {','.join(columns)}{why}: "
                    f"write the file with that header line (jobs/lake/contract.py), or move it out of the "
                    f"input folder")


def file_states(spark: SparkSession, files: dict[str, list[str]]) -> dict[str, tuple[int, int]]:
    """Size and modification time of each input file (one listing per dataset folder)."""
    states = {}
    for paths in files.values():
        jvm, folder, fs = hadoop_fs(spark, paths[0].rsplit("/", 1)[0])
        wanted = set(paths)
        for s in fs.listStatus(folder):
            if s.getPath().toString() in wanted:
                states[s.getPath().toString()] = (s.getLen(), s.getModificationTime())
    return states


# Profile switch: "false" runs ingest's queries with the RAPIDS SQL plugin off. Its CSV scan is the project's reader
# (CPU) either way; with the plugin on (the gpu profile, conf/gpu.conf) the rows go to the GPU above the scan and
# bronze is written as Parquet there by the file commits (delta_io.WRITE_FILES_KEY), which halves ingest's task time
# on an H200 (docs/gpu.md). With it off, bronze is written by Delta's writer on the CPU.
RAPIDS_SQL_KEY = "spark.churn.ingest.rapidsSql"
# Profile setting: the size of the GPU batches ingest's rows are converted into on their way to bronze (the plugin's
# spark.rapids.sql.batchSizeBytes, for ingest's queries only; the gpu profile sets 64m). Unset: the session's, 1 GiB
# by default, which holds a whole input file: the pinned pool then refused host buffers from ingest's first tasks on,
# and in some runs those tasks ran 3-4x slower a record (docs/gpu-figures.md, ingest; conf/gpu-sweep-ingest-jfr.txt).
GPU_BATCH_KEY = "spark.churn.ingest.gpuBatchBytes"


def plugin_conf(spark: SparkSession) -> dict[str, str]:
    """The RAPIDS settings ingest's queries run with: the plugin's SQL off when the profile says so, and then bronze
    written by Delta's own writer, the CPU path the plugin's was measured against (docs/gpu.md). With the plugin on,
    the session's settings, with GPU_BATCH_KEY's batch size where set."""
    if not conf_flag(spark, RAPIDS_SQL_KEY, True):
        return {"spark.rapids.sql.enabled": "false", delta_io.WRITE_FILES_KEY: "false"}
    size = spark.conf.get(GPU_BATCH_KEY, None)
    return {} if size is None else {"spark.rapids.sql.batchSizeBytes": str(batch_bytes(spark, size))}


def batch_bytes(spark: SparkSession, size: str) -> int:
    """GPU_BATCH_KEY's value ("64m", "1g" or bytes) in bytes; anything else, or less than a MiB, stops ingest with the
    key named."""
    try:
        n = jvm_bytes(spark, size.strip())
    except Exception:   # py4j's error: Spark's NumberFormatException for a size it cannot read
        n = 0
    if n < 1 << 20:
        raise UserError(f"{GPU_BATCH_KEY}={size!r} is not a size of at least 1m: give one such as 64m or 1g in the "
                        "profile (conf/*.conf) or with --conf, or leave it out")
    return n


# ---------------------------------------------------------------------------------------------------------
# Parse: the pre-pass, the splits it gives, the reader (jvm/churn/ingest/CsvSource.java)
# ---------------------------------------------------------------------------------------------------------
SOURCE = "churn.ingest.CsvSource"
# Chunks of the pre-pass (and so the reader's splits): about CHUNKS_PER_CORE of them per core over the whole
# input, so that a few large files (or one) still keep every core busy and no core waits long on the last one;
# never smaller than MIN_CHUNK_BYTES (each is a task and a bronze file), never larger than
# spark.sql.files.maxPartitionBytes (the profile's input split size).
CHUNKS_PER_CORE = 8
MIN_CHUNK_BYTES = 8 << 20
# A file of at most this many chunks is read whole by one task, counted as it is parsed, without a pre-pass: at
# most 1/(4 x cores) of the input each, such files still spread evenly over the cores. Compressed files are read
# whole whatever their size (a stream is read from its start).
WHOLE_FILE_CHUNKS = 2


class InputFile(NamedTuple):
    path: str
    name: str       # as source_file holds it (``file_name``)
    size: int


class Layout(NamedTuple):
    """One dataset's read plan: the splits ([file, start, end, first record number, counted]; end -1: to the end of
    a compressed stream; counted 1: a whole file, counted as it is read), and per input file its records and
    (physical lines, blank lines), from the pre-pass or, for a file read whole, from the read's tally
    (``counted``)."""
    splits: list[list[int]]
    records: dict[InputFile, int]
    lines: dict[InputFile, tuple[int, int]]


def jvm_bytes(spark: SparkSession, size: str) -> int:
    """A size as Spark's settings write it ("128m", "1g", bytes) in bytes, read by Spark's own rules."""
    return int(spark.sparkContext._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(size))


def chunk_bytes(spark: SparkSession, total: int) -> int:
    cores = spark.sparkContext.defaultParallelism
    most = jvm_bytes(spark, spark.conf.get("spark.sql.files.maxPartitionBytes", "128m"))
    return max(MIN_CHUNK_BYTES, min(most, -(-total // (cores * CHUNKS_PER_CORE))))


def options(files: list[InputFile]) -> dict[str, str]:
    return {"files": json.dumps([f._asdict() for f in files])}


def read_whole(f: InputFile, chunk: int) -> bool:
    """Whether ``f`` is read whole by one task, counted as it is parsed (else the pre-pass splits it)."""
    return f.path.endswith(COMPRESSIONS) or f.size <= WHOLE_FILE_CHUNKS * chunk


def scanned(spark: SparkSession, inputs: dict[str, list[InputFile]], whole: set[InputFile],
            chunk: int) -> dict[str, list]:
    """The pre-pass over the input files not read whole (one Spark job, one task per chunk; none when every file is
    read whole): per dataset, one row per chunk, ``file`` its file's index in the dataset's list."""
    scanned_files = [(ds, i, f) for ds in DATASETS for i, f in enumerate(inputs[ds]) if f not in whole]
    out: dict[str, list] = {ds: [] for ds in DATASETS}
    if not scanned_files:
        return out
    reader = (spark.read.format(SOURCE).options(mode="scan", **options([f for _, _, f in scanned_files]))
              .option("chunkBytes", chunk))
    for r in project_source(reader, SOURCE, "ingest's CSV reader").collect():   # one small row per chunk of input
        ds, index, _ = scanned_files[r["file"]]
        out[ds].append(r.asDict() | {"file": index})
    return out


def planned(inputs: dict[str, list[InputFile]], chunks: dict[str, list],
            whole: set[InputFile]) -> dict[str, Layout]:
    """Each dataset's splits, records and lines from its chunks (``scanned``); a file in ``whole`` is one split,
    counted as it is read, its records and lines left for ``counted``.

    A file's chunks are chained in order: the quotes before a chunk tell which of its two answers holds (the one
    for an even count of quotes before it, or for an odd one); a chunk with a boundary starts a split there, which
    runs to the next split's start (or the file's end), and its first record's number is the count of records
    that start before it, less the header. A record longer than a chunk leaves the chunks it covers without a
    boundary: the split before them holds it."""
    out = {}
    for ds, files in inputs.items():
        splits: list[list[int]] = []
        records: dict[InputFile, int] = {}
        lines: dict[InputFile, tuple[int, int]] = {}
        by_file: dict[int, list] = {}
        for c in chunks[ds]:
            by_file.setdefault(c["file"], []).append(c)
        for index, f in enumerate(files):
            if f in whole:
                splits.append([index, 0, -1 if f.path.endswith(COMPRESSIONS) else f.size, 0, 1])
                continue
            starts, parity, before, n_lines, n_blank = [], 0, 0, 0, 0
            for c in sorted(by_file.get(index, []), key=lambda c: c["chunk"]):
                if c[f"first{parity}"] >= 0:
                    starts.append((c[f"first{parity}"], before))
                before += c[f"records{parity}"]
                parity ^= c["quotes"] & 1
                n_lines += c["lines"]
                n_blank += c["blank"]
            compressed = any(c["end"] < 0 for c in by_file.get(index, []))
            for k, (start, n_before) in enumerate(starts):
                stop = starts[k + 1][0] if k + 1 < len(starts) else (-1 if compressed else f.size)
                splits.append([index, start, stop, 0 if start == 0 else n_before - 1, 0])
            records[f] = max(before - 1, 0)      # the header is the first record to start
            lines[f] = (n_lines, n_blank)
        out[ds] = Layout(splits, records, lines)
    return out


# Profile switch: "true" has the reader hand its records over as batches of Arrow vectors of up to
# COLUMNAR_BATCH_ROWS rows instead of one row at a time. The RAPIDS Accelerator copies such a batch to the GPU buffer by
# buffer, where it converts rows into columns value by value on the CPU; Spark turns the batches back into rows for a
# CPU plan. Off by default: on an H200 host ingest was no faster with it and took more task time (docs/gpu-figures.md,
# "Settings measured"; conf/gpu-sweep-ingest-columnar.txt measures it).
COLUMNAR_KEY = "spark.churn.ingest.columnarReader"
COLUMNAR_BATCH_ROWS = 65536


def extract(spark: SparkSession, files: list[InputFile], splits: list[list[int]],
            columns: tuple[str, ...], tally: str) -> DataFrame:
    """Every record of the splits: its first ``len(columns)`` fields as strings (null when empty or missing), then
    source_file, record_number, record_lines, field_count, raw and swallowed (jvm/churn/ingest/CsvSource.java). The
    counts of the splits read whole go to the tally named ``tally`` (``take_tally``)."""
    columnar = conf_flag(spark, COLUMNAR_KEY, False)
    return (spark.read.format(SOURCE).options(mode="records", tally=tally, **options(files))
            .option("columns", json.dumps(list(columns))).option("splits", json.dumps(splits))
            .option("columnar", str(columnar).lower()).option("batchRows", COLUMNAR_BATCH_ROWS).load())


def take_tally(spark: SparkSession, tally: str) -> dict:
    """The counts of the files read whole under ``tally``, once its reads are done: {"counts": {file index:
    [records (the header included), lines, blank lines]}, "conflicts": [file index...]} (empty: nothing counted)."""
    got = spark.sparkContext._jvm.churn.ingest.Tally.take(tally)
    return json.loads(got) if got is not None else {"counts": {}, "conflicts": []}


def counted(layout: Layout, files: list[InputFile], tally: dict) -> Layout:
    """``layout`` with the records and lines of the files it reads whole, from the read's tally. A file counted
    twice with different counts, or not at all, fails the stage (a bug in ingest: a task that never finished its
    file would lose its records)."""
    records, lines = dict(layout.records), dict(layout.lines)
    for index, _, _, _, whole in layout.splits:
        if not whole:
            continue
        f = files[index]
        got = tally["counts"].get(str(index))
        if got is None or index in tally["conflicts"]:
            problem = "is missing" if got is None else "differs between two reads of it"
            raise RuntimeError(f"{f.path} was read whole but its count {problem}: ingest's accounting cannot check "
                               f"it (a bug in ingest)")
        n_records, n_lines, n_blank = got
        records[f] = max(n_records - 1, 0)      # the header is the first record to start
        lines[f] = (n_lines, n_blank)
    return layout._replace(records=records, lines=lines)


# ---------------------------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------------------------
def malformed(columns: tuple[str, ...]) -> Column:
    """Null for a well-formed record; else why ingest rejects it, as the quarantine's (reason, detail, raw), raw
    being the record's text exactly as in the file: a wrong field count; a field that swallowed whole records
    (the reader's ``swallowed``: a line feed inside it followed by a record's worth of separators, the mark of a
    quote opened and never closed, which keeps the field count right and which nothing else would notice)."""
    return (F.when(F.col("field_count") != len(columns),
                   F.struct(F.lit("wrong_field_count").alias("reason"),
                            F.lit(f"expected {len(columns)} fields").alias("detail"), F.col("raw").alias("raw")))
            .when(F.col("swallowed").isNotNull(),
                  F.struct(F.lit("unclosed_quote").alias("reason"),
                           F.concat(F.col("swallowed"), F.lit(" holds whole records: a quote opened there is never "
                                                              "closed")).alias("detail"),
                           F.col("raw").alias("raw"))))


def bronze_rows(columns: tuple[str, ...]):
    """Every parsed record: its fields, lineage, ``record_lines`` and ``MALFORMED`` (null unless ingest rejects
    it). One parse feeds bronze, and the quarantine's ingest slice is read back from it (``quarantine_rows``)."""
    def transform(df: DataFrame) -> DataFrame:
        return df.select(*columns, *LINEAGE, "record_lines", malformed(columns).alias(MALFORMED))
    return transform


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
def accounting(spark: SparkSession, lake: str, versions: dict[str, int], paths: dict[str, list[str]],
               expected: dict[str, dict[str, int]] | None = None,
               schemas: dict | None = None) -> tuple[dict, dict[tuple[str, str], int]]:
    """Per dataset and file: records (bronze holds every one), rows kept (``bronze``: well-formed, what clean
    reads) and rows quarantined (bronze's malformed ones); and, per (dataset, file), the line breaks inside its
    records (``record_lines`` less one each), for the independent count. A file with a header and no records is
    listed with zeros. ``expected``: the records the pre-pass found starting in each file, which bronze must hold;
    ``schemas``: bronze's per dataset as written, to read back what this run wrote without a Delta snapshot
    (``bronze_at``; left out: through Delta's reader).

    Bronze's rows and first and last record numbers per file come from the statistics Delta wrote with each of its
    data files (``bronze_counts_from_commit``); where those cannot be exact, from a scan of bronze's lineage
    columns that also counts distinct numbers. The malformed rows and the line breaks from one aggregation over
    bronze's narrow columns."""
    names = {ds: {file_name(spark, p) for p in paths[ds]} for ds in DATASETS}
    bronze = {ds: bronze_counts_from_commit(spark, delta_io.table_path(lake, f"bronze_{ds}"),
                                            versions[f"bronze_{ds}"], names[ds]) for ds in DATASETS}
    tables = {ds: bronze_at(spark, lake, ds, versions[f"bronze_{ds}"], schemas[ds]) if schemas
              else delta_io.read_table(spark, lake, f"bronze_{ds}", versions[f"bronze_{ds}"])[0] for ds in DATASETS}
    flagged = F.col(f"{MALFORMED}.reason").isNotNull()
    union = None
    for ds, b in tables.items():
        part = b.select(F.lit(ds).alias("dataset"), "source_file", "record_number", "record_lines",
                        flagged.alias("_flagged"))
        if bronze[ds] is not None:   # only the few rows that count here: multi-line or malformed records
            part = part.where((F.col("record_lines") > 1) | F.col("_flagged"))
        union = part if union is None else union.unionByName(part)
    counted = [F.count(F.when(F.col("_flagged"), 1)).alias("quarantined"),
               F.sum(F.col("record_lines") - 1).alias("breaks")]
    if any(counts is None for counts in bronze.values()):
        counted += [F.count(F.lit(1)).alias("rows"), F.min("record_number").alias("first"),
                    F.max("record_number").alias("last"), F.count_distinct("record_number").alias("distinct")]
    found: dict = {(ds, name): {} for ds in DATASETS for name in names[ds]}
    breaks: dict[tuple[str, str], int] = {}
    for r in union.groupBy("dataset", "source_file").agg(*counted).collect():  # one row per input file at most
        key = (r["dataset"], r["source_file"])
        got = found.setdefault(key, {})
        got["quarantined"] = r["quarantined"]
        breaks[key] = int(r["breaks"] or 0)
        if bronze[r["dataset"]] is None:
            # A number held twice leaves the distinct count short of the rows: made unmistakable for the check.
            got["bronze"] = (r["rows"], r["first"], r["last"] if r["distinct"] == r["rows"] else None)
    for ds in DATASETS:
        for name, counts in (bronze[ds] or {}).items():
            found.setdefault((ds, name), {})["bronze"] = counts

    files: dict = {ds: {} for ds in DATASETS}
    for (ds, name), got in found.items():
        rows, first, last = got.get("bronze", (0, 0, -1))
        q_rows = got.get("quarantined", 0)
        # Every record once in bronze, numbered 0..n-1, as many as the pre-pass saw start: anything else (splits
        # that overlap or leave a gap, a record missing or twice, a row naming no input file) fails the stage here.
        if (name not in names[ds] or first != 0 or last is None or last + 1 != rows
                or (expected is not None and expected[ds].get(name) != rows)):
            raise RuntimeError(f"{ds} {name}: bronze holds {rows} rows numbered {first}..{last}"
                               f"{'' if name in names[ds] else ', of a file not in the input'}"
                               f"{'' if expected is None else f', the pre-pass found {expected[ds].get(name)}'}, "
                               f"not each record once: ingest's accounting does not add up (a bug in ingest)")
        files[ds][name] = {"records": rows, "bronze": rows - q_rows, "quarantined": q_rows}
    totals = {ds: {k: sum(f[k] for f in files[ds].values()) for k in ("records", "bronze", "quarantined")}
              for ds in DATASETS}
    flagged = sum(t["quarantined"] for t in totals.values())
    # Flat figures first (rows in bronze per dataset, quarantined in all) for progress lines and the report.
    return ({**{ds: totals[ds]["bronze"] for ds in DATASETS}, "quarantined": flagged,
             "files": {ds: dict(sorted(files[ds].items())) for ds in DATASETS}, "totals": totals}, breaks)


# ---------------------------------------------------------------------------------------------------------
# The independent count: each file's physical lines, counted by the pre-pass apart from the parser (``planned``),
# against the lines its parsed records span (``accounting``). A record the parser dropped or merged shows up here.
# ---------------------------------------------------------------------------------------------------------
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

    Exact when: the commit is a plain overwrite (``delta_io.overwrite_adds``: its adds are the whole table),
    every data file it adds has a row count and lineage statistics whose min and max ``source_file`` are one and
    the same input file name (not a prefix: Delta cuts string statistics at 32 characters), and each input file's
    data files hold consecutive numbers that tile 0..n-1 (a row count equal to the width of its min..max, each
    file's min one past the last one's max). The reader numbers the records of a split consecutively and each
    split is one task writing its own data files, so that is what a right plan gives; a wrong one (overlapping
    or gapped splits), compaction or a table whose statistics skip the lineage columns go to the scan, which
    counts distinct numbers."""
    if delta_io.committed_version(spark, table) is None:
        return None
    adds = delta_io.overwrite_adds(spark, table, version)
    if adds is None:
        return None
    spans: dict[str, list[tuple[int, int, int]]] = {}
    for add in adds:
        stats = json.loads(add.get("stats") or "{}")
        lo, hi = stats.get("minValues") or {}, stats.get("maxValues") or {}
        name, n = lo.get("source_file"), stats.get("numRecords")
        first, last = lo.get("record_number"), hi.get("record_number")
        if name is None or name != hi.get("source_file") or name not in names or None in (first, last, n):
            return None
        spans.setdefault(name, []).append((first, last, n))
    counts: dict[str, tuple[int, int, int]] = {}
    for name, parts in spans.items():
        parts.sort()
        expected_first = 0
        for first, last, n in parts:
            if first != expected_first or n != last - first + 1:
                return None
            expected_first = last + 1
        counts[name] = (sum(n for _, _, n in parts), parts[0][0], parts[-1][1])
    return counts
