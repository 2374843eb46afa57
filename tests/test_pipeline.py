"""The whole pipeline through its real launchers: compare-profiles runs it under cpu and gpu-explain on the
same small generated input (full parity expected), the report is held to the Delta tables as an independent
reader sees them, the GPU fallback gate holds, and bad invocations stop before anything is written."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jobs import eventlog, gpu_gate
from sessions import ROOT, run_python
ENV = {**os.environ, "SKIP_SETUP": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    proc = subprocess.run(
        [str(ROOT / "scripts" / "compare-profiles"), "--profiles", "cpu,gpu-explain", "--customers", "600",
         "--out", str(out), "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=4",
         "--conf", "spark.driver.memory=2g", "--conf", "spark.ui.showConsoleProgress=false"],
        capture_output=True, text=True, timeout=1500, env=ENV, cwd=ROOT)
    return out, proc


@pytest.mark.slow
def test_cpu_and_gpu_explain_runs_agree_fully(compared):
    out, proc = compared
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads((out / "comparison.json").read_text())
    assert result["parity"] is True
    expected_tables = {"bronze_customers", "bronze_events", "quarantine", "silver_customers", "silver_events",
                       "gold_features", "predictions"}
    assert expected_tables <= set(result["tables"])
    assert all(t["parity"] and t["rows"][0] == t["rows"][1] > 0 for t in result["tables"].values())
    assert result["model"]["parity"] and result["model"]["roc_auc"][0] == result["model"]["roc_auc"][1]
    # Both runs fit with MLlib on the same rows: every customer's probability and decile are the same, to the
    # last bits of floating-point sums. gpu-explain's clean recomputes its frames instead of persisting them
    # (conf/gpu-explain.conf), so silver's rows reach the features' per-customer sums in another order: gold
    # differs by ~3e-14 (usage_amount_90d), which MLlib's fit at tol 1e-10 carries to ~3e-10 in probability.
    predictions = result["model"]["predictions"]
    assert predictions["rows"] == predictions["matched"] > 0 and predictions["same_decile_share"] == 1.0
    assert predictions["max_abs_diff"] < 1e-8
    assert set(result["timings"]) >= {"ingest", "clean", "features", "train", "score"}


def _delta(path: str):
    from deltalake import DeltaTable

    return DeltaTable(path)


@pytest.mark.slow
def test_report_numbers_equal_the_delta_tables(compared):
    out, proc = compared
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = out / "cpu"
    report = json.loads((run / "report" / "report.json").read_text())
    for name, t in report["tables"].items():
        table = _delta(t["path"])  # the Rust reader, independent of Spark
        assert table.version() == t["version"], name
        assert table.to_pyarrow_table().num_rows == t["rows"], name
    q = _delta(report["tables"]["quarantine"]["path"]).to_pyarrow_table(columns=["dataset", "reason"]).to_pylist()
    counted: dict = {}
    for r in q:
        counted.setdefault(r["dataset"], {}).setdefault(r["reason"], 0)
        counted[r["dataset"]][r["reason"]] += 1
    assert report["quarantine"] == counted
    for ds, a in report["accounting"].items():
        assert a["balanced"], (ds, a)
        assert a["kept"] == report["tables"][f"silver_{ds}"]["rows"]
    assert all(r["ok"] for r in report["quality"]), [r for r in report["quality"] if not r["ok"]]
    runs = _delta(report["tables"]["runs"]["path"]).to_pyarrow_table().to_pylist()
    assert report["model"]["run_id"] in {r["run_id"] for r in runs}
    md = (run / "report" / "report.md").read_text()
    assert f"| predictions | {report['tables']['predictions']['version']} |" in md
    page = (run / "report" / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 4  # ROC, PR, lift, coefficients inlined
    assert list((run / "eventlog").iterdir()), "Spark event log kept for the history server"


@pytest.mark.slow
def test_every_gpu_fallback_is_allow_listed(compared):
    out, _ = compared
    fallbacks = json.loads((out / "gpu-explain" / "report" / "gpu-fallbacks.json").read_text())
    assert fallbacks["collected"] is True
    assert set(fallbacks["stages"]) >= {"ingest", "clean", "features", "score"}
    assert gpu_gate.unexpected(fallbacks["stages"], gpu_gate.load_allowlist()) == []
    report_md = (out / "gpu-explain" / "report" / "report.md").read_text()
    assert "## What would not run on the GPU" in report_md


@pytest.mark.slow
def test_the_event_log_gives_each_pipeline_stage_its_memory_peaks(compared):
    """The pipeline's jobs carry their stage's name as job group and its event log keeps every Spark stage's
    memory peaks, so scripts/bench-memory can read them per pipeline stage."""
    out, _ = compared
    peaks = eventlog.stage_peaks(eventlog.log_file(out / "cpu" / "eventlog"))
    assert {"ingest", "clean", "features", "train", "score", "report"} <= set(peaks), sorted(peaks)
    for stage in ("ingest", "clean", "features", "train", "score"):
        p = peaks[stage]
        assert set(p) == set(eventlog.METRICS), (stage, p)   # process-tree metrics included
        assert 0 < p["JVMHeapMemory"] <= p["ProcessTreeJVMRSSMemory"], (stage, p)
    totals = eventlog.task_totals(eventlog.log_file(out / "cpu" / "eventlog"))
    assert all(totals[s]["tasks"] > 0 and totals[s]["run_ms"] > 0 for s in ("ingest", "clean", "train")), totals


def test_stage_peaks_take_the_maximum_per_job_group(tmp_path):
    """Hand-made event log: job 0 (group ingest) runs stages 0 and 1, job 1 (no group) stage 2; stage 1 ran on
    two executors. Peaks are maxima over stages and executors; a metric not reported stays out; task totals are
    sums over the group's tasks."""
    events = [
        {"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0, 1], "Properties": {"spark.jobGroup.id": "ingest"}},
        {"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [2], "Properties": {}},
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 0, "Executor ID": "1",
         "Executor Metrics": {"JVMHeapMemory": 100, "OnHeapExecutionMemory": 10, "MinorGCCount": 3}},
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 1, "Executor ID": "1",
         "Executor Metrics": {"JVMHeapMemory": 300, "OnHeapExecutionMemory": 5}},
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 1, "Executor ID": "2",
         "Executor Metrics": {"JVMHeapMemory": 200, "OnHeapExecutionMemory": 50}},
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 2, "Executor ID": "1",
         "Executor Metrics": {"JVMHeapMemory": 70}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 0, "Task Metrics": {
            "Executor Run Time": 1000, "JVM GC Time": 20, "Memory Bytes Spilled": 0, "Disk Bytes Spilled": 0}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 1, "Task Metrics": {
            "Executor Run Time": 500, "JVM GC Time": 5, "Memory Bytes Spilled": 4096, "Disk Bytes Spilled": 1024}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 2, "Task Metrics": None},   # a failed task reports none
    ]
    log = tmp_path / "app-1"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert eventlog.stage_peaks(log) == {"ingest": {"JVMHeapMemory": 300, "OnHeapExecutionMemory": 50},
                                         eventlog.NO_GROUP: {"JVMHeapMemory": 70}}
    assert eventlog.task_totals(log) == {"ingest": {"tasks": 2, "run_ms": 1500, "gc_ms": 25,
                                                    "spilled_memory_bytes": 4096, "spilled_disk_bytes": 1024}}
    assert eventlog.log_file(tmp_path) == log


