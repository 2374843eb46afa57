"""The event log reader (jobs.run.eventlog) on a hand-made log."""
from __future__ import annotations

import json

from jobs.run import eventlog


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
