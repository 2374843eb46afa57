"""tools/jfr_frames.py: task threads' frames and their compiled state, from hand-written samples in the JSON the JDK's
jfr tool prints, and from a live JVM's flight recording."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.support.sessions import ROOT
from tools import jfr_frames


def frame(cls: str, method: str, kind: str) -> dict:
    return {"method": {"type": {"name": cls}, "name": method}, "lineNumber": 1, "bytecodeIndex": 0, "type": kind}


def sample(at: str, thread: str, *frames: dict) -> dict:
    return {"type": "jdk.ExecutionSample",
            "values": {"startTime": at, "sampledThread": {"javaName": thread}, "state": "STATE_RUNNABLE",
                       "stackTrace": {"truncated": False, "frames": list(frames)}}}


PARSE = frame("churn/ingest/RecordParser", "next", "JIT compiled")
LOOP_SLOW = frame("com/nvidia/spark/rapids/RowToColumnarIterator", "buildBatch", "Interpreted")
LOOP_FAST = frame("com/nvidia/spark/rapids/RowToColumnarIterator", "buildBatch", "JIT compiled")
TASK = "Executor task launch worker for task 0.0 in stage 1.0 (TID 7)"
# Three task samples (two in the first 2 s, one 2.5 s after the first) and one of another thread, which is left out.
PRINTED = {"recording": {"events": [
    sample("2026-12-07T03:03:40.100000000Z", TASK, PARSE, LOOP_SLOW),
    sample("2026-12-07T03:03:41.000000000Z", TASK, LOOP_SLOW, frame("java/lang/Thread", "run", "Interpreted")),
    sample("2026-12-07T03:03:42.600000000Z", TASK, PARSE, LOOP_FAST),
    sample("2026-12-07T03:03:40.000000000Z", "dispatcher-event-loop-1", LOOP_SLOW),
]}}


def test_samples_are_windowed_from_the_first_task_sample_with_their_top_and_innermost_interpreted_frames():
    got = jfr_frames.summary(PRINTED, "Executor task launch worker", 2.0, 10)
    assert got["samples"] == 3
    first, second = got["windows"]
    # The loop is the innermost interpreted frame of both early samples: one frame under the parse, then on top.
    assert first == {"from_s": 0.0, "samples": 2, "top_interpreted": 0.5,
                     "top": [["churn.ingest.RecordParser.next", "JIT compiled", 1],
                             ["com.nvidia.spark.rapids.RowToColumnarIterator.buildBatch", "Interpreted", 1]],
                     "innermost_interpreted": [["com.nvidia.spark.rapids.RowToColumnarIterator.buildBatch", 2, 0.5]]}
    assert second == {"from_s": 2.0, "samples": 1, "top_interpreted": 0.0,
                      "top": [["churn.ingest.RecordParser.next", "JIT compiled", 1]], "innermost_interpreted": []}
    assert got["top_frames"][0] == ["churn.ingest.RecordParser.next", "JIT compiled", 2]
    assert got["innermost_interpreted"] == [["com.nvidia.spark.rapids.RowToColumnarIterator.buildBatch", 2, 0.5]]


def test_no_matching_thread_gives_an_empty_summary():
    got = jfr_frames.summary(PRINTED, "nobody", 2.0, 10)
    assert got["samples"] == 0 and got["windows"] == [] and got["innermost_interpreted"] == []


def test_a_live_jvms_recording_is_read_with_the_jdks_jfr_tool(tmp_path):
    """A JVM spinning in its main method for 3 s, recorded from its start: its main thread's samples are found, and
    the spinning method is among their top frames."""
    source = tmp_path / "Spin.java"
    source.write_text("public class Spin { public static void main(String[] a) { long x = 1, end = System.nanoTime() "
                      "+ 3_000_000_000L; while (System.nanoTime() < end) { for (int i = 0; i < 1_000_000; i++) "
                      "{ x = x * 6364136223846793005L + 1442695040888963407L; } } System.out.println(x); } }")
    recording = tmp_path / "spin.jfr"
    subprocess.run(["java", f"-XX:StartFlightRecording=filename={recording},settings=default", str(source)],
                   capture_output=True, check=True, timeout=120)
    got = subprocess.run([sys.executable, "tools/jfr_frames.py", str(recording), "--threads", "main"], cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=120)
    summary = json.loads(got.stdout)
    assert summary["samples"] > 10
    assert "Spin.main" in {method for method, _, _ in summary["top_frames"]}
    assert all(0.0 <= w["top_interpreted"] <= 1.0 for w in summary["windows"])
    assert all(isinstance(m, str) and n > 0 and depth >= 0 for m, n, depth in summary["innermost_interpreted"])
