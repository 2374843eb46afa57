"""The session helpers (jobs.lake.session): profile switches, Spark jobs side by side, the GPU libraries' preload."""
from __future__ import annotations

import time

import pytest
from pyspark.sql import functions as F


@pytest.mark.parametrize("value, default, expected", [
    (None, True, True), (None, False, False), ("false", True, False), (" TRUE ", False, True), ("False", True, False),
])
def test_profile_switches_read_true_or_false_and_default_when_unset(spark, value, default, expected):
    from jobs.lake.session import conf_flag, session_conf

    key = "spark.churn.test.switch"
    with session_conf(spark, {} if value is None else {key: value}):
        assert conf_flag(spark, key, default) is expected


def test_a_profile_switch_neither_true_nor_false_names_its_key(spark):
    from jobs.core.errors import UserError
    from jobs.lake.session import conf_flag, session_conf

    with session_conf(spark, {"spark.churn.clean.materialise": "flase"}):
        with pytest.raises(UserError, match=r"spark.churn.clean.materialise='flase' is neither true nor false"):
            conf_flag(spark, "spark.churn.clean.materialise", True)


@pytest.mark.parametrize("setting, cached", [(None, True), ("true", True), ("false", False)])
def test_a_frame_rescanned_is_cached_for_its_scans_only_where_the_profile_says(spark, setting, cached):
    from jobs.lake.session import CACHE_SCORES_KEY, rescanned, session_conf

    df = spark.range(50).withColumn("p", F.col("id") / 50)
    with session_conf(spark, {} if setting is None else {CACHE_SCORES_KEY: setting}):
        with rescanned(df) as kept:
            assert kept.is_cached is cached
            assert [kept.count(), kept.where(F.col("p") >= 0.5).count()] == [50, 25]
        assert not kept.is_cached   # freed as the scans end


def test_free_shuffle_files_deletes_the_shuffle_files_of_a_finished_query(spark):
    """Spark keeps a query's shuffle files until the driver's garbage collector finds the query unreachable; after
    free_shuffle_files's thread they go within seconds (clean's files mode relies on it at 500M records)."""
    from pathlib import Path

    from jobs.lake.session import free_shuffle_files

    dirs = [Path(d.getPath()) for d in spark.sparkContext._jvm.org.apache.spark.SparkEnv.get().blockManager()
            .diskBlockManager().localDirs()]

    def shuffle_files() -> set[str]:
        return {str(f) for d in dirs for f in d.rglob("shuffle_*.data")}

    before = shuffle_files()
    rows = spark.range(20000).repartition(7, "id").selectExpr("id % 5 AS k").groupBy("k").count().collect()
    assert sorted(r["count"] for r in rows) == [4000] * 5
    made = shuffle_files() - before
    assert made, "the query wrote no shuffle file: nothing to test"
    # Spark's cleaner thread deletes them, one cleanup after another: in a session that has run many queries (this
    # test process) it first works through every other object the collection freed, so it is given time, and asked
    # again, but never left to its own schedule (every 30 minutes).
    deadline = time.monotonic() + 120
    while made & shuffle_files() and time.monotonic() < deadline:
        freeing = free_shuffle_files(spark)
        assert freeing.daemon   # never holds the process up at its end
        freeing.join()
        pause = time.monotonic() + 15
        while made & shuffle_files() and time.monotonic() < pause:
            time.sleep(0.2)
    assert not made & shuffle_files(), "the finished query's shuffle files are still there"


def test_together_runs_spark_jobs_side_by_side_and_raises_only_after_all_finish(spark):
    import threading

    from jobs.lake.session import together

    started, release = threading.Event(), threading.Event()
    seen = {}

    def slow_count():
        started.set()
        assert release.wait(60), "the other piece never ran while this one was running"
        seen["local_property"] = spark.sparkContext.getLocalProperty("churn.test")
        return spark.range(1000).count()

    def quick_count():
        assert started.wait(60)
        n = spark.range(10).count()  # runs while slow_count is still waiting: the pieces overlap
        release.set()
        return n

    spark.sparkContext.setLocalProperty("churn.test", "from the caller")
    try:
        assert together({"slow": slow_count, "quick": quick_count}) == {"slow": 1000, "quick": 10}
    finally:
        spark.sparkContext.setLocalProperty("churn.test", None)
    assert seen["local_property"] == "from the caller"

    finished = []

    def fails():
        raise ValueError("first piece broke")

    def succeeds():
        time.sleep(0.5)
        finished.append(spark.range(5).count())
        return 5

    with pytest.raises(ValueError, match="first piece broke"):
        together({"fails": fails, "succeeds": succeeds})
    assert finished == [5]  # the other piece was not abandoned half-way


