"""scripts/gpu-validate takes its arguments as values, never as code."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from tests.support.sessions import ROOT


def test_the_background_runs_arguments_reach_its_steps_as_values_not_shell_code(tmp_path):
    pwned = tmp_path / "pwned"
    customers = f"1'; touch {pwned}; '"   # pasted into a shell string, this would create the file
    env = {**os.environ, "GPUVAL": str(tmp_path / "state")}
    out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "background", customers], capture_output=True,
                         text=True, timeout=60, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    log = tmp_path / "state" / "results" / "background.log"
    deadline = time.monotonic() + 240   # on this machine (no GPU stack) every step fails at once
    while "BACKGROUND-DONE" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(1)
    assert not pwned.exists()
    assert f"step 'generate {customers}' started" in log.read_text()
    # and its failed steps left nothing running (a step's host sampler once outlived it, sampling forever)
    deadline = time.monotonic() + 20
    while left := processes_with_env("GPUVAL", str(tmp_path / "state")):
        assert time.monotonic() < deadline, left
        time.sleep(1)


def processes_with_env(key: str, value: str) -> list[str]:
    """Command lines of this machine's processes whose environment holds KEY=VALUE."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"{key}={value}".encode() in env.read_bytes().split(b"\0"):
                found.append((env.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:   # gone, or not ours to read
            continue
    return found


def assert_refused(tmp_path, step: str, cases: tuple[tuple[str, str], ...]) -> None:
    """``gpu-validate STEP ARG`` exits 2 with MESSAGE on stderr, for each (ARG, MESSAGE)."""
    env = {**os.environ, "GPUVAL": str(tmp_path / "state")}
    for arg, message in cases:
        out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), step, arg], capture_output=True, text=True,
                             timeout=60, env=env, cwd=ROOT)
        assert out.returncode == 2, out.stderr
        assert message in out.stderr


def test_scale_refuses_sizes_that_are_not_numbers_of_customers_before_it_runs_anything(tmp_path):
    assert_refused(tmp_path, "scale", (("", "scale needs sizes"), ("80000,8e5", "'8e5' is not a number of customers"),
                                       ("0", "'0' is not a number of customers")))
    assert not list((tmp_path / "state").glob("scale-*")), "a refused scale created a size's folder"


def test_ab_refuses_a_wrong_round_count_or_a_missing_baseline_before_it_runs_anything(tmp_path):
    assert_refused(tmp_path, "ab", (("two", "'two' is not a number of rounds"), ("0", "'0' is not a number of rounds"),
                                    ("1", "no baseline code: bundle with scripts/gpu-bundle --baseline COMMIT")))
    assert not (tmp_path / "state" / "results" / "ab").exists(), "a refused ab left results behind"


def test_layouts_refuses_a_wrong_round_count_or_a_missing_input_before_it_runs_anything(tmp_path):
    assert_refused(tmp_path, "layouts", (("x", "'x' is not a number of rounds"),
                                         ("100", "'100' is not a number of rounds"),
                                         ("1", "no input yet: run generate N first")))
    assert not (tmp_path / "state" / "results" / "layouts").exists(), "a refused layouts left results behind"


def test_gpus_refuses_counts_that_are_not_numbers_of_this_hosts_gpus_before_it_runs_anything(tmp_path):
    # This machine has no GPU: every count is more than it has, and none reaches the cluster.
    assert_refused(tmp_path, "gpus", (("", "gpus needs GPU counts"),
                                      ("1,two", "'1' is not a number of GPUs from 1 to this host's 0"),
                                      ("0", "'0' is not a number of GPUs")))
    assert not (tmp_path / "state" / "results" / "gpus").exists(), "a refused gpus left results behind"
    assert not list((tmp_path / "state").glob("worker-*.pid")), "a refused gpus started a worker"


