"""All Delta Lake I/O of the pipeline: reads pinned to a version, idempotent writes, versions recorded.

Idempotence, by kind of write:
- ``overwrite``: the table becomes exactly ``df`` (a stage rebuilding its output from the same input
  gives the same contents, whatever ran before);
- ``replace_where``: only the rows matching a predicate are replaced (e.g. one stage's slice of the
  quarantine, one run's predictions); done with Delta's ``replaceWhere``, or under the gpu profiles, for an
  unpartitioned table's ``column = 'value'`` slice, a Parquet write and one commit (``replace_slice_as_files``);
- ``append_once``: an append keyed by (app id, version) through Delta's ``txnAppId`` / ``txnVersion``,
  so a retried or re-run append of the same key is skipped.
"""
from __future__ import annotations

import json
import os
import re
import threading
import uuid
from typing import NamedTuple
from urllib.parse import unquote

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType

from jobs.core.errors import UserError
from jobs.lake import plans
from jobs.lake.contract import TABLES
from jobs.lake.session import conf_flag, hadoop_fs, remove_path, session_conf


def table_path(lake: str, name: str) -> str:
    return os.path.join(lake, TABLES[name])


def version(spark: SparkSession, path: str) -> int:
    """Latest committed version of the Delta table at ``path`` (relative paths too, which SQL's
    ``DESCRIBE HISTORY delta.`path``` rejects)."""
    v = committed_version(spark, path)
    if v is None:
        raise TableMissing(f"no Delta table at {path}: run the stage that writes it first (README, 'Stages')")
    return v


class Commit(NamedTuple):
    """A commit of a write: its version, and the rows it wrote as Delta's commit metrics report them
    (``operationMetrics.numOutputRows``; None where the commit has none)."""
    version: int
    rows: int | None


def last_commit(spark: SparkSession, path: str) -> Commit:
    """The latest commit of the table at ``path`` (the pipeline's lock keeps it ours), from its commit file."""
    v = version(spark, path)
    info = next((a["commitInfo"] for a in commit_actions(spark, path, v) if "commitInfo" in a), {})
    rows = (info.get("operationMetrics") or {}).get("numOutputRows")
    return Commit(v, None if rows is None else int(rows))


def commit_actions(spark: SparkSession, path: str, v: int) -> list[dict]:
    """The actions of the table's commit ``v``, one dict each, as its log file holds them (Delta's PROTOCOL.md: one
    JSON action per line), read with the file system's client on the driver: no Spark job, no snapshot."""
    jvm, p, fs = hadoop_fs(spark, f"{path.rstrip('/')}/_delta_log/{v:020d}.json")
    stream = fs.open(p)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def overwrite_adds(spark: SparkSession, path: str, v: int) -> list[dict] | None:
    """The ``add`` actions of commit ``v`` where it is a plain overwrite (a write in mode Overwrite without a
    predicate: its adds are then the whole table at ``v``), read from its log file on the driver; None for any other
    commit, or where its log file is gone (cleaned up since)."""
    try:
        actions = commit_actions(spark, path, v)
    except Py4JJavaError:
        return None
    return plain_overwrite_adds(actions)


def plain_overwrite_adds(actions: list[dict]) -> list[dict] | None:
    """``overwrite_adds`` of a commit's actions already read."""
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    params = info.get("operationParameters") or {}
    if info.get("operation") != "WRITE" or params.get("mode") != "Overwrite" or params.get("predicate") not in (None, "[]"):
        return None
    return [a["add"] for a in actions if "add" in a]


def overwrite_rows(spark: SparkSession, path: str, v: int) -> int | None:
    """The rows of the table at ``path`` as its plain overwrite ``v`` left it (``overwrite_adds``: its adds are the
    whole table), summed from each added file's statistics (``numRecords``), as Delta's own metadata-only count
    does: no scan. None for any other commit, or where a file has no row count or a deletion vector."""
    adds = overwrite_adds(spark, path, v)
    if adds is None:
        return None
    counts = [json.loads(a.get("stats") or "{}").get("numRecords") for a in adds]
    if any(n is None for n in counts) or any(a.get("deletionVector") for a in adds):
        return None
    return sum(int(n) for n in counts)


