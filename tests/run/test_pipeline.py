"""The whole pipeline through its real launchers: compare-profiles runs it under cpu and gpu-explain on the
same small generated input (full parity expected), the report is held to the Delta tables as an independent
reader sees them, the GPU fallback gate holds, and the event log gives each stage its memory peaks."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from jobs.lake import eventlog
from tests.support.sessions import ROOT
from tools import gpu_gate

ENV = {**os.environ, "SKIP_SETUP": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    # A record left by an earlier run into the same output, of a stage this run skips (it reads --input, so it
    # does not generate): the report must not take it for this run's.
    stale = out / "cpu" / "lake" / "_stages"
    stale.mkdir(parents=True)
    (stale / "generate.json").write_text(json.dumps({"stage": "generate", "seconds": 999.0, "counts": {}}))
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
        assert a["generated"] == a["records_in"] > 0 and a["lines"] > a["records_in"] and a["bytes"] > 0
    assert "generate" not in report["timings"], "a stage record from an earlier run passed for this run's"
    assert all(r["ok"] for r in report["quality"]), [r for r in report["quality"] if not r["ok"]]
    runs = _delta(report["tables"]["runs"]["path"]).to_pyarrow_table().to_pylist()
    assert report["model"]["run_id"] in {r["run_id"] for r in runs}
    md = (run / "report" / "report.md").read_text()
    assert f"| predictions | {report['tables']['predictions']['version']} |" in md
    candidates = [line for line in md.splitlines() if line.startswith("| regParam ")]
    assert len(candidates) == 3, candidates   # the default grid: regParam 0, 0.001, 0.01
    chosen = report["model"]["params"]["chosen"]
    assert [line for line in candidates if line.endswith("| yes |")] == [
        line for line in candidates if line.startswith(f"| regParam {chosen['regParam']}, ")], candidates
    work = report["work"]   # from the event log the pipeline was writing while the report ran
    assert set(work) == {"ingest", "clean", "features", "train", "score"}, sorted(work)
    for stage, w in work.items():
        assert w["jobs"] > 0 and w["tasks"] > 0 and w["task_s"] > 0, (stage, w)
        assert 0 <= w["driver_jit_s"] <= w["seconds"] * os.cpu_count(), (stage, w)   # the compilers' share of it
        # the tasks' threads on a CPU: some of their time, never more (each task's run time is whole milliseconds)
        assert 0 < w["cpu_s"] <= w["task_s"] + 0.001 * w["tasks"], (stage, w)
    assert work["ingest"]["driver_jit_s"] > 0, "a fresh driver compiles Spark's code in its first stage"
    assert work["ingest"]["input_bytes"] >= sum(a["bytes"] for a in report["accounting"].values())
    assert work["clean"]["shuffle_write_bytes"] > 0 and work["clean"]["output_rows"] >= sum(
        report["tables"][f"silver_{ds}"]["rows"] for ds in ("customers", "events"))
    assert "## Where the time goes" in md and f"| clean | {work['clean']['seconds']:.1f} | {work['clean']['jobs']:,} |" in md
    assert (f"| {work['clean']['task_s']:.1f} | {work['clean']['cpu_s']:.1f} | {work['clean']['gc_s']:.1f} | "
            f"{work['clean']['driver_jit_s']:.1f} | {work['clean']['idle_s']:.1f} |") in md
    for stage, w in work.items():
        assert 0 <= w["idle_s"] < w["seconds"], (stage, w)   # the driver's own share between the stage's jobs
    longest = report["spark_stages"]
    assert 0 < len(longest) <= 10 and {st["group"] for st in longest} <= set(work), longest
    assert [st["seconds"] for st in longest] == sorted((st["seconds"] for st in longest), reverse=True)
    assert all(st["seconds"] <= work[st["group"]]["seconds"] and st["tasks"] > 0 for st in longest), longest
    assert all(0 <= st["cpu_s"] <= st["task_s"] + 0.001 * st["tasks"] for st in longest), longest
    top = longest[0]
    assert (f"| {top['group']} | {top['stage_id']} | {top['seconds']:.1f} | {top['tasks']:,} | {top['task_s']:.1f} | "
            f"{top['cpu_s']:.1f} |") in md
    page = (run / "report" / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 5  # ROC, PR, lift, coefficients, stage work inlined
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
    memory peaks, so scripts/bench-memory can read them per pipeline stage. The executor samples every 100 ms
    (submit.MEMORY_PEAKS): the long stages of this small run are always sampled; a stage of a few short Spark stages
    can fall between two samples (this run's score did once) and is then left out, not given zeros. The
    processes' resident memory is not sampled unless asked for (each sample starts ``pgrep``): Spark logs it as 0."""
    out, _ = compared
    peaks = eventlog.stage_peaks(eventlog.log_file(out / "cpu" / "eventlog"))
    assert {"ingest", "clean", "train"} <= set(peaks), sorted(peaks)
    for stage in {"ingest", "clean", "features", "train", "score"} & set(peaks):
        p = peaks[stage]
        assert set(p) == set(eventlog.METRICS), (stage, p)
        assert p["JVMHeapMemory"] > 0 and p["JVMOffHeapMemory"] > 0, (stage, p)
        assert all(p[m] == 0 for m in eventlog.PROCESS_METRICS), (stage, p)
    totals = eventlog.task_totals(eventlog.log_file(out / "cpu" / "eventlog"))
    assert all(totals[s]["tasks"] > 0 and totals[s]["run_ms"] > 0 for s in ("ingest", "clean", "train")), totals