def test_the_executors_keep_the_profiles_java_options_with_the_scripts_own_log4j_file(tmp_path):
    # The executors' options go as one java argument file per side (an --conf here replaces the profile's value
    # whole): base.conf's flags must be in both, gpu.conf's trap limit in the gpu side's only, and the log4j file must
    # be the script's, not the profile's.
    state = tmp_path / "state"
    out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "settings"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "GPUVAL": str(state)}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    cpu_file, gpu_file = state / "executor-java.args", state / "executor-java-gpu.args"
    lines = out.stdout.splitlines()
    assert f"--conf spark.executor.extraJavaOptions=@{cpu_file}" in lines
    assert f"--profile-conf gpu:spark.executor.extraJavaOptions=@{gpu_file}" in lines
    for args_file, trap_limit in ((cpu_file, False), (gpu_file, True)):
        options = args_file.read_text().splitlines()
        assert "-XX:-DontCompileHugeMethods" in options
        assert "-XX:+UseTransparentHugePages" in options
        assert ("-XX:PerMethodTrapLimit=0" in options) == trap_limit
        assert [o for o in options if "log4j2.configurationFile" in o] == [
            f"-Dlog4j2.configurationFile={state}/log4j2-executor.properties"]
        java = subprocess.run(["java", f"@{args_file}", "-version"], capture_output=True, text=True, timeout=60)
        assert java.returncode == 0, java.stderr   # a java launcher takes the file as its options


def test_executor_jfr_adds_a_flight_recording_of_the_executors_first_seconds(tmp_path):
    # EXECUTOR_JFR=S (a sweep line's environment): the executors record their first S seconds into the state folder,
    # which a java launcher given the argument file does; without it, no recording.
    state = tmp_path / "state"
    out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "settings"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "GPUVAL": str(state), "EXECUTOR_JFR": "30"}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    recording = state / "jfr" / "executor.jfr"
    options = (state / "executor-java.args").read_text().splitlines()
    assert options[-2:] == [f"-XX:StartFlightRecording=duration=30s,filename={recording},settings=default",
                            "-XX:+PrintCompilation"]
    recording.parent.mkdir()
    java = subprocess.run(["java", f"@{state / 'executor-java.args'}", "-version"], capture_output=True, text=True,
                          timeout=60)
    assert java.returncode == 0, java.stderr
    assert recording.stat().st_size > 0   # written as the JVM exits, before its 30 s
    plain = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "settings"], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "GPUVAL": str(state)}, cwd=ROOT)
    assert plain.returncode == 0, plain.stderr
    assert not [o for o in (state / "executor-java.args").read_text().splitlines()
                if "FlightRecording" in o or "PrintCompilation" in o]


def test_executor_xx_adds_hotspot_options_to_both_sides_and_a_malformed_list_is_refused(tmp_path):
    # EXECUTOR_XX=A,B (a sweep line's environment): -XX:A -XX:B after the profile's options, so the last one of a flag
    # wins (here HotSpot's default trap limit back on the gpu side); a value that is not such a list stops the run.
    state = tmp_path / "state"
    env = {**os.environ, "GPUVAL": str(state), "EXECUTOR_XX": "PerMethodTrapLimit=100,+UseParallelGC"}
    out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "settings"], capture_output=True, text=True,
                         timeout=60, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    for name in ("executor-java.args", "executor-java-gpu.args"):
        options = (state / name).read_text().splitlines()
        assert options[-2:] == ["-XX:PerMethodTrapLimit=100", "-XX:+UseParallelGC"]
        java = subprocess.run(["java", f"@{state / name}", "-version"], capture_output=True, text=True, timeout=60)
        assert java.returncode == 0, java.stderr
    for bad in ("PerMethodTrapLimit=0 -Xmx1g", "A=1,,B", "-XX:Foo"):
        refused = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "pipeline", "gpu"], capture_output=True,
                                 text=True, timeout=60, env={**env, "EXECUTOR_XX": bad}, cwd=ROOT)
        assert refused.returncode == 2, refused.stderr
        assert f"EXECUTOR_XX={bad} is not HotSpot options" in refused.stderr
    assert not (state / "gpumem-gpu.csv").exists(), "a refused run started its GPU memory sampling"


