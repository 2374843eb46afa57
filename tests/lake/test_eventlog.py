"""The event log reader (jobs.lake.eventlog) on a hand-made log."""
from __future__ import annotations

import json

from jobs.lake import eventlog


def test_stage_peaks_take_the_maximum_per_job_group(tmp_path):
    """Hand-made event log: job 0 (group ingest) runs stages 0 and 1, job 1 (no group) stage 2, job 2 (group score)
    stage 3, which no sample reached; stage 1 ran on two executors. Peaks are maxima over stages and executors; a
    metric not reported stays out, and so does the unsampled group; task totals are sums over the group's tasks."""
    events = [
        {"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0, 1], "Properties": {"spark.jobGroup.id": "ingest"}},
        {"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [2], "Properties": {}},
        {"Event": "SparkListenerJobStart", "Job ID": 2, "Stage IDs": [3], "Properties": {"spark.jobGroup.id": "score"}},
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 0, "Executor ID": "1",
         "Executor Metrics": {"JVMHeapMemory": 100, "OnHeapExecutionMemory": 10, "MinorGCCount": 3}},
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 1, "Executor ID": "1",
         "Executor Metrics": {"JVMHeapMemory": 300, "OnHeapExecutionMemory": 5}},
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 1, "Executor ID": "2",
         "Executor Metrics": {"JVMHeapMemory": 200, "OnHeapExecutionMemory": 50}},
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 2, "Executor ID": "1",
         "Executor Metrics": {"JVMHeapMemory": 70}},
        # stage 3's tasks ended between two samples: the executor's record is all zeros, no peak
        {"Event": "SparkListenerStageExecutorMetrics", "Stage ID": 3, "Executor ID": "1",
         "Executor Metrics": {"JVMHeapMemory": 0, "JVMOffHeapMemory": 0, "OnHeapExecutionMemory": 0}},
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


