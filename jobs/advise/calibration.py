"""Per-stage costs fitted from measured runs: ``seconds = fixed + per_unit * work / parallel``.

A run is one measured pipeline (its stage seconds, records and the host it ran on); the calibration file
(conf/calibration.json, and conf/calibration.local.json written by ``advise --calibrate``) holds runs with the file
or command each came from, never fitted constants: the fit is done here, each time, from the runs.

- work: the input records (customers + events) for ingest, clean and features; the customer records for train,
  score and report (their rows are customers).
- parallel: the task cores under cpu; the GPUs under gpu (the runs behind a gpu fit come from hosts with a given
  number of cores per GPU, and the fit carries that host's cores).
- startup: the run's wall time less its stages (JVM and session start, the launcher), a fixed cost.

The fit minimises the relative error over a host's runs of one profile measured with the newest code among them (a
run of 100k customers counts as much as one of 6M), with both terms kept non-negative. A host with one size of run
of a profile takes the fixed part from the other hosts' fits of that profile and puts the rest on the per-record
term.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jobs.core.errors import UserError

STAGES = ("ingest", "clean", "features", "train", "score", "report")
CUSTOMER_STAGES = ("train", "score", "report")
STARTUP = "startup"
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
REPO_FILE = CONF_DIR / "calibration.json"
LOCAL_FILE = CONF_DIR / "calibration.local.json"


@dataclass(frozen=True)
class Host:
    name: str
    cores: int
    memory_gib: float
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_gib: float = 0.0
    description: str = ""


@dataclass(frozen=True)
class Run:
    source: str            # the file (or command) the figures come from
    host: str
    profile: str           # cpu or gpu
    cores: int             # the application's task cores
    gpus: int
    records: int           # customers + events read
    customers: int
    seconds: dict[str, float]
    wall_s: float | None = None
    commit: str = ""
    bytes: int = 0         # of CSV read

    def work(self, stage: str) -> int:
        return self.customers if stage in CUSTOMER_STAGES else self.records

    def parallel(self) -> int:
        return max(self.gpus if self.profile == "gpu" else self.cores, 1)

    def stage_seconds(self) -> dict[str, float]:
        """The stages, and startup when the wall time is known."""
        out = {s: float(self.seconds[s]) for s in STAGES if s in self.seconds}
        if self.wall_s is not None:
            out[STARTUP] = max(float(self.wall_s) - sum(out.values()), 0.0)
        return out


@dataclass(frozen=True)
class StageModel:
    fixed_s: float
    us_per_unit: float     # microseconds per record (per customer for train, score, report) times parallel units
    runs: int

    def seconds(self, work: float, parallel: float) -> float:
        return self.fixed_s + self.us_per_unit * 1e-6 * work / max(parallel, 1e-9)


@dataclass
class Calibration:
    hosts: dict[str, Host]
    runs: list[Run]
    sources: list[str] = field(default_factory=list)

    def profiles_of(self, host: str) -> set[str]:
        return {r.profile for r in self.runs if r.host == host}

    def runs_of(self, host: str, profile: str) -> list[Run]:
        return [r for r in self.runs if r.host == host and r.profile == profile]

    def current_runs(self, host: str, profile: str) -> list[Run]:
        """The runs of ``host`` under ``profile`` measured with the newest code among them: the commit of the run
        added last (runs are kept in the order they were added). Older code's figures would bend the line: on the
        H200 host one size's cpu time fell from 357 s to 162 s across commits, which read as a cost that does not
        grow with the records."""
        runs = self.runs_of(host, profile)
        return [r for r in runs if r.commit == runs[-1].commit] if runs else []

    def fit(self, host: str, profile: str) -> dict[str, StageModel]:
        """Each stage's model on ``host`` under ``profile`` (its ``current_runs``); a UserError when the host has
        no run of it."""
        runs = self.current_runs(host, profile)
        if not runs:
            raise UserError(f"no calibration run of the {profile} profile on host {host!r}: run "
                            f"scripts/advise --calibrate on that host, or choose one of {sorted(self.hosts)}")
        models = {}
        for stage in (*STAGES, STARTUP):
            pts = [(r.work(stage) / r.parallel(), r.stage_seconds()[stage]) for r in runs if stage in r.stage_seconds()]
            if not pts:
                continue
            if stage == STARTUP:
                models[stage] = StageModel(sum(t for _, t in pts) / len(pts), 0.0, len(pts))
            elif len({x for x, _ in pts}) >= 2:
                a, b = fit_line(pts)
                models[stage] = StageModel(a, b * 1e6, len(pts))
            else:
                models[stage] = self._one_point(host, profile, stage, pts)
        return models

    def _one_point(self, host: str, profile: str, stage: str, pts) -> StageModel:
        x, t = pts[0][0], sum(t for _, t in pts) / len(pts)     # repeated samples of one size: their mean
        others = [self.fit(h, profile).get(stage) for h in self.hosts if h != host and len(
            {r.work(stage) / r.parallel() for r in self.current_runs(h, profile)}) >= 2]
        fixed = min((m.fixed_s for m in others if m), default=0.0)
        fixed = min(fixed, 0.5 * t)
        return StageModel(fixed, (t - fixed) / x * 1e6 if x else 0.0, 1)

    def to_json(self) -> dict:
        return {"hosts": {k: asdict(v) for k, v in self.hosts.items()}, "runs": [asdict(r) for r in self.runs]}


def fit_line(pts: list[tuple[float, float]]) -> tuple[float, float]:
    """a, b >= 0 of t = a + b * x minimising sum(((a + b x - t) / t)^2)."""
    w = [1.0 / (t * t) if t > 0 else 0.0 for _, t in pts]
    sw = sum(w)
    sx = sum(wi * x for wi, (x, _) in zip(w, pts))
    st = sum(wi * t for wi, (_, t) in zip(w, pts))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, pts))
    sxt = sum(wi * x * t for wi, (x, t) in zip(w, pts))
    det = sw * sxx - sx * sx
    if det > 0:
        a, b = (st * sxx - sx * sxt) / det, (sw * sxt - sx * st) / det
        if a >= 0 and b >= 0:
            return a, b
    # a bound is active: the better of no fixed part (t = b x) and no per-record part (t = a)
    b = sxt / sxx if sxx else 0.0
    a = st / sw if sw else 0.0

    def err(aa, bb):
        return sum(wi * (aa + bb * x - t) ** 2 for wi, (x, t) in zip(w, pts))
    return (0.0, max(b, 0.0)) if err(0.0, max(b, 0.0)) <= err(max(a, 0.0), 0.0) else (max(a, 0.0), 0.0)


def _host(d: dict) -> Host:
    return Host(**{k: d[k] for k in Host.__dataclass_fields__ if k in d})


def _run(d: dict) -> Run:
    return Run(**{k: d[k] for k in Run.__dataclass_fields__ if k in d})


def read(path: Path) -> Calibration:
    try:
        d = json.loads(Path(path).read_text())
        return Calibration({k: _host({"name": k, **v}) for k, v in d["hosts"].items()},
                           [_run(r) for r in d["runs"]], [str(path)])
    except FileNotFoundError as e:
        raise UserError(f"calibration file {path} is missing: restore conf/calibration.json from git, or run "
                        f"scripts/advise --calibrate") from e
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"calibration file {path} cannot be read ({e}): restore it from git, or run "
                        f"scripts/advise --calibrate again") from e


def load(paths: list[Path] | None = None) -> Calibration:
    """The repository's calibration and, when it exists, this machine's (``--calibrate``), merged."""
    paths = paths or [REPO_FILE] + ([LOCAL_FILE] if LOCAL_FILE.is_file() else [])
    merged = Calibration({}, [], [])
    for p in paths:
        c = read(p)
        # a later file that describes a host again replaces that host's runs (a re-calibration of this machine)
        merged.runs = [r for r in merged.runs if r.host not in c.hosts] + c.runs
        merged.hosts.update(c.hosts)
        merged.sources += c.sources
    return merged


def write(cal: Calibration, path: Path, about: str | None = None) -> Path:
    path.write_text(json.dumps({**({"about": about} if about else {}), **cal.to_json()}, indent=1) + "\n")
    return path


def run_from_lake(lake: Path, *, source: str, host: str, profile: str, cores: int, gpus: int,
                  wall_s: float | None, commit: str = "") -> Run:
    """A run from a pipeline's lake: its stage records (lake/_stages/<stage>.json)."""
    stages = {p.stem: json.loads(p.read_text()) for p in (lake / "_stages").glob("*.json")}
    if "ingest" not in stages:
        raise UserError(f"{lake}/_stages has no ingest record: the run did not finish; run it again")
    totals = stages["ingest"]["counts"]["totals"]
    return Run(source=source, host=host, profile=profile, cores=cores, gpus=gpus,
               records=sum(t["records"] for t in totals.values()), customers=totals["customers"]["records"],
               seconds={s: round(r["seconds"], 2) for s, r in stages.items() if s in STAGES},
               wall_s=None if wall_s is None else round(wall_s, 2), commit=commit,
               bytes=_input_bytes(stages["ingest"]["counts"]))