def test_a_sweep_line_splits_into_spark_settings_and_the_runs_environment(tmp_path):
    """``NAME KEY=VALUE...``: an upper-case KEY is an environment variable of that variant's run (e.g. which stage
    the thread dumps follow), the others are Spark settings. Here every run fails at once (no GPU stack), after
    the sweep has said how it read each line."""
    state = tmp_path / "state"
    (state / "data").mkdir(parents=True)
    (state / "data" / "manifest.json").write_text("{}")
    sweep = tmp_path / "sweep.txt"
    sweep.write_text("# a comment\nplain\nv1 DUMP_STAGE=clean spark.rapids.sql.batchSizeBytes=512m\n"
                     "v2 spark.sql.shuffle.partitions=64 PIPELINE_LIMIT_S=900\n")
    env = {**os.environ, "GPUVAL": str(state)}
    out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "sweep", str(sweep)], capture_output=True,
                         text=True, timeout=120, env=env, cwd=ROOT)
    said = [line for line in out.stdout.splitlines() if re.match(r"gpu-validate: sweep \S+: ", line)]
    assert said == ["gpu-validate: sweep plain: conf/gpu.conf as it is",
                    "gpu-validate: sweep v1:  spark.rapids.sql.batchSizeBytes=512m (environment: DUMP_STAGE=clean)",
                    "gpu-validate: sweep v2:  spark.sql.shuffle.partitions=64 (environment: PIPELINE_LIMIT_S=900)"], out.stdout


def test_a_sweeps_thread_dumps_wait_for_their_own_runs_stage_and_end_with_it(tmp_path):
    """DUMPS=N signals the driver once the run's log says the stage started. A sweep's runs share one log file:
    the previous run's log must not start the next run's dumps at its first JVMs, and dumps still waiting when
    their run ends must end with it (one outlived the sweep, held its lock and failed every step after it)."""
    state = tmp_path / "state"
    (state / "data").mkdir(parents=True)
    (state / "data" / "manifest.json").write_text("{}")
    (state / "results").mkdir()
    (state / "results" / "pipeline-gpu.log").write_text("[pipeline 10:00:00] ingest: start\n")  # an earlier run's
    sweep = tmp_path / "sweep.txt"
    sweep.write_text("first\nsecond\n")
    env = {**os.environ, "GPUVAL": str(state), "DUMPS": "3", "DUMP_STAGE": "ingest"}
    out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "sweep", str(sweep)], capture_output=True,
                         text=True, timeout=120, env=env, cwd=ROOT)
    assert "gpu-validate: sweep second: conf/gpu.conf as it is" in out.stdout, out.stdout + out.stderr
    dumps_log = state / "results" / "stage-dumps.log"
    said = dumps_log.read_text() if dumps_log.exists() else ""
    assert not re.search(r"ingest dump \d", said), said
    deadline = time.monotonic() + 10
    while left := processes_with_env("GPUVAL", str(state)):
        assert time.monotonic() < deadline, left
        time.sleep(1)


def test_a_sweeps_runs_keep_their_executors_start_and_the_whole_logs_pinned_pool_refusals(tmp_path):
    """Each variant keeps its executor's start log (the first 300 lines) and, in executor-start-gpu-NAME.json (which
    sweep.json takes in for a run that reports), its start and pool figures, with the refusals counted over the whole
    log: here 350, past the 300 lines kept. The run fails at once (no GPU stack); the worker's folder is written here
    as a worker writes it."""
    state = tmp_path / "state"
    (state / "data").mkdir(parents=True)
    (state / "data" / "manifest.json").write_text("{}")
    app = state / "work" / "0" / "app-20261207052405-0010" / "0"
    app.mkdir(parents=True)
    refusal = "[  9720][05:24:13:629003][error ] [A][Stream 0][Upstream 33578752B][FAILURE maximum pool size exceeded]"
    (app / "stderr").write_text("\n".join([
        "05:24:06.760 INFO CoarseGrainedExecutorBackend: Started daemon with process name: 9497@vm",
        "05:24:09.282 INFO GpuDeviceManager: Initializing pinned memory pool (4096.0 MiB)",
        "05:24:11.121 INFO GpuDeviceManager: Initializing RMM ASYNC pool size = 63902.5 MB on gpuId 0",
        "05:24:11.311 INFO CoarseGrainedExecutorBackend: Got assigned task 0",
        *[refusal] * 350]) + "\n")
    sweep = tmp_path / "sweep.txt"
    sweep.write_text("only\n")
    out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "sweep", str(sweep)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "GPUVAL": str(state)}, cwd=ROOT)
    results = state / "results"
    kept = (results / "executor-start-gpu-only.log").read_text().splitlines()
    assert kept[-1] == "== pinned pool refusals in the whole log: 350", out.stdout + out.stderr
    assert sum("FAILURE" in line for line in kept) == 296      # 300 lines kept, 4 of them before the refusals
    assert json.loads((results / "executor-start-gpu-only.json").read_text()) == \
        {"first_task_s": 4.551, "pinned_init_s": 1.839, "pinned_refusals": 350}