def test_stage_work_sums_each_job_groups_tasks(tmp_path):
    """Hand-made log: group clean runs jobs 0 (stages 0, 1) and 1 (stage 2), group features job 2 (stage 3)."""
    def task(stage, run_ms, **metrics):
        return {"Event": "SparkListenerTaskEnd", "Stage ID": stage, "Task Metrics": {
            "Executor Run Time": run_ms, "Executor CPU Time": metrics.get("cpu_ns", 0), "JVM GC Time": 10,
            "Disk Bytes Spilled": metrics.get("spill", 0),
            "Input Metrics": {"Records Read": metrics.get("rows_in", 0), "Bytes Read": metrics.get("bytes_in", 0)},
            "Output Metrics": {"Records Written": metrics.get("rows_out", 0),
                               "Bytes Written": metrics.get("bytes_out", 0)},
            "Shuffle Read Metrics": {"Remote Bytes Read": metrics.get("remote", 0),
                                     "Local Bytes Read": metrics.get("local", 0)},
            "Shuffle Write Metrics": {"Shuffle Bytes Written": metrics.get("shuffled", 0)}}}
    events = [
        {"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0, 1], "Properties": {"spark.jobGroup.id": "clean"}},
        task(0, 2000, cpu_ns=1_500_000_000, rows_in=100, bytes_in=5000, shuffled=700),
        task(0, 1000, cpu_ns=900_000_000, rows_in=50, bytes_in=2500, shuffled=300),
        task(1, 500, cpu_ns=100_000_000, local=600, remote=400, rows_out=140, bytes_out=900, spill=64),
        {"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [2], "Properties": {"spark.jobGroup.id": "clean"}},
        {"Event": "SparkListenerJobStart", "Job ID": 2, "Stage IDs": [3], "Properties": {"spark.jobGroup.id": "features"}},
        task(3, 250, rows_in=140),
        {"Event": "SparkListenerTaskEnd", "Stage ID": 3, "Task Metrics": None},
    ]
    log = tmp_path / "app-2.inprogress"
    # The live log of a running application: its last event only partly flushed, which is left out.
    log.write_text("".join(json.dumps(e) + "\n" for e in events) + json.dumps(task(3, 999))[:40])
    assert eventlog.stage_work(log) == {
        "clean": {"jobs": 2, "tasks": 3, "task_s": 3.5, "cpu_s": 2.5, "gc_s": 0.03, "input_rows": 150,
                  "input_bytes": 7500, "output_rows": 140, "output_bytes": 900, "shuffle_read_bytes": 1000,
                  "shuffle_write_bytes": 1000, "spill_bytes": 64},
        "features": {"jobs": 1, "tasks": 1, "task_s": 0.25, "cpu_s": 0.0, "gc_s": 0.01, "input_rows": 140,
                     "input_bytes": 0, "output_rows": 0, "output_bytes": 0, "shuffle_read_bytes": 0,
                     "shuffle_write_bytes": 0, "spill_bytes": 0},
    }


def test_gpu_operator_time_sums_op_time_per_job_group(tmp_path):
    """Hand-made log: a SQL plan whose GpuProject (op time, accumulator 11) sits on a GpuColumnarToRow (op time 12)
    beside a CPU Project with a timing metric that is not op time (13); adaptive execution re-plans and adds a
    GpuFilter (14). Group clean runs stages 0 and 1, group score stage 2; the cpu stage 3 has no GPU operator.
    Values are nanoseconds; a value that is not a number is skipped."""
    plan = {"nodeName": "GpuColumnarToRow", "metrics": [
                {"name": "op time", "accumulatorId": 12, "metricType": "nsTiming"},
                {"name": "output rows", "accumulatorId": 15, "metricType": "sum"}],
            "children": [{"nodeName": "GpuProject", "metrics": [
                              {"name": "op time", "accumulatorId": 11, "metricType": "nsTiming"}], "children": []},
                         {"nodeName": "Project", "metrics": [
                              {"name": "time in aggregation build", "accumulatorId": 13, "metricType": "timing"}],
                          "children": []}]}
    replan = {"nodeName": "GpuFilter ", "metrics": [{"name": "op time", "accumulatorId": 14, "metricType": "nsTiming"}]}

    def done(stage, *values):
        return {"Event": "SparkListenerStageCompleted", "Stage Info": {
            "Stage ID": stage, "Accumulables": [{"ID": i, "Name": "x", "Value": v} for i, v in values]}}
    events = [
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart", "executionId": 0,
         "sparkPlanInfo": plan},
        {"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0, 1], "Properties": {"spark.jobGroup.id": "clean"}},
        done(0, (11, "3000000000"), (12, "500000000"), (13, "900"), (15, "77")),
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate", "executionId": 0,
         "sparkPlanInfo": replan},
        done(1, (11, "1000000000"), (14, "250000000"), (12, "not a number")),
        {"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [2], "Properties": {"spark.jobGroup.id": "score"}},
        done(2, (12, "2000000000")),
        {"Event": "SparkListenerJobStart", "Job ID": 2, "Stage IDs": [3], "Properties": {"spark.jobGroup.id": "train"}},
        done(3, (13, "5000")),
    ]
    log = tmp_path / "app-3"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert eventlog.gpu_operator_time(log) == {
        "clean": {"gpu_op_s": 4.75, "gpu_transition_s": 0.5,
                  "gpu_operators": {"GpuProject": 4.0, "GpuColumnarToRow": 0.5, "GpuFilter": 0.25}},
        "score": {"gpu_op_s": 2.0, "gpu_transition_s": 2.0, "gpu_operators": {"GpuColumnarToRow": 2.0}},
    }
    assert eventlog.gpu_operator_time(log, top=1)["clean"]["gpu_operators"] == {"GpuProject": 4.0}


def test_longest_stages_and_idle_time_from_a_hand_made_log(tmp_path):
    """Group clean: job 0 submitted at t=1000 ms runs stage 0 (two tasks, 1000-3000 and 1500-2500 ms) and job 1
    stage 1 (one task, 4000-4500 ms), the last job completing at 5000: from 1000 to 5000 ms tasks ran 1000-3000
    and 4000-4500, so 1.5 s with none. Group features: job 2, 6000-6600, stage 2's task 6100-6600 (0.1 s idle).
    Stage 3 was skipped (no submission time). A GpuProject's op time (accumulator 7) in stage 1."""
    def task(stage, launch, finish, run_ms, shuffled=0, cpu_ns=0):
        return {"Event": "SparkListenerTaskEnd", "Stage ID": stage,
                "Task Info": {"Launch Time": launch, "Finish Time": finish},
                "Task Metrics": {"Executor Run Time": run_ms, "Executor CPU Time": cpu_ns,
                                 "Shuffle Write Metrics": {"Shuffle Bytes Written": shuffled}}}

    def stage(sid, name, tasks, submitted=None, completed=None, accumulables=()):
        info = {"Stage ID": sid, "Stage Name": name, "Number of Tasks": tasks,
                "Accumulables": [{"ID": i, "Value": v} for i, v in accumulables]}
        if submitted is not None:
            info.update({"Submission Time": submitted, "Completion Time": completed})
        return {"Event": "SparkListenerStageCompleted", "Stage Info": info}
    plan = {"nodeName": "GpuProject", "metrics": [{"name": "op time", "accumulatorId": 7, "metricType": "nsTiming"}]}
    events = [
        {"Event": "SparkListenerJobStart", "Job ID": 0, "Submission Time": 1000, "Stage IDs": [0],
         "Properties": {"spark.jobGroup.id": "clean"}},
        task(0, 1000, 3000, 1900, shuffled=2048, cpu_ns=1_200_000_000),
        task(0, 1500, 2500, 950, shuffled=1024, cpu_ns=300_000_000),
        stage(0, "count at RowBlocks.java:51", 2, 1000, 3000),
        {"Event": "SparkListenerJobEnd", "Job ID": 0, "Completion Time": 3000},
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart", "sparkPlanInfo": plan},
        {"Event": "SparkListenerJobStart", "Job ID": 1, "Submission Time": 3800, "Stage IDs": [1, 3],
         "Properties": {"spark.jobGroup.id": "clean"}},
        task(1, 4000, 4500, 480, cpu_ns=40_000_000),
        stage(1, "parquet at NativeMethodAccessorImpl.java:0", 1, 3900, 4600, [(7, "2500000000")]),
        stage(3, "skipped", 4),
        {"Event": "SparkListenerJobEnd", "Job ID": 1, "Completion Time": 5000},
        {"Event": "SparkListenerJobStart", "Job ID": 2, "Submission Time": 6000, "Stage IDs": [2],
         "Properties": {"spark.jobGroup.id": "features"}},
        task(2, 6100, 6600, 500),
        stage(2, "parquet at NativeMethodAccessorImpl.java:0", 1, 6050, 6600),
        {"Event": "SparkListenerJobEnd", "Job ID": 2, "Completion Time": 6600},
    ]
    log = tmp_path / "app-4"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert eventlog.idle_time(log) == {"clean": 1.5, "features": 0.1}
    assert eventlog.longest_stages(log) == [
        {"group": "clean", "stage_id": 0, "name": "count at RowBlocks.java:51", "seconds": 2.0, "tasks": 2,
         "task_s": 2.85, "cpu_s": 1.5, "shuffle_write_bytes": 3072, "gpu_operators": {}},
        {"group": "clean", "stage_id": 1, "name": "parquet at NativeMethodAccessorImpl.java:0", "seconds": 0.7,
         "tasks": 1, "task_s": 0.48, "cpu_s": 0.04, "shuffle_write_bytes": 0, "gpu_operators": {"GpuProject": 2.5}},
        {"group": "features", "stage_id": 2, "name": "parquet at NativeMethodAccessorImpl.java:0", "seconds": 0.55,
         "tasks": 1, "task_s": 0.5, "cpu_s": 0.0, "shuffle_write_bytes": 0, "gpu_operators": {}},
    ]
    assert [st["stage_id"] for st in eventlog.longest_stages(log, top=1)] == [0]