def test_together_runs_each_pieces_jobs_in_a_scheduler_pool_of_its_own(spark):
    """Under base.conf's fair scheduling, a piece's jobs go to its own pool (so a small job of one piece is not
    queued behind another piece's tasks); the caller's jobs stay in the default pool. Read back from the scheduler's
    own record of each stage (the status store the Spark UI shows)."""
    from jobs.lake.session import POOL_KEY, together

    sc = spark.sparkContext
    assert sc.getConf().get("spark.scheduler.mode") == "FAIR"
    tag = f"pools-{time.time_ns()}"

    def counted(name: str, rows: int):
        def piece():
            sc.setJobDescription(f"{tag}-{name}")
            return spark.range(rows).count()
        return piece

    assert together({"left": counted("left", 10), "right": counted("right", 20)}) == {"left": 10, "right": 20}
    sc.setJobDescription(f"{tag}-caller")
    try:
        assert spark.range(30).count() == 30
    finally:
        sc.setJobDescription(None)
    assert sc.getLocalProperty(POOL_KEY) is None   # the caller's thread was never moved to a pool

    pools: dict[str, set] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:   # the status store follows the scheduler's events a moment later
        pools = {}
        gateway = sc._gateway
        stages = sc._jsc.sc().statusStore().stageList(None, False, False, gateway.new_array(gateway.jvm.double, 0),
                                                       gateway.jvm.java.util.ArrayList())
        for i in range(stages.size()):
            stage = stages.apply(i)
            description = stage.description().get() if stage.description().isDefined() else ""
            if description.startswith(tag):
                pools.setdefault(description[len(tag) + 1:], set()).add(stage.schedulingPool())
        if len(pools) == 3:
            break
        time.sleep(0.2)
    assert pools == {"left": {"together-left"}, "right": {"together-right"}, "caller": {"default"}}


def test_gpu_libraries_are_preloaded_only_where_sql_runs_on_the_gpu(spark):
    from types import SimpleNamespace

    from jobs.lake.session import preload_gpu_libraries

    assert preload_gpu_libraries(spark) is None  # the test session: no RAPIDS plugin

    def session_with(conf: dict):  # the real JVM (no RAPIDS jar on this class path), another profile's settings
        return SimpleNamespace(conf=SimpleNamespace(get=lambda k, d=None: conf.get(k, d)),
                               sparkContext=spark.sparkContext)

    plugin = {"spark.plugins": "com.nvidia.spark.SQLPlugin"}
    assert preload_gpu_libraries(session_with({**plugin, "spark.rapids.sql.mode": "explainOnly"})) is None
    thread = preload_gpu_libraries(session_with({**plugin, "spark.rapids.sql.mode": "executeOnGpu"}))
    assert thread is not None and thread.daemon
    thread.join(30)
    assert not thread.is_alive()  # the missing class is swallowed: the planner reports such problems itself


def test_row_blocks_keep_every_row_and_the_partitioning_and_release_frees_them(spark):
    """clean's kept frames (jvm/churn/spark/RowBlocks.java): rows packed into blocks of 64 bytes here, so a
    partition spans many blocks, a row of 200 bytes gets a block of its own and some partitions are empty. Expected
    rows written by hand; the kept frame has its source's partitions (each k in one); release frees its blocks."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F
    from jobs.lake.session import release

    rows = [(1, "a", None, 1.5), (2, None, "x" * 200, None), (1, "bb", "y", -0.25), (3, "", "z", 0.0),
            (2, "c\u00e9", None, 2.0)]
    df = spark.createDataFrame(rows, "k int, s string, t string, d double").repartition(7, "k")
    jvm = spark.sparkContext._jvm
    before = jvm.scala.collection.JavaConverters.mapAsJavaMap(spark.sparkContext._jsc.sc().getPersistentRDDs()).size()
    kept = DataFrame(jvm.churn.spark.RowBlocks.keep(df._jdf, 64), spark)
    assert sorted(kept.collect(), key=lambda r: (r.k, r.s or "")) == [
        (1, "a", None, 1.5), (1, "bb", "y", -0.25), (2, None, "x" * 200, None), (2, "c\u00e9", None, 2.0),
        (3, "", "z", 0.0)]
    # the source's partitions, in order: each key's rows in one partition still
    assert kept.rdd.getNumPartitions() == 7
    assert sorted(kept.groupBy(F.spark_partition_id().alias("p")).agg(F.countDistinct("k").alias("keys"),
                                                                       F.count(F.lit(1)).alias("rows"))
                  .select("keys", "rows").collect()) == [(1, 1), (1, 2), (1, 2)]
    persisted = jvm.scala.collection.JavaConverters.mapAsJavaMap(spark.sparkContext._jsc.sc().getPersistentRDDs())
    assert persisted.size() == before + 1
    release(kept)
    after = jvm.scala.collection.JavaConverters.mapAsJavaMap(spark.sparkContext._jsc.sc().getPersistentRDDs())
    assert after.size() == before


def test_a_long_chain_of_arithmetic_is_refused_as_it_is_analysed_and_a_balanced_sum_is_not(spark):
    # RAPIDS 25.04 plans a chain of ~44 additions on the GPU for ever (NVIDIA/spark-rapids#13224); the gpu profiles'
    # sessions and every test session refuse a chain over 16 (conf/rapids.conf, tests/support/sessions.py).
    from py4j.protocol import Py4JJavaError

    from jobs.ml.estimators import balanced_sum

    df = spark.range(3).select(F.col("id").cast("double").alias("x"))
    terms = [F.col("x") * F.lit(float(k)) for k in range(1, 101)]   # x * (1 + ... + 100) = 5050 x
    chained_16 = sum(terms[1:16], terms[0])                          # 15 additions over the products: 16 deep
    assert [r[0] for r in df.select(chained_16).collect()] == [0.0, 136.0, 272.0]
    assert [r[0] for r in df.select(balanced_sum(terms)).collect()] == [0.0, 5050.0, 10100.0]
    with pytest.raises(Py4JJavaError, match=r"nests 100 arithmetic operations in one chain \(more than 16\)"):
        df.select(sum(terms[1:], terms[0]).alias("s"))               # refused as the frame is built, no job run