def overwrite_files(spark: SparkSession, path: str, v: int, schema) -> DataFrame | None:
    """The table at ``path`` as its plain overwrite ``v`` wrote it (``overwrite_adds``): a Parquet scan of exactly
    the files that commit adds, with ``schema`` (the written frame's). No Delta snapshot is built, so no Spark job
    replays the log: a stage reading back what it has just written skips one to four small jobs per read (ingest's
    two read-backs of bronze). None where that would not be the same rows as Delta's reader gives: another kind of
    commit, a table with no rows, partition values, a deletion vector, or file statistics that do not name the
    schema's columns (column mapping names them otherwise); the caller then reads through Delta."""
    return adds_as_parquet(spark, path, overwrite_adds(spark, path, v), schema)


def adds_as_parquet(spark: SparkSession, path: str, adds: list[dict] | None, schema) -> DataFrame | None:
    """``overwrite_files`` of a plain overwrite's ``add`` actions already read."""
    if not adds:
        return None
    names = set(schema.fieldNames())
    for add in adds:
        named = set(json.loads(add.get("stats") or "{}").get("minValues") or {})
        if add.get("partitionValues") or add.get("deletionVector") or not named or not named <= names:
            return None
    root = path.rstrip("/")
    files = [a["path"] if "://" in a["path"] else f"{root}/{unquote(a['path'])}" for a in adds]
    return parquet_files(spark, files, schema)


def committed_version(spark: SparkSession, path: str) -> int | None:
    """The newest commit file's version in the table's log, from a listing (no Spark job); None: no table."""
    jvm, log, fs = hadoop_fs(spark, path.rstrip("/") + "/_delta_log")
    if not fs.exists(log):
        return None
    names = [st.getPath().getName() for st in fs.listStatus(log)]
    versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return max(versions) if versions else None


def folder_exists(spark: SparkSession, path: str) -> bool:
    _, p, fs = hadoop_fs(spark, path)
    return bool(fs.exists(p))


def restore(spark: SparkSession, path: str, version: int | None) -> None:
    """The table at ``path`` put back to ``version`` (its rows as they were then, as a new commit); ``None``
    removes what is at ``path`` (the table did not exist: only files of an uncommitted write can be there)."""
    if version is None:
        remove_path(spark, path)
        return
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, path).restoreToVersion(version)


