"""The one way a job gets its SparkSession: whatever spark-submit configured (conf/ profiles), nothing added to
it (under a GPU profile it also starts loading the RAPIDS native libraries on the driver and, on a cluster, waits
for an executor with a GPU, or stops saying why none came); the one way a job changes a Spark SQL setting for a
while (``session_conf``); the one way it reads a profile's switch or choice (``conf_flag``, ``conf_choice``); the
one way it loads the project's own data sources (``project_source``); the one way it reaches a path's Hadoop file
system (``hadoop_fs``, ``remove_path``); the one way a small frame that several scans read is kept (``rescanned``);
and the one way it runs independent Spark jobs side by side (``together``)."""
from __future__ import annotations

import contextlib
import gc
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from jobs.core.errors import UserError

T = TypeVar("T")
POOL_KEY = "spark.scheduler.pool"   # the local property naming a thread's scheduler pool
POOL_PREFIX = "together-"           # ``together``'s pools, one per piece of work


def get_spark(app_name: str) -> SparkSession:
    try:
        spark = SparkSession.builder.appName(app_name).getOrCreate()
    except Exception as e:  # py4j's error from the JVM: the context could not start
        raise UserError(start_failure(e)) from None
    try:
        preload_gpu_libraries(spark)
        wait_for_executors(spark)
    except UserError:
        raise
    except Exception:  # the context went down under these first calls: Spark gave up on the master meanwhile
        if not context_stopped(spark):
            raise
        raise master_unreachable(spark) from None
    return spark


def context_stopped(spark: SparkSession) -> bool:
    try:
        return bool(spark.sparkContext._jsc.sc().isStopped())
    except Exception:  # the gateway itself gone
        return False


MASTER_UNREACHABLE = ("the Spark master could not be reached (Spark gave up registering the application after "
                      "its retries): start it, or pass --master the URL its log prints (spark://HOST:PORT)")


def master_unreachable(spark: SparkSession) -> UserError:
    return UserError(f"{MASTER_UNREACHABLE} ({spark.sparkContext.master})")


def start_failure(error: Exception) -> str:
    text = str(error)
    if any(mark in text for mark in ("All masters are unresponsive", "Could not connect to", "Failed to connect",
                                     "Cannot call methods on a stopped SparkContext")):
        return MASTER_UNREACHABLE
    return f"Spark could not start ({text.strip().splitlines()[0][:300]}): check --master and the profile's settings"


EXECUTOR_WAIT_KEY = "spark.churn.executorWaitSeconds"
DEFAULT_EXECUTOR_WAIT_S = 600


def wait_for_executors(spark: SparkSession, poll_s: float = 0.5) -> None:
    """On a cluster, waits until one executor has registered, and stops with one message naming the cause and the
    fix if none has within ``spark.churn.executorWaitSeconds`` (default 600; 0 waits as long as Spark does, i.e.
    for ever).

    A cluster that cannot grant the executor the profile asks for (its GPU, or its cores and memory: a worker
    smaller than the executor) never starts one: Spark itself only logs "Initial job has not accepted any
    resources" every 15 s and the job waits for ever, before its first task. Not checked in local mode, nor with
    dynamic allocation (executors then start only once tasks wait)."""
    conf = spark.sparkContext.getConf()
    if spark.sparkContext._jsc.sc().isLocal() or conf_flag(spark, "spark.dynamicAllocation.enabled", False):
        return
    raw = conf.get(EXECUTOR_WAIT_KEY, str(DEFAULT_EXECUTOR_WAIT_S))
    try:
        limit = float(raw)
    except ValueError:
        raise UserError(f"{EXECUTOR_WAIT_KEY}={raw!r} is not a number of seconds: set it in the profile "
                        f"or with --conf (0 waits for ever)") from None
    deadline = time.monotonic() + limit
    while registered_executors(spark) < 1:
        if context_stopped(spark):  # a standalone master that never answered: Spark gave up
            raise master_unreachable(spark)
        if limit > 0 and time.monotonic() > deadline:
            gpus = float(conf.get("spark.executor.resource.gpu.amount", "0") or "0")
            asked = (f"{conf.get('spark.executor.cores', '1')} cores, "
                     f"{conf.get('spark.executor.memory', '1g')} of memory"
                     + (f" and {gpus:g} GPU (spark.executor.resource.gpu.amount)" if gpus > 0 else ""))
            fix = ("start the workers with GPUs (spark.worker.resource.gpu.amount and a discovery script; README, "
                   "'On a cluster'), free them, or use --profile cpu" if gpus > 0 else
                   "give the workers more (--cores, --memory), ask for less (--conf spark.executor.cores=..., "
                   "spark.executor.memory=...), or free the cluster")
            raise UserError(
                f"no executor started on {spark.sparkContext.master} within {limit:g} s: the profile asks each "
                f"executor for {asked} and no worker has that free: {fix}; {EXECUTOR_WAIT_KEY} sets how long to "
                f"wait")
        time.sleep(poll_s)


