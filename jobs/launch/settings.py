"""Spark settings checked before Spark starts: Spark ignores a property it does not know, so a misspelt key would
pass without a word and the run would use the default. An unknown ``spark.churn.*`` key (the project's own) is an
error naming the nearest known key; a ``spark.*`` key that is not known but close to one is a warning naming it."""
from __future__ import annotations

import difflib
import sys

from jobs.core.errors import UserError
from jobs.lake.delta_io import FILES_AS_PARQUET_KEY, READ_COMMIT_FILES_KEY, WRITE_FILES_KEY
from jobs.lake.session import CACHE_SCORES_KEY, EXECUTOR_WAIT_KEY
from jobs.launch.classes import CLASS_ARCHIVE_KEY
from jobs.launch.jars import NATIVES_JAR_KEY
from jobs.launch.jit import GENERATED_C1_KEY
from jobs.ml.estimators import FLOAT32_INPUTS_KEY, IMPLEMENTATION_KEY, ONE_PARTITION_KEY
from jobs.stages.clean import LOOKUP_KEY, MATERIALISE_KEY
from jobs.stages.features import COUNT_WITH_WRITE_KEY
from jobs.stages.ingest import COLUMNAR_KEY, GPU_BATCH_KEY, RAPIDS_SQL_KEY

PROJECT_PREFIX = "spark.churn."
# Every setting the project's code reads.
PROJECT_KEYS = (CACHE_SCORES_KEY, CLASS_ARCHIVE_KEY, COLUMNAR_KEY, COUNT_WITH_WRITE_KEY, EXECUTOR_WAIT_KEY,
                FILES_AS_PARQUET_KEY, FLOAT32_INPUTS_KEY, GENERATED_C1_KEY, GPU_BATCH_KEY, IMPLEMENTATION_KEY,
                LOOKUP_KEY, MATERIALISE_KEY, NATIVES_JAR_KEY, ONE_PARTITION_KEY, RAPIDS_SQL_KEY, READ_COMMIT_FILES_KEY,
                WRITE_FILES_KEY)
# Spark properties users set most, beside the profiles' own keys: the candidates a near miss is matched against.
COMMON_SPARK_KEYS = (
    "spark.app.name", "spark.master", "spark.submit.deployMode",
    "spark.driver.memory", "spark.driver.cores", "spark.driver.maxResultSize", "spark.driver.extraJavaOptions",
    "spark.executor.memory", "spark.executor.cores", "spark.executor.instances", "spark.executor.memoryOverhead",
    "spark.executor.extraJavaOptions", "spark.executor.resource.gpu.amount", "spark.task.resource.gpu.amount",
    "spark.task.cpus", "spark.cores.max", "spark.default.parallelism", "spark.memory.fraction",
    "spark.memory.storageFraction", "spark.memory.offHeap.enabled", "spark.memory.offHeap.size",
    "spark.local.dir", "spark.jars", "spark.jars.packages", "spark.files", "spark.submit.pyFiles",
    "spark.eventLog.enabled", "spark.eventLog.dir", "spark.ui.enabled", "spark.ui.port",
    "spark.dynamicAllocation.enabled", "spark.dynamicAllocation.minExecutors", "spark.dynamicAllocation.maxExecutors",
    "spark.shuffle.service.enabled", "spark.network.timeout", "spark.serializer", "spark.kryoserializer.buffer.max",
    "spark.sql.shuffle.partitions", "spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes",
    "spark.sql.adaptive.enabled", "spark.sql.adaptive.coalescePartitions.enabled",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes", "spark.sql.autoBroadcastJoinThreshold",
    "spark.sql.session.timeZone", "spark.sql.execution.arrow.pyspark.enabled",
    "spark.sql.execution.arrow.maxRecordsPerBatch", "spark.sql.warehouse.dir",
    "spark.sql.sources.partitionOverwriteMode", "spark.python.worker.memory", "spark.python.worker.reuse",
    "spark.pyspark.python", "spark.pyspark.driver.python",
    "spark.rapids.sql.enabled", "spark.rapids.sql.concurrentGpuTasks", "spark.rapids.memory.pinnedPool.size",
    "spark.rapids.sql.explain", "spark.rapids.sql.mode", "spark.rapids.sql.batchSizeBytes",
)


def check(props: dict[str, str], overrides: list[str]) -> dict[str, str]:
    """``overrides`` (``--conf key=value``) applied over the profile's ``props``, after checking every key;
    warnings go to stderr."""
    merged = dict(props)
    for kv in overrides:
        key, sep, value = kv.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--conf {kv!r} is not key=value")
        merged[key.strip()] = value
    known = set(PROJECT_KEYS) | set(COMMON_SPARK_KEYS) | set(props)
    for key in merged:
        if key in known:
            continue
        if key.startswith(PROJECT_PREFIX):
            near = nearest(key, PROJECT_KEYS)
            raise UserError(f"unknown setting {key}" + (f": did you mean {near}?" if near else "")
                            + f" (the project's settings: {', '.join(sorted(PROJECT_KEYS))})")
        near = nearest(key, known)
        if near:
            print(f"warning: Spark does not know {key} and will ignore it: did you mean {near}?", file=sys.stderr)
    return merged


def nearest(key: str, candidates) -> str | None:
    found = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.85)
    return found[0] if found else None
