"""The foundation: Delta through the test session, the RAPIDS plugin under gpu-explain, a real standalone
cluster, the gradle jars, and the submit script's messages."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import Row
from pyspark.sql.utils import AnalysisException

from jobs import delta_io, generate, jars, launcher, profiles
from sessions import ROOT, run_python
VENV_BIN = Path(sys.executable).parent


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


EXPLAIN_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from sessions import build_session
from jobs import gpu_explain
spark = build_session(sys.argv[2], sys.argv[3], app="explain-probe")
df = spark.sql(QUERY)
rows = [r.asDict() for r in df.orderBy("bucket").collect()]
report = gpu_explain.potential_gpu_plan(df) if sys.argv[2] == "gpu-explain" else ""
print("RESULT " + json.dumps({"rows": rows, "report": report,
      "plugins": spark.conf.get("spark.plugins", ""), "mode": spark.conf.get("spark.rapids.sql.mode", "")}))
"""
QUERY = ("SELECT id % 5 AS bucket, count(*) AS n, sum(id) AS total, "
         "max(regexp_extract(cast(id AS string), '([0-9])$', 1)) AS last_digit "
         "FROM range(1000) GROUP BY id % 5")


def run_probe(profile: str, tmp_path: Path) -> dict:
    code = EXPLAIN_PROBE.replace("QUERY", repr(QUERY))
    stdout = run_python(code, str(ROOT / "tests"), profile, str(tmp_path / profile))
    line = next(l for l in stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow
def test_gpu_explain_profile_loads_the_rapids_plugin_without_a_gpu(spark, tmp_path):
    from jobs import gpu_explain

    got = run_probe("gpu-explain", tmp_path)
    assert got["plugins"] == "com.nvidia.spark.SQLPlugin" and got["mode"] == "explainOnly"
    ops = gpu_explain.operators(got["report"])
    assert {"ShuffleExchangeExec", "RegExpExtract", "Sum"} <= set(ops), got["report"]
    # Same answer as the cpu profile (the fixture session), row for row.
    cpu_rows = [r.asDict() for r in spark.sql(QUERY).orderBy("bucket").collect()]
    assert got["rows"] == cpu_rows
    assert got["rows"][0] == {"bucket": 0, "n": 200, "total": 99500, "last_digit": "5"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


@pytest.fixture
def standalone_cluster(tmp_path):
    """A real Spark standalone master + one worker on 127.0.0.1, from the installed pyspark."""
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "work"),
           "SPARK_LOG_DIR": str(tmp_path / "logs")}
    spark_class = str(VENV_BIN / "spark-class")
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env,
                              stdout=open(tmp_path / "master.log", "w"), stderr=subprocess.STDOUT)
    worker = None
    try:
        wait_for_port(port)
        worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker",
                                   "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
                                   "--webui-port", str(free_port()), f"spark://127.0.0.1:{port}"], env=env,
                                  stdout=open(tmp_path / "worker.log", "w"), stderr=subprocess.STDOUT)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in (worker, master):
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()


