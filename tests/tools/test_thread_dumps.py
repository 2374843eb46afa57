"""tools/thread_dumps.py: a sampling profile from thread dumps, on hand-written dumps and on a live JVM's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.support.sessions import ROOT
from tools import thread_dumps

# Two dumps in the JDK 17 format: two task threads and an unrelated one each time.
DUMPS = '''2026-12-06 10:00:00
Full thread dump OpenJDK 64-Bit Server VM (17.0.9+9 mixed mode, sharing):

"Executor task launch worker for task 0.0 in stage 1.0 (TID 7)" #60 daemon prio=5 os_prio=0 cpu=10.5ms tid=0x1 nid=0x2 runnable
   java.lang.Thread.State: RUNNABLE
\tat churn.ingest.RecordParser.next(RecordParser.java:88)
\tat churn.ingest.CsvSource$RecordReader.next(CsvSource.java:390)
\tat org.apache.spark.sql.execution.datasources.v2.PartitionIterator.hasNext(DataSourceRDD.scala:120)

"Executor task launch worker for task 1.0 in stage 1.0 (TID 8)" #61 daemon prio=5 os_prio=0 tid=0x3 nid=0x4 waiting on condition
   java.lang.Thread.State: WAITING (parking)
\tat jdk.internal.misc.Unsafe.park(java.base@17.0.9/Native Method)
\t- parking to wait for  <0x00000007> (a java.util.concurrent.Semaphore$NonfairSync)
\tat java.util.concurrent.locks.LockSupport.park(java.base@17.0.9/LockSupport.java:211)
\tat com.nvidia.spark.rapids.GpuSemaphore.acquireIfNecessary(GpuSemaphore.scala:99)

"dispatcher-event-loop-1" #30 daemon prio=5 os_prio=0 tid=0x5 nid=0x6 waiting on condition
   java.lang.Thread.State: WAITING (parking)
\tat jdk.internal.misc.Unsafe.park(java.base@17.0.9/Native Method)

2026-12-06 10:00:01
Full thread dump OpenJDK 64-Bit Server VM (17.0.9+9 mixed mode, sharing):

"Executor task launch worker for task 0.0 in stage 1.0 (TID 7)" #60 daemon prio=5 os_prio=0 tid=0x1 nid=0x2 runnable
   java.lang.Thread.State: RUNNABLE
\tat ai.rapids.cudf.HostColumnVector$ColumnBuilder.appendUTF8String(HostColumnVector.java:1200)
\tat com.nvidia.spark.rapids.GpuRowToColumnarExec$$anon$1.next(GpuRowToColumnarExec.scala:700)

"Executor task launch worker for task 1.0 in stage 1.0 (TID 8)" #61 daemon prio=5 os_prio=0 tid=0x3 nid=0x4 runnable
   java.lang.Thread.State: RUNNABLE
\tat churn.ingest.Values.write(Values.java:40)
\tat churn.ingest.CsvSource$RecordReader.next(CsvSource.java:406)
'''


def test_each_task_thread_of_each_dump_is_one_sample_counted_by_state_frame_and_package():
    got = thread_dumps.summary([DUMPS], "Executor task launch worker")
    assert got["dumps"] == 2
    assert got["samples"] == 4
    assert got["states"] == {"RUNNABLE": 3, "WAITING": 1}
    assert got["packages"] == {"churn.ingest": 2, "com.nvidia.spark": 1, "ai.rapids.cudf": 1}
    assert got["runnable_packages"] == {"churn.ingest": 2, "ai.rapids.cudf": 1}
    assert got["top_frames"] == {"churn.ingest.RecordParser.next": 1, "jdk.internal.misc.Unsafe.park": 1,
                                 "ai.rapids.cudf.HostColumnVector$ColumnBuilder.appendUTF8String": 1,
                                 "churn.ingest.Values.write": 1}


def test_a_live_jvms_dumps_after_sigquit_are_read(tmp_path):
    """A JVM that prints its thread dumps on SIGQUIT, as an executor does to its stdout: its main thread is found."""
    source = tmp_path / "Spin.java"
    source.write_text("public class Spin { public static void main(String[] a) { long x = 0; "
                      "while (true) { x += System.nanoTime() & 1; } } }")
    out = tmp_path / "stdout"
    with open(out, "w") as sink:
        proc = subprocess.Popen(["java", str(source)], stdout=sink, stderr=subprocess.DEVNULL)
        try:
            time.sleep(4)   # compiled and running
            for _ in range(3):
                os.kill(proc.pid, signal.SIGQUIT)
                time.sleep(0.5)
        finally:
            proc.kill()
            proc.wait()
    got = subprocess.run([sys.executable, "tools/thread_dumps.py", str(out), "--threads", "main"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    summary = json.loads(got.stdout)
    assert summary["dumps"] == 3
    assert summary["samples"] == 3
    assert summary["states"] == {"RUNNABLE": 3}
    assert summary["runnable_packages"] == {"Spin.main": 3}