def run_from_report(report: dict, *, source: str, host: str, profile: str, cores: int, gpus: int,
                    wall_s: float | None = None, commit: str = "", report_s: float | None = None) -> Run:
    """A run from a pipeline's report.json (``timings`` and ingest's totals). The report stage cannot time itself
    in the file it writes: ``report_s`` (its record in the run's lake, ``report_seconds``) fills it in, else the
    report's time counts in the run's startup."""
    totals = report["stages"]["ingest"]["counts"]["totals"]
    seconds = {s: round(v, 2) for s, v in report["timings"].items() if s in STAGES}
    if report_s is not None:
        seconds.setdefault("report", round(report_s, 2))
    return Run(source=source, host=host, profile=profile, cores=cores, gpus=gpus,
               records=sum(t["records"] for t in totals.values()), customers=totals["customers"]["records"],
               seconds=seconds, wall_s=wall_s, commit=commit, bytes=_input_bytes(report["stages"]["ingest"]["counts"]))


def report_seconds(report_json: Path) -> float | None:
    """The report stage's seconds for RUN/report/report.json, from its record in the same run's lake
    (RUN/lake/_stages/report.json), when the run kept its lake."""
    record = report_json.parent.parent / "lake" / "_stages" / "report.json"
    try:
        return float(json.loads(record.read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _input_bytes(counts: dict) -> int:
    return sum(int(d.get("bytes", 0)) for d in counts.get("input", {}).values())

