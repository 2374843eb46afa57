"""The recommendation: each candidate profile's layout and estimated stage times on the given resources, the
fastest chosen, and the factors behind it in plain lines (docs/advise.md).

Estimates use the calibration host closest to the target (same GPU model first, then the nearest number of cores
per node, the machine ``--calibrate`` ran on when the target is that machine), scaled by task cores (cpu) or GPUs
(gpu) as the fit says. A gpu candidate is left out when there is no GPU; it is kept but flagged when the training
matrix does not fit in what the RAPIDS pool leaves of the GPUs' memory.
"""
from __future__ import annotations

import math
import socket
from dataclasses import dataclass, field

from jobs.advise import calibration as cal_mod
from jobs.advise.calibration import STAGES, STARTUP, Calibration, Host
from jobs.advise.layout import Layout, Resources, plan
from jobs.advise.sizing import InputSize
from jobs.core.errors import UserError

FEATURES = 43                  # the contract's features; the label makes the matrix 44 wide
TRAIN_SHARE = 0.70             # jobs/ml/split.py: hash buckets below 70
CUML_COPIES = 2                # the matrix once as loaded, once more in the solver's working copy
PREFER_CPU_WITHIN = 0.10       # a gpu estimate less than 10 % faster does not pay for the GPU
HOST_TO_DEVICE_GBPS = 20.0     # pinned PCIe Gen4/5 copies as seen by cuDF, GB/s (order of magnitude)


@dataclass
class Candidate:
    profile: str
    layout: Layout
    host: Host
    seconds: dict[str, float]
    notes: list[str] = field(default_factory=list)       # what the estimate stands on
    blockers: list[str] = field(default_factory=list)    # why this candidate would not run

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def to_json(self) -> dict:
        return {"profile": self.profile, "layout": self.layout.to_json(), "calibration_host": self.host.name,
                "seconds": {k: round(v, 1) for k, v in self.seconds.items()}, "total_s": round(self.total_s, 1),
                "notes": self.notes, "blockers": self.blockers}


@dataclass
class Advice:
    size: InputSize
    resources: Resources
    candidates: list[Candidate]
    recommended: Candidate
    factors: list[str]
    calibration_sources: list[str]

    def to_json(self) -> dict:
        return {"input": self.size.to_json(), "resources": self.resources.to_json(),
                "recommended": self.recommended.profile, "master": self.recommended.layout.master,
                "conf": self.recommended.layout.conf(), "candidates": [c.to_json() for c in self.candidates],
                "factors": self.factors, "calibration": self.calibration_sources}


def _distance(h: Host, profile: str, r: Resources, here: bool) -> tuple:
    per_target = r.cores_per_node / max(r.gpus_per_node, 1) if profile == "gpu" else r.cores_per_node
    per_host = h.cores / max(h.gpus, 1) if profile == "gpu" else h.cores
    same_model = bool(r.gpu_model and h.gpu_model and (r.gpu_model.lower() in h.gpu_model.lower()
                                                       or h.gpu_model.lower() in r.gpu_model.lower()))
    return (profile == "gpu" and not same_model, not (here and h.name == this_host_name()),
            abs(math.log(per_host / per_target)), h.name)


def choose_host(cal: Calibration, profile: str, r: Resources, here: bool) -> Host | None:
    hosts = [h for h in cal.hosts.values() if profile in cal.profiles_of(h.name)]
    return min(hosts, key=lambda h: _distance(h, profile, r, here)) if hosts else None


def _borrow(cal: Calibration, stage: str, profile: str, r: Resources, here: bool):
    """The model of ``stage`` from the nearest host that timed it, under ``profile`` or else any profile."""
    for pf in (profile, "cpu", "gpu"):
        hosts = sorted((h for h in cal.hosts.values() if pf in cal.profiles_of(h.name)),
                       key=lambda h: _distance(h, pf, r, here))
        for h in hosts:
            m = cal.fit(h.name, pf).get(stage)
            if m is not None:
                return m, f"{h.name} ({pf})"
    return None, None


def rapids_alloc_fraction() -> float:
    """The share of each GPU's memory the RAPIDS pool takes under the gpu profile (conf/gpu.conf); the rest is cuML's."""
    from jobs.launch.profiles import load_profile
    return float(load_profile("gpu").get("spark.rapids.memory.gpu.allocFraction", "1.0"))


def train_matrix_bytes(customers: int) -> int:
    return int(customers * TRAIN_SHARE * (FEATURES + 1) * 8)