@pytest.mark.slow
def test_submit_runs_a_job_on_a_standalone_cluster(standalone_cluster, tmp_path):
    out = subprocess.run([str(ROOT / "scripts" / "submit"), "--profile", "cpu", "--master", standalone_cluster,
                          "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g",
                          "smoke", "--out", str(tmp_path / "smoke"), "--rows", "1000"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # 0 + 1 + ... + 999, over 10 buckets, computed by executors the worker started
    assert result == {"master": standalone_cluster, "version": 0, "rows": 10, "total": 499500}
    assert list((tmp_path / "smoke" / "smoke_totals" / "_delta_log").glob("*.json"))


@pytest.mark.slow
def test_generate_on_a_standalone_cluster_writes_the_bytes_of_a_local_run(standalone_cluster, spark, tmp_path):
    # generate's rows come from its JVM data source: executors in other JVMs need its jar, which submit passes.
    args = dict(customers=300, seed=5, defect_rate=0.1, rows_per_file=1000)
    out = subprocess.run([str(ROOT / "scripts" / "submit"), "--profile", "cpu", "--master", standalone_cluster,
                          "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g", "generate",
                          "--out", str(tmp_path / "cluster"), "--customers", "300", "--seed", "5",
                          "--defect-rate", "0.1", "--rows-per-file", "1000"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 0, out.stderr[-3000:]
    local = generate.run(spark, str(tmp_path / "local"), **args)
    cluster = json.loads((tmp_path / "cluster" / "manifest.json").read_text())
    assert cluster == local and len(local["datasets"]["events"]["files"]) == 4
    for dataset in ("customers", "events"):
        for name in local["datasets"][dataset]["files"]:
            written = (tmp_path / "cluster" / dataset / name).read_bytes()
            assert written == (tmp_path / "local" / dataset / name).read_bytes(), name


@pytest.mark.slow
def test_gpu_profile_on_a_cluster_without_gpus_stops_with_one_message(standalone_cluster, tmp_path):
    # The worker offers no GPU, so Spark never starts an executor for the gpu profile and, left alone, the job
    # would wait for ever before its first task.
    out = subprocess.run([str(ROOT / "scripts" / "submit"), "--profile", "gpu", "--master", standalone_cluster,
                          "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g",
                          "--conf", "spark.churn.gpu.executorWaitSeconds=8",
                          "smoke", "--out", str(tmp_path / "smoke"), "--rows", "1000"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 2, out.stderr[-3000:]
    # spark-submit passes the Python driver's stderr on through its stdout
    errors = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no executor started" in errors[0] and "within 8 s" in errors[0], out.stdout[-3000:]
    assert "spark.worker.resource.gpu.amount" in errors[0] and "--profile cpu" in errors[0]
    assert not (tmp_path / "smoke").exists()  # stopped before the job wrote anything


def test_gradle_jars_are_exactly_the_pins_and_a_second_run_fetches_nothing():
    names = sorted(p.name for p in jars.JARS_DIR.iterdir())
    assert names == sorted([*jars.DELTA_JARS, jars.RAPIDS_JAR])
    built = [*jars.JARS_DIR.iterdir(), jars.GENERATOR_JAR]
    before = {p: p.stat().st_mtime_ns for p in built}
    out = subprocess.run(["gradle", "--offline", "--console=plain", "jars", "generatorJar"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ":jars UP-TO-DATE" in out.stdout and ":generatorJar UP-TO-DATE" in out.stdout
    assert {p: p.stat().st_mtime_ns for p in built} == before


@pytest.mark.parametrize("args, message", [
    (["--profile", "turbo", "smoke"], "unknown profile 'turbo': choose one of cpu, gpu, gpu-explain"),
    (["--profile", "cpu", "fly"], "unknown job 'fly'"),
    (["--profile", "gpu", "smoke", "--out", "x"], "profile 'gpu' runs on NVIDIA GPUs, but this machine has none"),
    (["--conf", "novalue", "smoke"], "--conf 'novalue' is not key=value"),
])
def test_submit_refuses_bad_invocations_with_one_line(args, message):
    out = subprocess.run([str(ROOT / "scripts" / "submit"), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


LOCAL_GPU_PROFILE_JOB = """
import json, sys
from pyspark.sql import SparkSession
b = SparkSession.builder.master("local[2]")
for k, v in json.loads(sys.argv[1]).items():
    b = b.config(k, v)
print("rows", b.getOrCreate().range(1000).repartition(4).count())
"""


def test_the_gpu_profile_under_a_local_master_asks_tasks_for_no_gpu_share():
    """Local mode offers its tasks no GPU resource, so a task asking for 1/8 of a GPU is never scheduled:
    ``scripts/pipeline --profile gpu`` on one GPU machine waited for ever at its first stage (H200, run 8).
    submit drops the requests for a local master and keeps them for a cluster; a real local Spark with the
    profile's settings, the plugin aside (this machine has no GPU), then runs its jobs."""
    gpu = profiles.load_profile("gpu")
    assert launcher.for_master(gpu, "spark://127.0.0.1:7077") == gpu
    assert gpu["spark.task.resource.gpu.amount"] == "0.125"
    local = launcher.for_master(gpu, "local[2]")
    assert set(gpu) - set(local) == set(launcher.LOCAL_MODE_DROPPED)
    job = {k: v for k, v in local.items() if k not in ("spark.plugins", "spark.kryo.registrator")}
    job["spark.driver.memory"] = "1g"
    job["spark.jars"] = ",".join(str(j) for j in jars.jars_for(rapids=False))   # the profile's Delta catalog
    # Before the fix this job never finished: the process outlived the timeout and the test failed.
    assert "rows 1000" in run_python(LOCAL_GPU_PROFILE_JOB, json.dumps(job), timeout=180)


def test_missing_jars_name_the_fix(tmp_path):
    with pytest.raises(jars.MissingJarsError, match="Run scripts/setup") as e:
        jars.jars_for(rapids=True, jars_dir=tmp_path / "jars")
    assert "churn-generate.jar" in str(e.value) and jars.RAPIDS_JAR in str(e.value)


def test_profiles_merge_base_and_share_rapids_settings():
    cpu, gpu, explain = (profiles.load_profile(p) for p in ("cpu", "gpu", "gpu-explain"))
    assert cpu["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert not profiles.uses_rapids(cpu)
    assert profiles.needs_gpu(gpu) and not profiles.needs_gpu(explain) and profiles.uses_rapids(explain)
    assert gpu["spark.sql.files.maxPartitionBytes"] == "512m"  # rapids.conf overrides base
    assert gpu["spark.executor.resource.gpu.discoveryScript"] == str(ROOT / "conf" / "get-gpus-resources.sh")
    shared = profiles.read_conf(ROOT / "conf" / "rapids.conf")
    assert all(explain[k] == v == gpu[k] for k, v in shared.items())


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


def _scan_file_indexes(df) -> list[str]:
    """The class of each file scan's file index in ``df``'s physical plan."""
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves().iterator()
    found = []
    while leaves.hasNext():
        node = leaves.next()
        if node.nodeName().endswith("FileSourceScanExec") or node.nodeName().startswith("Scan"):
            found.append(node.relation().location().getClass().getSimpleName())
    return found


@pytest.mark.parametrize("value, default, expected", [
    (None, True, True), (None, False, False), ("false", True, False), (" TRUE ", False, True), ("False", True, False),
])
def test_profile_switches_read_true_or_false_and_default_when_unset(spark, value, default, expected):
    from jobs.session import conf_flag, session_conf

    key = "spark.churn.test.switch"
    with session_conf(spark, {} if value is None else {key: value}):
        assert conf_flag(spark, key, default) is expected


def test_a_profile_switch_neither_true_nor_false_names_its_key(spark):
    from jobs.errors import UserError
    from jobs.session import conf_flag, session_conf

    with session_conf(spark, {"spark.churn.clean.persist": "flase"}):
        with pytest.raises(UserError, match=r"spark.churn.clean.persist='flase' is neither true nor false"):
            conf_flag(spark, "spark.churn.clean.persist", True)


def test_together_runs_spark_jobs_side_by_side_and_raises_only_after_all_finish(spark):
    import threading

    from jobs.session import together

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


def test_gpu_libraries_are_preloaded_only_where_sql_runs_on_the_gpu(spark):
    from types import SimpleNamespace

    from jobs.session import preload_gpu_libraries

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