def registered_executors(spark: SparkSession) -> int:
    """Executors registered with the driver now (local mode: 0, the driver runs the tasks itself)."""
    jsc = spark.sparkContext._jsc.sc()
    return 0 if jsc.isLocal() else len(jsc.statusTracker().getExecutorInfos()) - 1  # the driver is listed too


def preload_gpu_libraries(spark: SparkSession) -> threading.Thread | None:
    """Where the profile runs SQL on the GPU, starts loading the RAPIDS Accelerator's native libraries (cuDF and
    its JNI) into the driver JVM from a background thread, and returns that thread; otherwise does nothing.

    The plugin loads them on the driver the first time it plans an expression whose GPU version needs a JNI class,
    in the planner, with the query waiting: in the pipeline that was the train stage's split (``xxhash64``), whose
    count then took 8.6-14.6 s instead of 0.4 on an H200 (a driver thread dump showed the planner in
    ``NativeDepsLoader.loadNativeDeps`` from ``jni.Hash``'s static initialiser). Loaded at session start instead,
    it overlaps the job's first stages. A failure is left to the planner to report, where it would anyway."""
    props = {k: spark.conf.get(k, "") or "" for k in ("spark.plugins", "spark.rapids.sql.mode")}
    if not needs_gpu(props):
        return None
    jvm = spark.sparkContext._jvm

    def load() -> None:
        try:
            jvm.ai.rapids.cudf.NativeDepsLoader.loadNativeDeps()  # synchronized, once per JVM
        except Exception:  # the class missing or the libraries failing: the planner meets the same, later
            pass

    thread = threading.Thread(target=load, name="rapids-native-preload", daemon=True)
    thread.start()
    return thread


def uses_rapids(props: dict[str, str]) -> bool:
    """Whether Spark properties load the RAPIDS SQL plugin (so its jar must be on the class path)."""
    return "com.nvidia.spark.SQLPlugin" in props.get("spark.plugins", "")


def needs_gpu(props: dict[str, str]) -> bool:
    """Whether Spark properties execute on a GPU (explain-only mode plans for one but runs on the CPU)."""
    return uses_rapids(props) and props.get("spark.rapids.sql.mode", "executeongpu").lower() != "explainonly"


@contextlib.contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]):
    """Spark SQL settings for the queries run inside the block, restored (or unset) after it."""
    old = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def hadoop_fs(spark: SparkSession, path: str):
    """``(jvm, Path, FileSystem)`` for ``path`` through the session's Hadoop configuration, so local paths, HDFS and
    object stores are listed, read and deleted alike, on the driver and without a Spark job."""
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    return jvm, p, p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def remove_path(spark: SparkSession, path: str) -> None:
    """Deletes what is at ``path`` (a folder with everything in it), if anything is."""
    _, p, fs = hadoop_fs(spark, path)
    if fs.exists(p):
        fs.delete(p, True)


def free_shuffle_files(spark: SparkSession) -> threading.Thread:
    """Asks the driver's JVM to collect its garbage, so that Spark's ContextCleaner deletes the shuffle files
    (and cached blocks) of queries nothing refers to any more. Spark cleans them only once the driver's collector
    finds them unreachable, and a driver with a large heap may not collect for the whole stage
    (``spark.cleaner.periodicGC.interval``: 30 min); until then the files fill the executors' local disks.

    Python's collector first: DataFrames in reference cycles hold their JVM objects until it runs. The JVM learns
    of the objects Python let go of only after its next call from Python (py4j), so it collects twice, half a
    second apart: the first call delivers the releases, the second finds the queries unreachable (back to back,
    the second came too early on a local session).

    On a thread of its own, which this returns, so that the caller's next query is built, planned and run meanwhile:
    the half second and the two collections would otherwise leave the executors idle (docs/etl.md, "Materialised
    frames"). Whoever needs the files gone joins it."""
    jvm = spark.sparkContext._jvm

    def collect() -> None:
        gc.collect()
        jvm.System.gc()
        time.sleep(0.5)
        jvm.System.gc()

    freeing = threading.Thread(target=collect, name="free-shuffle-files", daemon=True)
    freeing.start()
    return freeing