GATE_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from sessions import build_session
from pyspark.sql import functions as F
from jobs import clean, gpu_explain, gpu_gate
spark = build_session("gpu-explain", sys.argv[2], app="gate-probe")
collector = gpu_explain.PlanCollector.for_session(spark)
# Built from range, not local rows: createDataFrame's RDD scan would itself be a (harmless) fallback.
df = spark.range(2).select(F.when(F.col("id") == 0, " month-TO-month ").otherwise("Two year").alias("contract_type"))
# Deliberately GPU-unfriendly: a JVM reflection call has no GPU version. (A Python UDF is not a fallback
# here: the plugin runs its exec and moves the data as Arrow, only the UDF body stays in Python.)
shout = lambda c: F.expr(f"reflect('java.lang.String', 'valueOf', {c})")
with collector.stage("clean"):
    gpu_explain.observe(df.withColumn("c", F.upper(F.trim("contract_type"))), "built-ins")
    built_ins = list(collector.by_stage["clean"])
    gpu_explain.observe(df.withColumn("c", shout("contract_type")), "with-udf")
bad = gpu_gate.unexpected(collector.by_stage, gpu_gate.load_allowlist())
print("RESULT " + json.dumps({"built_ins": built_ins, "unexpected": bad}))
"""


@pytest.mark.slow
def test_the_gate_catches_a_transform_that_gains_a_fallback(tmp_path):
    stdout = run_python(GATE_PROBE, str(ROOT / "tests"), str(tmp_path))
    got = json.loads(next(l for l in stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert got["built_ins"] == []  # trim/upper run on the GPU: nothing to report
    names = {f["name"] for f in got["unexpected"]}
    assert got["unexpected"] and all(f["target"] == "with-udf" and f["stage"] == "clean" for f in got["unexpected"])
    assert "CallMethodViaReflection" in names, got["unexpected"]


@pytest.mark.parametrize("args, message", [
    (["--profile", "turbo"], "unknown profile 'turbo'"),
    (["--customers", "0"], "--customers 0: need at least 1 customer"),
    (["--input", "/nonexistent/csv"], "--input /nonexistent/csv: no such folder"),
    (["--out", "{blocker}/out"], "is not writable"),
])
def test_bad_pipeline_invocations_stop_before_writing(tmp_path, args, message):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    args = [a.replace("{blocker}", str(blocker)) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "run")]
    proc = subprocess.run([sys.executable, "-m", "jobs.pipeline_launcher", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=ENV)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "run" / "lake").exists() and not (tmp_path / "run" / "data").exists()


def test_prediction_agreement_compares_customer_by_customer(spark, tmp_path):
    from jobs import compare, delta_io

    schema = "customer_id string, churn_probability double, decile int, run_id string"
    left = [("a", 0.1, 1, "r1"), ("b", 0.5, 5, "r1"), ("c", 0.9, 10, "r1"), ("a", 0.7, 7, "old")]
    right = [("a", 0.1, 1, "r2"), ("b", 0.52, 6, "r2"), ("c", 0.9, 10, "r2"), ("d", 0.3, 3, "r2")]
    for side, rows in (("l", left), ("r", right)):
        delta_io.overwrite(spark.createDataFrame(rows, schema), delta_io.table_path(str(tmp_path / side), "predictions"))
    got = compare.prediction_agreement(spark, str(tmp_path / "l"), str(tmp_path / "r"), ("r1", "r2"))
    # The "old" slice on the left is not compared; d is only on the right: 4 rows, 3 matched.
    assert (got["rows"], got["matched"]) == (4, 3)
    assert got["max_abs_diff"] == pytest.approx(0.02) and got["mean_abs_diff"] == pytest.approx(0.02 / 3)
    assert got["same_decile_share"] == pytest.approx(2 / 3) and got["max_decile_step"] == 1
    # d is missing on the left and b's probability is 0.02 off: no parity.
    assert len(compare.compare_predictions(got)) == 2


def test_a_decile_may_move_by_one_at_its_edge_when_probabilities_agree():
    from jobs import compare

    edge = {"rows": 3, "matched": 3, "max_abs_diff": 2.1e-7, "mean_abs_diff": 1e-8, "same_decile_share": 2 / 3,
            "max_decile_step": 1}
    assert compare.compare_predictions(edge) == []
    assert compare.compare_predictions({**edge, "max_decile_step": 2}) == [
        "a customer's decile differs by 2 (at most 1 at a decile's edge)"]
    assert compare.compare_predictions({**edge, "max_abs_diff": 2e-6}) == [
        "probability differs by up to 2e-06 (tolerance 1e-06)"]
    # The predictions table's exact checksum leaves decile to that check; other tables keep theirs.
    left = {"__rows": 3, "decile": {"kind": "exact", "nulls": 0, "checksum": "1"}}
    right = {"__rows": 3, "decile": {"kind": "exact", "nulls": 0, "checksum": "2"}}
    assert compare.compare_profiles(left, right, compare.DERIVED_COLUMNS["predictions"]) == []
    assert compare.compare_profiles(left, right) != []
