"""The resources a run gets and the executor arithmetic on them (docs/advise.md works the cases by hand).

Per node, 1 core and max(1 GiB, 10 %) of the memory stay with the OS and the Spark worker. Under cpu, executors
of 5 cores (4, 6 or 3 when that leaves fewer cores idle), as many as the node's cores allow, its memory split
between them, 10 % of each (at least 384 MiB) as overhead. Under gpu, one executor per GPU with the node's
cores split between its GPUs, every task a 1/cores share of the GPU, a pinned host pool of 1/8 of the executor's
memory (1-8 GiB). On one machine (``local[*]``) the driver runs every task on every core, with the profile's memory.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass

from jobs.core.errors import UserError

MAX_GPUS_PER_NODE = 8          # the largest GPU servers sold (8-way HGX/DGX boards)
CPU_EXECUTOR_CORES = (5, 4, 6, 3)
SHUFFLE_TARGET_BYTES = {"cpu": 128 << 20, "gpu": 512 << 20}   # per shuffle partition (AQE coalesces below)
# The profiles' spark.sql.shuffle.partitions (conf/base.conf): adaptive execution coalesces them to what the data
# needs, so fewer is never advised (measured: 4 instead of 200 on 2 cores made clean at 200k customers 41.6 -> 50.4 s).
PROFILE_SHUFFLE_PARTITIONS = 200


@dataclass(frozen=True)
class Resources:
    nodes: int
    cores_per_node: int
    memory_per_node_gib: float
    gpus: int = 0                  # in all
    gpu_memory_gib: float = 0.0    # per GPU
    gpu_model: str = ""
    local: bool = True             # one machine, local[*], no cluster manager

    @property
    def cores(self) -> int:
        return self.nodes * self.cores_per_node

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes if self.nodes else 0

    def to_json(self) -> dict:
        return asdict(self)


def check(r: Resources) -> Resources:
    """A UserError for resources no cluster can have."""
    if r.nodes < 1:
        raise UserError(f"--nodes {r.nodes}: a run needs at least one node")
    if r.cores_per_node < 1:
        raise UserError(f"{r.cores_per_node} cores per node: a run needs at least one core (--cores / --cores-per-node)")
    if r.memory_per_node_gib <= 0:
        raise UserError(f"{r.memory_per_node_gib:g} GiB of memory per node: give --memory in GiB, more than 0")
    if r.gpus < 0:
        raise UserError(f"--gpus {r.gpus}: give 0 or more")
    if r.gpus:
        if r.gpus % r.nodes:
            raise UserError(f"{r.gpus} GPUs do not split evenly over {r.nodes} nodes: give a multiple of --nodes")
        if r.gpus_per_node > MAX_GPUS_PER_NODE:
            raise UserError(f"{r.gpus} GPUs on {r.nodes} node(s) is {r.gpus_per_node} a node: no server holds more than "
                            f"{MAX_GPUS_PER_NODE}; give more --nodes")
        if r.gpus_per_node > r.cores_per_node - (0 if r.local else 1):
            raise UserError(f"{r.gpus_per_node} GPUs a node with {r.cores_per_node} cores: each GPU's executor needs a "
                            f"core of its own (and one stays with the OS); give more --cores-per-node or fewer --gpus")
        if r.gpu_memory_gib <= 0:
            raise UserError("--gpu-memory: give each GPU's memory in GiB (e.g. 141 for an H200, 80 for an H100)")
    return r


def machine_memory_gib() -> float:
    """This machine's memory (MemTotal), or its container's limit (cgroup v2 ``memory.max``) when lower; 0 if
    neither can be read."""
    mem_gib = 0.0
    try:
        with open("/proc/meminfo") as f:
            mem_gib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal")) / (1 << 20)
    except (OSError, StopIteration, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            mem_gib = min(mem_gib, int(limit) / (1 << 30)) if mem_gib else int(limit) / (1 << 30)
    except OSError:
        pass
    return mem_gib


def detect() -> Resources:
    """This machine: its cores, memory and (nvidia-smi) GPUs."""
    mem_gib = machine_memory_gib()
    gpus, gpu_mem, model = 0, 0.0, ""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
            rows = [line.rsplit(",", 1) for line in out if "," in line]
            gpus = len(rows)
            if rows:
                model, gpu_mem = rows[0][0].strip(), round(float(rows[0][1]) / 1024, 1)
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return Resources(1, os.cpu_count() or 1, round(mem_gib, 1), gpus, gpu_mem, model, True)


@dataclass(frozen=True)
class Layout:
    profile: str
    master: str
    executors: int                 # in all (0 on one machine: the driver runs the tasks)
    executors_per_node: int
    executor_cores: int
    executor_memory_gib: int       # heap
    executor_overhead_gib: int
    driver_memory_gib: int
    task_slots: int
    idle_cores_per_node: int
    shuffle_partitions: int
    task_gpu_amount: float = 0.0
    pinned_pool_gib: int = 0

    def conf(self) -> dict[str, str]:
        """The Spark settings that carry this layout."""
        c = ({} if self.shuffle_partitions == PROFILE_SHUFFLE_PARTITIONS
             else {"spark.sql.shuffle.partitions": str(self.shuffle_partitions)})
        if self.executors:
            c.update({"spark.driver.memory": f"{self.driver_memory_gib}g","spark.executor.instances": str(self.executors),
                      "spark.executor.cores": str(self.executor_cores),
                      "spark.executor.memory": f"{self.executor_memory_gib}g",
                      "spark.executor.memoryOverhead": f"{self.executor_overhead_gib}g"})
        if self.profile == "gpu" and self.executors:    # one machine keeps the profile's pool and GPU share
            c["spark.task.resource.gpu.amount"] = f"{self.task_gpu_amount:.6g}"
            c["spark.rapids.memory.pinnedPool.size"] = f"{self.pinned_pool_gib}g"
            c["spark.executor.resource.gpu.amount"] = "1"
        return c

    def to_json(self) -> dict:
        return {**asdict(self), "conf": self.conf()}


def _usable(r: Resources) -> tuple[int, int]:
    """Cores and whole GiB per node left to Spark."""
    cores = r.cores_per_node if r.local else max(r.cores_per_node - 1, 1)
    mem = r.memory_per_node_gib - max(1.0, 0.1 * r.memory_per_node_gib)
    return cores, max(int(mem), 1)


def shuffle_partitions(profile: str, shuffle_bytes: int, task_slots: int) -> int:
    """The profile's 200, unless every task slot twice, or partitions no larger than the target size, need more:
    then a multiple of the slots."""
    want = max(2 * task_slots, math.ceil(shuffle_bytes / SHUFFLE_TARGET_BYTES[profile]))
    if want <= PROFILE_SHUFFLE_PARTITIONS:
        return PROFILE_SHUFFLE_PARTITIONS
    return task_slots * math.ceil(want / task_slots)


def _split(total_gib: int, overhead_min_gib: int = 1) -> tuple[int, int]:
    """heap, overhead of one executor's memory: 10 % (at least overhead_min) overhead."""
    overhead = max(overhead_min_gib, math.ceil(0.1 * total_gib))
    return max(total_gib - overhead, 1), overhead


