"""The launchers (jobs.launch.submit): scripts/submit refusing bad invocations with one line, the gpu profile under
a local master, a real standalone cluster (a job, generate, the gpu profile without GPUs), and scripts/pipeline
stopping bad invocations before anything is written."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from jobs.launch import jars, profiles, settings, submit
from jobs.stages import generate
from tests.support.sessions import ROOT, run_python

VENV_BIN = Path(sys.executable).parent
ENV = {**os.environ, "SKIP_SETUP": "1", "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("args, message", [
    (["--profile", "turbo", "tools/smoke.py"], "unknown profile 'turbo': choose one of cpu, gpu, gpu-explain"),
    (["--profile", "cpu", "fly"], "unknown job 'fly'"),
    (["--profile", "gpu", "tools/smoke.py", "--out", "x"],
     "profile 'gpu' runs on NVIDIA GPUs, but this machine has none"),
    (["--conf", "novalue", "tools/smoke.py"], "--conf 'novalue' is not key=value"),
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
    assert submit.for_master(gpu, "spark://127.0.0.1:7077") == gpu
    assert gpu["spark.task.resource.gpu.amount"] == "0.125"
    local = submit.for_master(gpu, "local[2]")
    assert set(gpu) - set(local) == set(submit.LOCAL_MODE_DROPPED)
    job = {k: v for k, v in local.items() if k not in ("spark.plugins", "spark.kryo.registrator")}
    job["spark.driver.memory"] = "1g"
    job["spark.jars"] = ",".join(str(j) for j in jars.jars_for(rapids=False))   # the profile's Delta catalog
    # Before the fix this job never finished: the process outlived the timeout and the test failed.
    assert "rows 1000" in run_python(LOCAL_GPU_PROFILE_JOB, json.dumps(job), timeout=180)


def test_a_gpu_request_given_with_conf_under_a_local_master_is_refused_with_the_fix(tmp_path):
    """Given by hand, a task's GPU share under local[...] failed Spark's start with a stack trace ("No executor
    resource configs were specified for the following task configs: gpu"): it stops before Spark with one line. On a
    cluster the same setting passes through."""
    for key in ("spark.task.resource.gpu.amount", "spark.executor.resource.gpu.amount"):
        with pytest.raises(submit.SubmitError) as e:
            submit.spark_submit_command("gpu-explain", "local[2]", "tools/smoke.py", [], [f"{key}=0.0625"], tmp_path)
        assert str(e.value).startswith(f"{key} asks for GPUs per task or executor, which local mode (local[2]) "
                                       "cannot grant: drop it")
    on_cluster = submitted_properties(tmp_path, "gpu-explain", "spark://127.0.0.1:7077",
                                      "spark.task.resource.gpu.amount=0.0625")
    assert on_cluster["spark.task.resource.gpu.amount"] == "0.0625"


def submitted_properties(tmp_path, profile: str, master: str, *conf: str) -> dict[str, str]:
    """The Spark properties scripts/submit would hand spark-submit (its --properties-file, and its --jars as
    ``--jars``), nothing run."""
    cmd, *_ = submit.spark_submit_command(profile, master, "tools/smoke.py", [], list(conf), tmp_path)
    return {**profiles.read_conf(Path(cmd[cmd.index("--properties-file") + 1])),
            "--jars": cmd[cmd.index("--jars") + 1]}


def test_the_rapids_shuffle_manager_gets_the_plugins_jar_on_both_class_paths_on_a_cluster_only(tmp_path, monkeypatch):
    """Spark creates its shuffle manager before the jars of --jars are loaded, so the gpu profile's RAPIDS shuffle
    manager needs the plugin's jar on the driver's and executors' own class paths; a class path given keeps its
    place after it; under a local master the profile keeps Spark's own shuffle; a shim of another Spark stops
    with one message naming this Spark's class."""
    monkeypatch.setattr(jars, "NATIVES_DIR", tmp_path / "no-natives")   # as on a machine without a GPU
    jar = str(jars.JARS_DIR / jars.RAPIDS_JAR)
    on_cluster = submitted_properties(tmp_path, "gpu", "spark://127.0.0.1:7077")
    assert on_cluster["spark.shuffle.manager"] == "com.nvidia.spark.rapids.spark355.RapidsShuffleManager"
    assert on_cluster["spark.rapids.shuffle.mode"] == "MULTITHREADED"
    assert on_cluster["spark.driver.extraClassPath"] == jar
    assert on_cluster["spark.executor.extraClassPath"] == jar
    # ... and not in --jars as well: every executor fetched its 600 MB from the driver as it started (0.9 s on an
    # H200 host) and then warned of the plugin's jar found twice
    assert jars.RAPIDS_JAR not in on_cluster["--jars"] and "delta-spark" in on_cluster["--jars"]
    given = submitted_properties(tmp_path, "gpu", "spark://127.0.0.1:7077", "spark.executor.extraClassPath=/opt/x.jar")
    assert given["spark.executor.extraClassPath"] == f"{jar}:/opt/x.jar"
    local = submitted_properties(tmp_path, "gpu-explain", "local[2]")
    assert "spark.shuffle.manager" not in local and "spark.driver.extraClassPath" not in local
    assert jar in local["--jars"].split(",")
    # a user's own --conf naming it is kept there, with the class path it needs (gpu-validate's LOCAL_CONF)
    asked = submitted_properties(tmp_path, "gpu-explain", "local[2]",
                                 "spark.shuffle.manager=com.nvidia.spark.rapids.spark355.RapidsShuffleManager")
    assert asked["spark.shuffle.manager"] == "com.nvidia.spark.rapids.spark355.RapidsShuffleManager"
    assert asked["spark.driver.extraClassPath"] == jar
    cpu = submitted_properties(tmp_path, "cpu", "spark://127.0.0.1:7077")
    assert "spark.shuffle.manager" not in cpu and "spark.executor.extraClassPath" not in cpu
    with pytest.raises(submit.SubmitError) as e:
        submitted_properties(tmp_path, "gpu", "spark://127.0.0.1:7077",
                             "spark.shuffle.manager=com.nvidia.spark.rapids.spark350.RapidsShuffleManager")
    assert str(e.value) == ("spark.shuffle.manager com.nvidia.spark.rapids.spark350.RapidsShuffleManager is the RAPIDS "
                            "shuffle manager for another Spark than this one (3.5.5): set it to "
                            "com.nvidia.spark.rapids.spark355.RapidsShuffleManager")


def test_the_natives_jar_goes_first_on_both_class_paths_where_a_gpu_runs_and_is_built(tmp_path, monkeypatch):
    """Under gpu the natives jar, once built, comes before the plugin's jar on the driver's and
    executors' class paths, so cuDF copies its libraries out of it; spark.churn.rapids.nativesJar=false, a profile
    that runs no GPU (gpu-explain, cpu), a jar not built or one older than the plugin's leave the class paths as they
    were."""
    plugin = str(jars.JARS_DIR / jars.RAPIDS_JAR)
    monkeypatch.setattr(jars, "NATIVES_DIR", tmp_path / "natives")
    cluster = "spark://127.0.0.1:7077"
    assert submitted_properties(tmp_path, "gpu", cluster)["spark.executor.extraClassPath"] == plugin   # not built
    natives = jars.natives_jar()
    natives.parent.mkdir()
    with zipfile.ZipFile(natives, "w") as z:   # what submit looks at is the file; its entries: tests/launch/test_jars.py
        z.writestr("amd64/Linux/libcudf.so", b"\x7fELF")
    gpu = submitted_properties(tmp_path, "gpu", cluster, "spark.executor.extraClassPath=/opt/x.jar")
    assert gpu["spark.driver.extraClassPath"] == f"{natives}:{plugin}"
    assert gpu["spark.executor.extraClassPath"] == f"{natives}:{plugin}:/opt/x.jar"
    # older than the plugin's jar (a new plugin jar, not set up again): another build's libraries, so left out
    os.utime(natives, (0, 0))
    assert submitted_properties(tmp_path, "gpu", cluster)["spark.executor.extraClassPath"] == plugin
    os.utime(natives)
    off = submitted_properties(tmp_path, "gpu", cluster, "spark.churn.rapids.nativesJar=false")
    assert off["spark.driver.extraClassPath"] == off["spark.executor.extraClassPath"] == plugin
    explain = submitted_properties(tmp_path, "gpu-explain", cluster)
    assert str(natives) not in explain.get("spark.executor.extraClassPath", "") + explain["--jars"]
    assert "spark.executor.extraClassPath" not in submitted_properties(tmp_path, "cpu", cluster)


def test_local_mode_gives_the_driver_half_the_machines_memory_but_never_less_than_the_profile():
    """Under local[*] the driver is the one executor; worked by hand: 24 GiB -> 12g over the cpu profile's 6g,
    8 GiB -> the profile's 6g stands, a cluster master keeps the profile's, a --conf still wins."""
    cpu = profiles.load_profile("cpu")
    assert cpu["spark.driver.memory"] == "6g"
    assert submit.local_driver_memory(cpu, 24.0) == {"spark.driver.memory": "12g"}
    assert submit.local_driver_memory(cpu, 23.5) == {"spark.driver.memory": "11g"}
    assert submit.local_driver_memory(cpu, 8.0) == {}
    assert submit.local_driver_memory({"spark.driver.memory": "6144m"}, 13.9) == {}    # 6 GiB is not above 6g
    assert submit.local_driver_memory({}, 2.5) == {}                                   # Spark's default 1g
    assert submit.local_driver_memory({}, 4.2) == {"spark.driver.memory": "2g"}
    assert [submit.memory_gib(v) for v in ("6g", "6144m", "6144", "2T", "1048576k", "8G", "512mb")] == \
        [6.0, 6.0, 6.0, 2048.0, 1.0, 8.0, 0.5]
    assert submit.for_master(cpu, "spark://127.0.0.1:7077")["spark.driver.memory"] == "6g"
    local = submit.for_master(cpu, "local[*]")
    assert submit.memory_gib(local["spark.driver.memory"]) >= 6.0
    assert settings.check(local, ["spark.driver.memory=2g"])["spark.driver.memory"] == "2g"


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
def standalone_cluster(tmp_path, request):
    """A real Spark standalone master + workers on 127.0.0.1, from the installed pyspark: one of two cores, or
    (parametrized indirectly with 2) two of one core each, where an application gets one executor per worker: the
    layout of one executor per GPU on a host of two GPUs."""
    count = getattr(request, "param", 1)
    port, ui = free_port(), free_port()
    # spark-class finds Spark's jars through PYSPARK_PYTHON's pyspark (the README's commands set it too).
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(tmp_path / "work"),
           "SPARK_LOG_DIR": str(tmp_path / "logs")}
    spark_class = str(VENV_BIN / "spark-class")
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env,
                              stdout=open(tmp_path / "master.log", "w"), stderr=subprocess.STDOUT)
    workers = []
    try:
        wait_for_port(port)
        for i in range(count):
            workers.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker",
                                             "--host", "127.0.0.1", "--cores", str(2 // count), "--memory", "2g",
                                             "--webui-port", str(free_port()), f"spark://127.0.0.1:{port}"], env=env,
                                            stdout=open(tmp_path / f"worker-{i}.log", "w"), stderr=subprocess.STDOUT))
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in (*workers, master):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.mark.slow
def test_submit_runs_a_job_on_a_standalone_cluster(standalone_cluster, tmp_path):
    out = subprocess.run([str(ROOT / "scripts" / "submit"), "--profile", "cpu", "--master", standalone_cluster,
                          "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g",
                          "tools/smoke.py", "--out", str(tmp_path / "smoke"), "--rows", "1000"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # 0 + 1 + ... + 999, over 10 buckets, computed by executors the worker started
    assert result == {"master": standalone_cluster, "version": 0, "rows": 10, "total": 499500}
    assert list((tmp_path / "smoke" / "smoke_totals" / "_delta_log").glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("standalone_cluster", [2], indirect=True)
def test_generate_on_a_standalone_cluster_writes_the_bytes_of_a_local_run_and_ingest_reads_them_all(standalone_cluster, spark, tmp_path):
    # generate's rows come from its JVM data source: executors in other JVMs need its jar, which submit passes.
    args = dict(customers=300, seed=5, defect_rate=0.1, rows_per_file=1000)
    out = subprocess.run([str(ROOT / "scripts" / "submit"), "--profile", "cpu", "--master", standalone_cluster,
                          "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g", "generate",
                          "--out", str(tmp_path / "cluster"), "--customers", "300", "--seed", "5",
                          "--defect-rate", "0.1", "--rows-per-file", "1000"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 0, out.stderr[-3000:]
    local = generate.STAGE(spark, str(tmp_path / "local"), **args).extra["manifest"]
    cluster = json.loads((tmp_path / "cluster" / "manifest.json").read_text())
    assert cluster == local and len(local["datasets"]["events"]["files"]) == 4
    for dataset in ("customers", "events"):
        for name in local["datasets"][dataset]["files"]:
            written = (tmp_path / "cluster" / dataset / name).read_bytes()
            assert written == (tmp_path / "local" / dataset / name).read_bytes(), name

    # ingest's CSV reader is a JVM data source too (the same jar): its pre-pass and splits run in the executors,
    # one per worker
    out = subprocess.run([str(ROOT / "scripts" / "submit"), "--profile", "cpu", "--master", standalone_cluster,
                          "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g", "ingest",
                          "--input", str(tmp_path / "cluster"), "--lake", str(tmp_path / "lake")],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 0, out.stderr[-3000:]
    files = json.loads((tmp_path / "lake" / "_stages" / "ingest.json").read_text())["counts"]["files"]
    for dataset in ("customers", "events"):
        generated = {name: f["records"] for name, f in local["datasets"][dataset]["files"].items()}
        assert {name: f["records"] for name, f in files[dataset].items()} == generated
        bronze = spark.read.format("delta").load(str(tmp_path / "lake" / "bronze" / dataset))
        assert bronze.count() == sum(generated.values())
        assert bronze.select("source_file", "record_number").distinct().count() == sum(generated.values())
    ingest_app = max((tmp_path / "work").glob("app-*"))   # the workers' folder: one per application, one per executor
    assert len([d for d in ingest_app.iterdir() if d.is_dir()]) == 2


def smoke_on(cluster: str, tmp_path, *options: str) -> list[str]:
    """The smoke job submitted to ``cluster`` with ``options``, waiting 8 s for an executor: it must stop with exit
    status 2 and write nothing; returns its error lines (spark-submit passes the driver's stderr through stdout)."""
    out = subprocess.run([str(ROOT / "scripts" / "submit"), *options, "--master", cluster,
                          "--conf", "spark.driver.memory=1g", "--conf", "spark.churn.executorWaitSeconds=8",
                          "tools/smoke.py", "--out", str(tmp_path / "smoke"), "--rows", "1000"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 2, out.stderr[-3000:]
    assert not (tmp_path / "smoke").exists()  # stopped before the job wrote anything
    errors = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stdout[-3000:]
    return errors


@pytest.mark.slow
def test_gpu_profile_on_a_cluster_without_gpus_stops_with_one_message(standalone_cluster, tmp_path):
    # The worker offers no GPU, so Spark never starts an executor for the gpu profile and, left alone, the job
    # would wait for ever before its first task.
    error, = smoke_on(standalone_cluster, tmp_path, "--profile", "gpu", "--conf", "spark.executor.memory=1g")
    assert "no executor started" in error and "within 8 s" in error
    assert "spark.worker.resource.gpu.amount" in error and "--profile cpu" in error


def test_a_cluster_too_small_for_the_cpu_profiles_executor_stops_with_one_message(standalone_cluster, tmp_path):
    # The worker has 2 GiB: an executor of 8 GiB is never started, and Spark alone would wait for ever.
    error, = smoke_on(standalone_cluster, tmp_path, "--conf", "spark.executor.memory=8g")
    assert "no executor started" in error and "8g of memory" in error and "give the workers more" in error


@pytest.mark.parametrize("args, message", [
    (["--profile", "turbo"], "unknown profile 'turbo'"),
    (["--customers", "0"], "--customers 0: need at least 1 customer"),
    (["--customers", "10"], "--customers 10: the pipeline needs at least 500 customers"),
    (["--conf", "spark.churn.clean.materialse=false"], "did you mean spark.churn.clean.materialise?"),
    (["--input", "/nonexistent/csv"], "--input /nonexistent/csv: no such folder"),
    (["--out", "{blocker}/out"], "is not writable"),
    (["--profile", "auto", "--master", "spark://127.0.0.1:7077"], "--profile auto plans one machine"),
])
def test_bad_pipeline_invocations_stop_before_writing(tmp_path, args, message):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    args = [a.replace("{blocker}", str(blocker)) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "run")]
    proc = subprocess.run([sys.executable, "-m", "jobs.launch", "pipeline", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=ENV)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "run" / "lake").exists() and not (tmp_path / "run" / "data").exists()


def test_profile_auto_says_what_it_chose_and_submits_that_profile(tmp_path):
    # No GPU on a test machine: the advisor's only candidate is cpu; for this size the profile's settings stand.
    proc = subprocess.run([sys.executable, "-m", "jobs.launch", "pipeline", "--profile", "auto", "--dry-run",
                           "--customers", "2000", "--out", str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**ENV, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("pipeline: --profile auto:")]
    assert len(said) == 1 and said[0].startswith("pipeline: --profile auto: cpu (estimated "), proc.stderr
    assert "spark-submit" in proc.stdout and "pipeline --customers 2000" in proc.stdout


@pytest.mark.slow
def test_an_unreachable_master_ends_with_one_line_once_spark_gives_up(tmp_path):
    # Nothing listens on the port: Spark's client retries its registration for about a minute, then gives up.
    out = subprocess.run([str(ROOT / "scripts" / "submit"), "--master", f"spark://127.0.0.1:{free_port()}",
                          "tools/smoke.py", "--out", str(tmp_path / "smoke")],
                         capture_output=True, text=True, timeout=240, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    # The application's own output (Python's stdout and stderr) reaches spark-submit's stdout; Spark's log its stderr.
    assert out.returncode == 2, f"{out.stdout[-3000:]}\n--- spark-submit's stderr:\n{out.stderr[-1500:]}"
    errors = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the Spark master could not be reached" in errors[0], (out.stdout + out.stderr)[-3000:]
    assert "Traceback" not in out.stdout + out.stderr
    assert not (tmp_path / "smoke").exists()


def test_a_bad_header_in_the_input_stops_the_pipeline_before_anything_is_created(tmp_path):
    from tests.support.etl_inputs import CUSTOMERS_HEADER, good_customer_line, write_input

    inp = write_input(tmp_path / "in", CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n",
                      {"events-00000.csv": "event_id,oops\nE1,x\n"})
    proc = subprocess.run([sys.executable, "-m", "jobs.launch", "pipeline", "--input", inp, "--as-of", "2026-06-30",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=ENV)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "events-00000.csv: header 'event_id,oops' does not match" in lines[0], proc.stderr
    assert not (tmp_path / "run" / "eventlog").exists() and not (tmp_path / "run" / "lake").exists()


def test_the_readmes_cluster_commands_start_a_master_and_worker_from_a_plain_shell(tmp_path):
    """The two spark-class lines of the README, run exactly as written from the repository root by a shell with
    nothing of the project's in its environment."""
    commands = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()
                if ".venv/bin/spark-class org.apache.spark.deploy." in line and not line.startswith("`")]
    assert len(commands) == 2 and "Master" in commands[0] and "Worker" in commands[1], commands
    plain = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "SPARK_LOG_DIR": str(tmp_path),
             "SPARK_WORKER_DIR": str(tmp_path / "work")}
    started = []
    try:
        for cmd, name in zip(commands, ("master", "worker")):
            log = open(tmp_path / f"{name}.log", "w")
            started.append(subprocess.Popen(["bash", "-c", cmd], cwd=ROOT, env=plain, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True))
            if name == "master":
                wait_for_port(7077)
        deadline = time.monotonic() + 90
        while "Successfully registered with master" not in (tmp_path / "worker.log").read_text():
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            assert all(p.poll() is None for p in started), (tmp_path / "master.log").read_text()[-3000:]
            time.sleep(0.5)
    finally:
        for p in started:
            os.killpg(p.pid, 15)
            p.wait(timeout=30)