def project_source(reader, source: str, what: str):
    """``reader.load()`` for one of the project's own data sources (``jvm/``, class ``source``), with a missing jar
    said as one line naming the fix instead of Spark's error."""
    try:
        return reader.load()
    except Exception as e:   # py4j's error: the class is not on the session's classpath
        if "DATA_SOURCE_NOT_FOUND" in str(e) or "Failed to find data source" in str(e):
            raise UserError(f"{what} ({source}) is not on this Spark session's classpath: run scripts/setup (it "
                            "builds build/jvm/churn-jvm.jar) and start the session with the jars "
                            "jobs.launch.jars.jars_for names (scripts/submit does)") from None
        raise


def conf_choice(spark: SparkSession, key: str, choices: tuple[str, ...], default: str) -> str:
    """A profile's setting that takes one of ``choices`` (case and surrounding spaces ignored), ``default`` when it is
    unset; any other value stops with one message naming the key and the choices, rather than being read as one."""
    value = spark.conf.get(key, None)
    if value is None:
        return default
    word = value.strip().lower()
    if word not in choices:
        said = "neither true nor false" if set(choices) == {"true", "false"} else f"not one of {', '.join(choices)}"
        raise UserError(f"{key}={value!r} is {said}: set it to one of them in the profile (conf/*.conf)")
    return word


def conf_flag(spark: SparkSession, key: str, default: bool) -> bool:
    """A profile's true/false switch (``conf_choice``)."""
    return conf_choice(spark, key, ("true", "false"), "true" if default else "false") == "true"


def together(work: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Runs independent pieces of work (each one or more Spark jobs, e.g. writes of different tables) from
    threads of their own and returns their results by name, once every one has finished.

    Spark's scheduler shares the cores between the jobs, so a job with fewer tasks than cores (a dataset of a
    few unsplittable CSV files, a small table) no longer leaves the rest idle while it runs. Each thread is a
    PySpark inheritable thread (it carries the caller's job group and local properties) and submits its jobs to a
    scheduler pool of its own (``POOL_PREFIX`` + name): under ``spark.scheduler.mode FAIR`` (base.conf) a piece's
    next job takes the next free core, where first-in-first-out scheduling queues it behind every task another
    piece has already queued (a GPU write's one-task closing job waited 6 s behind the other write's 135 tasks).
    Nothing is left running behind a failure: all pieces finish (or fail) before the first failure, in ``work``'s
    order, is raised; a piece that succeeded stays done, as it would have run one after the other."""
    from pyspark import inheritable_thread_target

    def in_pool(name: str, fn: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            SparkContext.getOrCreate().setLocalProperty(POOL_KEY, POOL_PREFIX + name)   # the session's own
            return fn()
        return run

    with ThreadPoolExecutor(max_workers=max(1, len(work)), thread_name_prefix="together") as pool:
        futures = {name: pool.submit(inheritable_thread_target(in_pool(name, fn))) for name, fn in work.items()}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    if errors:
        raise errors[0]
    return {name: f.result() for name, f in futures.items()}


# How a small frame that several scans read (train's scored validation and test rows, score's probabilities) is kept:
# true (the default, the cpu profile's): cached (``persist()``) and freed after, so gold is read and the model
# applied once; false (the gpu profiles'): not kept, each scan reads gold and applies the model again. Under the
# RAPIDS Accelerator a cache is CPU-side (its scan of one is off with adaptive execution on Spark 3.5), so building
# it copies the rows off the GPU and every scan copies them back, where reading gold again is a GPU Parquet scan.
CACHE_SCORES_KEY = "spark.churn.ml.cacheScores"


@contextlib.contextmanager
def rescanned(df: DataFrame):
    """``df`` for the several scans inside the ``with``, as ``CACHE_SCORES_KEY`` says: cached and unpersisted at the
    end, or the frame itself."""
    if not conf_flag(df.sparkSession, CACHE_SCORES_KEY, True):
        yield df
        return
    cached = df.cache()
    try:
        yield cached
    finally:
        cached.unpersist()


def release(*frames: DataFrame) -> None:
    """Frees the blocks of local checkpoints (``DataFrame.localCheckpoint``) and of frames kept as row blocks
    (``jvm/churn/spark/RowBlocks.java``, clean's) now, not when the driver's garbage collector gets to them; any
    other frame is left as it is. No row passes through Python."""
    for df in frames:
        rdd = df._jdf.queryExecution().analyzed()
        if rdd.getClass().getSimpleName() == "LogicalRDD":
            rdd.rdd().unpersist(True)   # a checkpoint's blocks
            df.sparkSession._jvm.churn.spark.RowBlocks.release(df._jdf)   # row blocks: the RDD under its rows