def estimate(profile: str, size: InputSize, r: Resources, cal: Calibration, here: bool) -> Candidate | None:
    host = choose_host(cal, profile, r, here)
    if host is None or (profile == "gpu" and not r.gpus):
        return None
    layout = plan(profile, r, size.text_bytes)
    models = cal.fit(host.name, profile)
    parallel = r.gpus if profile == "gpu" else layout.task_slots
    secs, borrowed = {}, set()
    for stage in (*STAGES, STARTUP):
        m = models.get(stage)
        if m is None:      # a stage the host's runs did not time (report, startup): the nearest host that did
            m, donor = _borrow(cal, stage, profile, r, here)
            if m is not None:
                borrowed.add(f"{stage} from {donor}")
        if m is not None:
            work = size.customers if stage in cal_mod.CUSTOMER_STAGES else size.records
            secs[stage] = m.seconds(work, parallel)
    c = Candidate(profile, layout, host, secs)
    if borrowed:
        c.notes.append(f"not timed on {host.name}, taken from the nearest host that was: {', '.join(sorted(borrowed))}")
    if profile == "gpu" and r.gpu_model and r.gpu_model.lower() not in host.gpu_model.lower():
        c.notes.append(f"no calibration on {r.gpu_model}: scaled from {host.gpu_model}; run scripts/advise "
                       f"--calibrate on one of yours")
    if profile == "gpu":
        need = train_matrix_bytes(size.customers) * CUML_COPIES
        room = r.gpus * r.gpu_memory_gib * (1 - rapids_alloc_fraction()) * (1 << 30)
        if need > room:
            c.blockers.append(f"training matrix {need / (1 << 30):.1f} GiB > {room / (1 << 30):.1f} GiB the RAPIDS pool "
                           f"leaves on {r.gpus} GPU(s): the fit would run out of GPU memory; lower "
                           f"spark.rapids.memory.gpu.allocFraction, add GPUs, or train under cpu")
    return c


def advise(size: InputSize, r: Resources, cal: Calibration, here: bool = False) -> Advice:
    cands = [c for c in (estimate(p, size, r, cal, here) for p in ("cpu", "gpu")) if c is not None]
    if not cands:
        raise UserError("the calibration has no run of any profile: restore conf/calibration.json from git")
    cpu = next((c for c in cands if c.profile == "cpu"), None)
    gpu = next((c for c in cands if c.profile == "gpu" and not c.blockers), None)
    best = cpu or cands[0]
    if gpu and (cpu is None or gpu.total_s < (1 - PREFER_CPU_WITHIN) * cpu.total_s):
        best = gpu
    return Advice(size, r, cands, best, factors(size, r, cands, best), cal.sources)


def _gib(b: float) -> str:
    return f"{b / (1 << 30):.1f} GiB"


def factors(size: InputSize, r: Resources, cands: list[Candidate], best: Candidate) -> list[str]:
    """The scenario's decision factors, for this input on these resources, in a few lines."""
    out = []
    gpu = next((c for c in cands if c.profile == "gpu"), None)
    cpu = next((c for c in cands if c.profile == "cpu"), None)
    out.append(f"data: {size.records:,} records (~{size.customers:,} customers), {_gib(size.bytes)} on disk, "
               f"{_gib(size.text_bytes)} of CSV text ({', '.join(sorted({d.compression for d in size.datasets.values()}))})")
    where = "one machine" if r.local else f"{r.nodes} node(s)"
    out.append(f"resources: {where}, {r.cores} cores, {r.memory_per_node_gib:g} GiB a node"
               + (f", {r.gpus} x {r.gpu_model or 'GPU'} of {r.gpu_memory_gib:g} GiB" if r.gpus else ", no GPU"))
    if not r.gpus:
        out.append("no GPU: the cpu profile is the only candidate")
    if gpu:
        gpu_total = r.gpus * r.gpu_memory_gib * (1 << 30)
        alloc = rapids_alloc_fraction()
        out.append(f"data vs GPU memory: the CSV text is {size.text_bytes / gpu_total:.1%} of the GPUs' "
                   f"{_gib(gpu_total)}: clean's one shuffle per dataset "
                   + ("fits in the RAPIDS pool" if size.text_bytes < alloc * gpu_total else
                      f"exceeds the RAPIDS pool ({_gib(alloc * gpu_total)}): batches spill to host "
                      f"memory, then disk")
                   + f"; the training matrix ({_gib(train_matrix_bytes(size.customers) * CUML_COPIES)} with the "
                     f"solver's copy) must fit in the {1 - alloc:.0%} the pool leaves")
        moved = size.text_bytes * 2
        out.append(f"host-device transfer: ingest's CSV parse (the project's reader) runs on the CPU under gpu, so "
                   f"the raw rows cross the bus into bronze's write on the GPU, and the training rows back to the "
                   f"fit's Python worker: ~{_gib(moved)}, ~{moved / HOST_TO_DEVICE_GBPS / 1e9:.0f} s "
                   f"at {HOST_TO_DEVICE_GBPS:g} GB/s, inside the estimates below")
        out.append(f"on the CPU under gpu: ingest's parse (ingest ~{gpu.seconds.get('ingest', 0):.0f} s estimated) "
                   f"alone; bronze, clean, features, train's and score's scans, every table's write and the fits run "
                   f"on the GPU")
    if cpu and gpu:
        ratio = cpu.total_s / gpu.total_s if gpu.total_s else math.inf
        out.append(f"estimated whole run: cpu {cpu.total_s:.0f} s, gpu {gpu.total_s:.0f} s ({ratio:.2f}x)"
                   + ("" if best is gpu or gpu.blockers else
                      f"; under {1 / (1 - PREFER_CPU_WITHIN):.2f}x the GPU does not pay for itself"))
    # what a run costs, for the user's own prices: every core (and GPU) held for the whole run
    out.append("resource time a run: " + "; ".join(
        f"{c.profile} {r.cores * c.total_s / 3600:.2f} core-hours"
        + (f" + {r.gpus * c.total_s / 3600:.3f} GPU-hours" if c.profile == "gpu" else "") for c in cands))
    if not r.local:
        out.append(f"cluster: {best.layout.executors} executor(s) of {best.layout.executor_cores} cores, "
                   f"{best.layout.task_slots} task slots; the estimate assumes linear scaling in "
                   f"{'GPUs' if best.profile == 'gpu' else 'cores'} (2 H200 measured 1.7x on ETL for 2x)")
    return out