def exists(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table with at least one commit is at ``path`` (a listing of its log)."""
    return committed_version(spark, path) is not None


# Profiles that run SQL on the GPU set this: Delta snapshots are then scanned as their Parquet files (below).
FILES_AS_PARQUET_KEY = "spark.churn.delta.scanFilesAsParquet"
# Table features under which a snapshot's Parquet files alone do not hold its rows as Delta reads them.
PARQUET_UNSAFE_FEATURES = ("deletionVectors", "columnMapping")


class TableMissing(UserError):
    """A stage's input table does not exist (yet)."""


# Every profile reads a version written by a plain overwrite as the Parquet files that commit adds, where those are
# exactly the table's rows (``commit_snapshot``); false reads every version through Delta's reader.
READ_COMMIT_FILES_KEY = "spark.churn.delta.readCommitFiles"
METADATA_SEARCH_COMMITS = 100   # how far back from a version the log is searched for its schema and protocol


def read(spark: SparkSession, path: str, at_version: int | None = None) -> tuple[DataFrame, int]:
    """The table at ``path`` pinned to one version (the latest if none given), and that version: the files of the
    version's commit where it is a plain overwrite (``commit_snapshot``), else through Delta's reader."""
    v = version(spark, path) if at_version is None else at_version
    if conf_flag(spark, READ_COMMIT_FILES_KEY, True):
        files = commit_snapshot(spark, path, v)
        if files is not None:
            return files, v
    df = spark.read.format("delta").option("versionAsOf", v).load(path)
    if conf_flag(spark, FILES_AS_PARQUET_KEY, False):
        df = snapshot_files_as_parquet(spark, path, df)
    return df, v


def table_metadata(spark: SparkSession, path: str, v: int,
                   actions_at_v: list[dict] | None = None) -> tuple[dict, dict] | None:
    """The table's ``metaData`` and ``protocol`` actions as of version ``v`` (the newest of each at or before ``v``),
    from its commit files on the driver, newest first (commit ``v``'s from ``actions_at_v`` where the caller has read
    them); None where a commit file on the way is gone (log cleanup keeps only those after a checkpoint) or either is
    not found within ``METADATA_SEARCH_COMMITS`` commits."""
    metadata = protocol = None
    for at in range(v, max(v - METADATA_SEARCH_COMMITS, -1), -1):
        try:
            actions = actions_at_v if at == v and actions_at_v is not None else commit_actions(spark, path, at)
        except Py4JJavaError:
            return None
        for action in actions:
            metadata = metadata or action.get("metaData")
            protocol = protocol or action.get("protocol")
        if metadata and protocol:
            return metadata, protocol
    return None


def commit_snapshot(spark: SparkSession, path: str, v: int) -> DataFrame | None:
    """Version ``v`` of the table at ``path`` as a Parquet scan of the files its commit adds, with the table's schema,
    where that is exactly what Delta's reader gives: ``v`` is a plain overwrite (``overwrite_files``: its adds are
    the whole table), the table is unpartitioned and of reader version 1 (no deletion vectors, no column mapping:
    each file's rows are the table's rows under the schema's own names). Delta's reader replays the log in Spark
    jobs for every read (one to four small jobs, and a listing of the table's files at planning); this reads the
    one or two small commit files it needs on the driver, each once. None for any other table or commit (the caller
    reads through Delta)."""
    try:
        actions = commit_actions(spark, path, v)
    except Py4JJavaError:
        return None
    adds = plain_overwrite_adds(actions)
    if not adds:
        return None   # not a plain overwrite (or no rows): no need to look for the schema
    found = table_metadata(spark, path, v, actions)
    if found is None:
        return None
    metadata, protocol = found
    if protocol.get("minReaderVersion", 1) != 1 or metadata.get("partitionColumns"):
        return None
    return adds_as_parquet(spark, path, adds, StructType.fromJson(json.loads(metadata["schemaString"])))


def read_table(spark: SparkSession, lake: str, name: str, at_version: int | None = None) -> tuple[DataFrame, int]:
    """The lake's table ``name`` (contract.TABLES), as ``read``."""
    return read(spark, table_path(lake, name), at_version)


def snapshot_files_as_parquet(spark: SparkSession, path: str, snapshot: DataFrame) -> DataFrame:
    """The rows of ``snapshot`` (a Delta read pinned to a version) as a plain Parquet scan of exactly the data
    files that version lists, or ``snapshot`` itself where that would not be the same rows.

    Why: the RAPIDS Accelerator 25.04 (the newest jar served here) ships only a Delta stub for Spark 3.5, so it
    keeps every Delta scan on the CPU and feeds the GPU through a row-to-columnar copy; a Parquet scan of the
    same files runs on the GPU. Delta's own reader is still what lists the files (``inputFiles`` of the pinned
    snapshot: removed and uncommitted files are never read), and the schema is the snapshot's. It is the same
    rows only for unpartitioned tables without deletion vectors or column mapping (the pipeline's tables); any
    other table, or an empty one, is read through Delta as before."""
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().first()  # one row of table metadata
    features = set(detail["tableFeatures"] or [])
    properties = detail["properties"] or {}
    if (detail["partitionColumns"] or features & set(PARQUET_UNSAFE_FEATURES)
            or properties.get("delta.enableDeletionVectors", "false") == "true"
            or properties.get("delta.columnMapping.mode", "none") != "none"):
        return snapshot
    files = snapshot.inputFiles()
    if not files:
        return snapshot
    return parquet_files(spark, files, snapshot.schema)


# Spark checks each file a scan names (its size, whether it exists) before planning; past
# spark.sql.sources.parallelPartitionDiscovery.threshold (32) files it does that in a Spark job of one task per file.
# On a local file system that is one system call per file: a job costs more than the calls (four of them, of 130+
# tasks each, in ingest's read-backs of bronze under the gpu profile). Remote stores keep the job. The threshold is a
# session-wide setting and scans run side by side (``together``): one lookup at a time, so that no thread restores
# it under another's lookup (which then ran as a job: a 135-task job in an H200 run's ingest).
_LOOKUP = threading.Lock()


def parquet_files(spark: SparkSession, files: list[str], schema) -> DataFrame:
    """A Parquet scan of exactly ``files`` with ``schema``; the files are looked up on the driver, without a Spark
    job, where they are on a local file system."""
    reader = spark.read.schema(schema)
    if hadoop_fs(spark, files[0])[2].getScheme() != "file":
        return reader.parquet(*files)
    with _LOOKUP, session_conf(spark, {"spark.sql.sources.parallelPartitionDiscovery.threshold":
                                       str(max(32, len(files)))}):
        return reader.parquet(*files)


def overwrite(df: DataFrame, path: str, partition_by: tuple[str, ...] = ()) -> int:
    return overwrite_counted(df, path, partition_by).version


def overwrite_counted(df: DataFrame, path: str, partition_by: tuple[str, ...] = (),
                      properties: dict[str, str] | None = None) -> Commit:
    """``overwrite``, returning the commit: its version and the rows it wrote. ``properties`` (``delta.*`` table
    properties) apply when the write creates the table; an existing table keeps its own. Where the profile says so
    (``WRITE_FILES_KEY``), an unpartitioned table is written as Parquet files and committed (``overwrite_as_files``)."""
    if not partition_by and conf_flag(df.sparkSession, WRITE_FILES_KEY, False):
        return overwrite_as_files(df, path, properties)
    writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    for key, value in (properties or {}).items():
        writer = writer.option(key, value)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    with plans.observing(df, path):
        writer.save(path)
    return last_commit(df.sparkSession, path)


# Profiles that run SQL on the GPU set this: an overwrite is a plain Parquet write, which the GPU runs, and a Delta
# commit of its files (``overwrite_as_files``). RAPIDS 25.04 has no Delta writer for Spark 3.5: a Delta write moves its
# rows off the GPU and encodes them on the CPU.
WRITE_FILES_KEY = "spark.churn.delta.writeFilesAsParquet"
STATS_STRING_LENGTH = 32    # longer strings get no min/max (Delta's writer keeps a prefix of this length of them)
WRITE_FOLDER_PREFIX = "w-"  # one folder of Parquet files per file commit, under the table's folder


def overwrite_as_files(df: DataFrame, path: str, properties: dict[str, str] | None = None) -> Commit:
    """The table at ``path`` replaced by ``df``, as ``overwrite_counted`` does, in two steps: ``df`` written as Parquet
    files into a new folder under the table's (``WRITE_FOLDER_PREFIX``; a Parquet write, which the RAPIDS
    Accelerator runs on the GPU), then one Delta commit that removes the table's files and adds these
    (``jvm/churn/lake/FileCommit.java``: a ``WRITE`` in mode ``Overwrite``, as Delta's own writer commits one).

    Each file's rows and statistics are read from its footer (no data read): the null counts and min/max of the
    columns Delta keeps statistics of in the table (``delta.dataSkippingStatsColumns``, else the first
    ``delta.dataSkippingNumIndexedCols``), but for timestamps (Delta keeps theirs truncated to milliseconds, by rules
    of its own) and strings of more than 32 characters, which get no min/max (a reader then skips no file on them).
    If any step fails nothing is committed and the folder is removed; a reader sees the old version until the
    commit."""
    version, rows = _file_commit(df, path, "overwrite", dict(properties or {}), STATS_STRING_LENGTH)
    return Commit(int(version), int(rows))


def _file_commit(df: DataFrame, path: str, method: str, *args):
    """``df`` written as Parquet into a new folder under the table's (``WRITE_FOLDER_PREFIX``), then
    ``FileCommit.<method>(spark, table, folder, names, sizes, times, schema, *args)`` on its files; returns what that
    returns ({version, rows}, or None where it declines the table). The folder is removed wherever nothing was
    committed: the write or the commit failed, the method declined, or it found nothing to commit (the version
    before)."""
    spark = df.sparkSession
    before = committed_version(spark, path)
    name = f"{WRITE_FOLDER_PREFIX}{uuid.uuid4().hex}"
    folder = f"{path.rstrip('/')}/{name}"
    try:
        with plans.observing(df, path):
            df.write.mode("errorifexists").parquet(folder)
        files = written_files(spark, folder)
        gateway = spark.sparkContext._gateway
        result = getattr(gateway.jvm.churn.lake.FileCommit, method)(
            spark._jsparkSession, path, name, _array(gateway, gateway.jvm.String, list(files)),
            _array(gateway, gateway.jvm.long, [size for size, _ in files.values()]),
            _array(gateway, gateway.jvm.long, [time for _, time in files.values()]),
            nullable(df.schema).json(), *args)
    except BaseException:
        if committed_version(spark, path) == before:   # not committed: the files are nobody's
            remove_path(spark, folder)
        raise
    if result is None or int(result[0]) == before:
        remove_path(spark, folder)
    return result


def _array(gateway, kind, values: list):
    array = gateway.new_array(kind, len(values))
    for i, v in enumerate(values):
        array[i] = v
    return array


def written_files(spark: SparkSession, folder: str) -> dict[str, tuple[int, int]]:
    """The Parquet files a write left in ``folder`` (not its ``_SUCCESS`` marker), by name, in name order (the write's
    partition order): (bytes, modification time in ms)."""
    _, p, fs = hadoop_fs(spark, folder)
    found = {st.getPath().getName(): (st.getLen(), st.getModificationTime()) for st in fs.listStatus(p)
             if st.isFile() and not st.getPath().getName().startswith(("_", "."))}
    return dict(sorted(found.items()))


def nullable(schema: StructType) -> StructType:
    """``schema`` with every field nullable, as Delta keeps a table's schema."""
    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def replace_where(df: DataFrame, path: str, predicate: str, partition_by: tuple[str, ...] = ()) -> int:
    """Replace the rows matching ``predicate`` with ``df`` (every row of ``df`` must match it)."""
    return replace_where_counted(df, path, predicate, partition_by).version


def replace_where_counted(df: DataFrame, path: str, predicate: str, partition_by: tuple[str, ...] = ()) -> Commit:
    """``replace_where``, returning the commit: its version and the rows it wrote. Delta makes no commit when
    there is nothing to write and no row matches the predicate: then the table's version and 0 rows. Where the
    profile writes files (``WRITE_FILES_KEY``) an unpartitioned table's slice is a file commit where it can be."""
    spark = df.sparkSession
    if not exists(spark, path):
        return overwrite_counted(df, path, partition_by)
    if not partition_by and conf_flag(spark, WRITE_FILES_KEY, False):
        commit = replace_slice_as_files(df, path, predicate)
        if commit is not None:
            return commit
    before = committed_version(spark, path)
    with plans.observing(df, path):
        df.write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(path)
    commit = last_commit(spark, path)
    return Commit(commit.version, 0) if commit.version == before else commit


SLICE_PREDICATE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*'([^'\\]*)'\s*$")