def plan(profile: str, r: Resources, shuffle_bytes: int) -> Layout:
    """The executor layout of ``profile`` (cpu or gpu) on ``r``; shuffle_bytes sizes the shuffle partitions."""
    check(r)
    cores, mem = _usable(r)
    if profile == "gpu" and not r.gpus:
        raise UserError("the gpu profile needs a GPU: give --gpus (and --gpu-memory), or choose the cpu profile")
    if r.local:
        slots = r.cores_per_node
        pinned = min(8, max(1, mem // 8)) if profile == "gpu" else 0
        # the driver runs every task, with the launcher's local heap (jobs/launch/submit.py local_driver_memory)
        return Layout(profile, "local[*]", 0, 0, slots, 0, 0, 0, slots, 0,
                      shuffle_partitions(profile, shuffle_bytes, slots),
                      round(1 / slots, 6) if profile == "gpu" else 0.0, pinned)
    if profile == "gpu":
        per = r.gpus_per_node
        exec_cores = cores // per
        total = mem // per
        pinned = min(8, max(1, total // 8))
        heap, overhead = _split(total - pinned)
        slots = exec_cores * r.gpus
        return Layout("gpu", "spark://MASTER:7077", r.gpus, per, exec_cores, heap, overhead + pinned, 8, slots,
                      cores - exec_cores * per, shuffle_partitions("gpu", shuffle_bytes, slots),
                      round(1 / exec_cores, 6), pinned)
    exec_cores = max((c for c in CPU_EXECUTOR_CORES if c <= cores), key=lambda c: (cores // c) * c, default=cores)
    per = cores // exec_cores
    heap, overhead = _split(mem // per)
    slots = exec_cores * per * r.nodes
    return Layout("cpu", "spark://MASTER:7077", per * r.nodes, per, exec_cores, heap, overhead, 8, slots,
                  cores - exec_cores * per, shuffle_partitions("cpu", shuffle_bytes, slots))