def render(a: Advice) -> str:
    """The advice as a user reads it."""
    b = a.recommended
    lines = [f"recommended: --profile {b.profile} --master {b.layout.master}"
             + "".join(f" --conf {k}={v}" for k, v in b.layout.conf().items()), ""]
    lines += [f"  {f}" for f in a.factors]
    stages = [*STAGES, STARTUP]
    lines += ["", f"  {'estimated s':<12}" + "".join(f"{s:>10}" for s in stages) + f"{'total':>10}"]
    for c in a.candidates:
        mark = "*" if c is b else " "
        lines.append(f"{mark} {c.profile:<11}" + "".join(f"{c.seconds.get(s, 0):>10.0f}" for s in stages)
                     + f"{c.total_s:>10.0f}   (calibrated on {c.host.name})")
        lines += [f"    ! {n}" for n in c.blockers] + [f"    - {n}" for n in c.notes]
    for c in a.candidates:
        lay = c.layout
        if lay.executors:
            lines.append(f"  {c.profile} layout: {lay.executors_per_node} executor(s) a node x {lay.executor_cores} cores, "
                         f"{lay.executor_memory_gib} GiB heap + {lay.executor_overhead_gib} GiB overhead, "
                         f"{lay.shuffle_partitions} shuffle partitions"
                         + (f", {lay.idle_cores_per_node} core(s) idle a node" if lay.idle_cores_per_node else ""))
        else:
            lines.append(f"  {c.profile} layout: one machine, {lay.task_slots} task cores, "
                         f"{lay.shuffle_partitions} shuffle partitions")
    return "\n".join(lines)


def auto(input_dir: str | None, customers: int | None, master: str) -> tuple[Advice, list[str]]:
    """``scripts/pipeline --profile auto``: the advice for this machine, and its settings as --conf values."""
    from jobs.advise import sizing
    from jobs.advise.layout import detect

    if not master.startswith("local"):
        raise UserError(f"--profile auto plans one machine (local[*]), not --master {master}: run scripts/advise "
                        f"--input DIR with the cluster's --nodes, --cores-per-node and --gpus, and pass what its "
                        f"--emit-conf prints")
    cal = cal_mod.load()
    if input_dir:
        size = sizing.size_input(input_dir)
    else:
        sized = [r for r in cal.runs if r.bytes and r.customers]
        if not sized:
            raise UserError("--profile auto without --input needs calibration runs with input sizes: run "
                            "scripts/advise --calibrate, or pass --input")
        size = sizing.generated(customers or 0, sum(r.records / r.customers for r in sized) / len(sized),
                                sum(r.bytes / r.records for r in sized) / len(sized))
    a = advise(size, detect(), cal, here=True)
    return a, [f"{k}={v}" for k, v in a.recommended.layout.conf().items()]


def this_host_name() -> str:
    return f"here-{socket.gethostname()}"