def replace_slice_as_files(df: DataFrame, path: str, predicate: str) -> Commit | None:
    """``replace_where_counted`` as a Parquet write and one Delta commit (``overwrite_as_files``' two steps), for a
    predicate ``column = 'value'`` on an unpartitioned table whose files each hold one value of ``column`` by their
    statistics (``jvm/churn/lake/FileCommit.java``, ``replaceSlice``): the slice's files removed, the new ones added,
    no scan of the old files. The quarantine is such a table: every stage writes its own files. The write starts at
    once (beside the stage's other writes); only the commit looks at the table. None, with nothing committed and
    the files removed, where the table is not such a table: the caller then writes through Delta. Rows of ``df``
    outside the slice fail the commit, as Delta's own replaceWhere refuses them."""
    match = SLICE_PREDICATE.match(predicate)
    if match is None or match.group(1) not in df.columns:
        return None
    column, value = match.groups()
    result = _file_commit(df, path, "replaceSlice", column, value, predicate, STATS_STRING_LENGTH)
    return None if result is None else Commit(int(result[0]), int(result[1]))


def append_once(df: DataFrame, path: str, app_id: str, txn_version: int) -> int:
    """Appends ``df`` unless the table already records ``app_id`` at ``txn_version`` or later (Delta's idempotent
    append, ``txnAppId`` / ``txnVersion``); returns the table's version after. Where the profile writes files
    (``WRITE_FILES_KEY``), an unpartitioned table's append is a Parquet write and one commit of its files and the app
    id's version (``FileCommit.appendOnce``): no Delta writer, whose first use on an executor cost ~1.3 s for the
    runs table's one row under gpu at 6M customers."""
    spark = df.sparkSession
    if conf_flag(spark, WRITE_FILES_KEY, False):
        appended = append_once_as_files(df, path, app_id, txn_version)
        if appended is not None:
            return appended
    with plans.observing(df, path):
        df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", txn_version).save(path)
    return version(spark, path)


def append_once_as_files(df: DataFrame, path: str, app_id: str, txn_version: int) -> int | None:
    """``append_once`` as a Parquet write into a folder of its own under the table's and one commit; None, with
    nothing committed and the files removed, where the table is partitioned or has another schema (the caller
    appends through Delta)."""
    result = _file_commit(df, path, "appendOnce", app_id, txn_version, STATS_STRING_LENGTH)
    return None if result is None else int(result[0])
