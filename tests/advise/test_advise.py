"""The advisor: input sizing from a sample, the layout arithmetic on hand-worked cases, the fit on hand-made runs,
how the recommendation moves with GPU memory, GPU count and nodes, and one clear line with exit 2 for bad input.
No Spark: the advisor runs before any application exists."""
from __future__ import annotations

import bz2
import gzip
import json

import pytest

from jobs.advise import calibration as cal_mod
from jobs.advise.advisor import advise
from jobs.advise.calibration import Calibration, Host, Run, fit_line
from jobs.advise.cli import main
from jobs.advise.layout import Resources, plan, shuffle_partitions
from jobs.advise.sizing import InputSize, size_input
from jobs.core.errors import UserError


def _csv(rows: int, width: int, header: str = "customer_id,x\n") -> bytes:
    """A header and ``rows`` records of exactly ``width`` bytes each, line end included."""
    return (header + "".join(f"C{i:07d},{'y' * (width - 10)}\n" for i in range(rows))).encode()


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "customers").mkdir()
    (tmp_path / "events").mkdir()
    # 3 plain files of 30,000 records of 100 bytes (sampled 1 MiB each: cut, so estimated), 2 gzip + 1 bzip2 files
    # of 20,000 records of 50 bytes
    for i in range(3):
        (tmp_path / "customers" / f"c-{i}.csv").write_bytes(_csv(30_000, 100))
    for i in range(2):
        (tmp_path / "events" / f"e-{i}.csv.gz").write_bytes(gzip.compress(_csv(20_000, 50)))
    (tmp_path / "events" / "e-2.csv.bz2").write_bytes(bz2.compress(_csv(20_000, 50)))
    (tmp_path / "events" / "notes.txt").write_text("not read")
    return tmp_path


def test_sizing_reads_bytes_exactly_and_estimates_records_within_one_percent_from_a_sample(folder):
    size = size_input(folder)
    c, e = size.datasets["customers"], size.datasets["events"]
    assert (c.files, c.compression, c.bytes) == (3, "none", 3 * (14 + 30_000 * 100))
    assert c.bytes_per_record == 100.0 and abs(c.records - 90_000) <= 900
    assert (e.files, e.compression) == (3, "mixed")          # the .txt file is not an input file
    assert e.bytes_per_record == 50.0 and abs(e.records - 60_000) <= 600
    assert abs(e.text_bytes - 3 * (14 + 20_000 * 50)) <= 0.01 * 3 * 20_000 * 50
    assert size.customers == c.records and size.records == c.records + e.records


def test_a_missing_or_empty_input_is_one_error_naming_the_fix(tmp_path):
    with pytest.raises(UserError, match="does not exist: pass --input a folder with customers/ and events/"):
        size_input(tmp_path / "nowhere")
    (tmp_path / "customers").mkdir()
    with pytest.raises(UserError, match=r"no CSV files \(\*\.csv, \*\.csv\.gz, \*\.csv\.bz2\) in .*customers"):
        size_input(tmp_path)


def test_cpu_cluster_layout_of_hand_worked_nodes():
    # 16 cores, 64 GiB a node: 15 cores and 57 GiB (64 - 6.4) to Spark: 3 executors of 5 cores, 19 GiB each
    # (2 overhead, 17 heap); 4 nodes: 12 executors, 60 task slots
    lay = plan("cpu", Resources(4, 16, 64, local=False), shuffle_bytes=10 << 30)
    assert (lay.executors, lay.executors_per_node, lay.executor_cores) == (12, 3, 5)
    assert (lay.executor_memory_gib, lay.executor_overhead_gib, lay.task_slots, lay.idle_cores_per_node) == (17, 2, 60, 0)
    assert lay.shuffle_partitions == 200          # 2 x 60 slots and 10 GiB / 128 MiB = 80 are fewer than 200
    # 8 cores, 32 GiB: 7 cores, 28 GiB: one executor of 6 cores (5 or 4 would leave more idle), 1 core idle
    lay = plan("cpu", Resources(2, 8, 32, local=False), shuffle_bytes=0)
    assert (lay.executors, lay.executor_cores, lay.idle_cores_per_node) == (2, 6, 1)
    assert (lay.executor_memory_gib, lay.executor_overhead_gib) == (25, 3)
    assert lay.conf()["spark.executor.instances"] == "2" and lay.conf()["spark.executor.memory"] == "25g"


def test_gpu_cluster_layout_is_one_executor_per_gpu_with_the_cores_split():
    # 2 nodes of 32 cores, 256 GiB, 4 GPUs: 31 cores, 230 GiB a node; per GPU 7 cores (3 idle a node) and 57 GiB:
    # pinned 7 (57 // 8), overhead 5 (10 % of 50) + the pinned 7, heap 45; a task takes 1/7 of a GPU
    lay = plan("gpu", Resources(2, 32, 256, gpus=8, gpu_memory_gib=80, local=False), shuffle_bytes=200 << 30)
    assert (lay.executors, lay.executors_per_node, lay.executor_cores, lay.idle_cores_per_node) == (8, 4, 7, 3)
    assert (lay.executor_memory_gib, lay.executor_overhead_gib, lay.pinned_pool_gib) == (45, 12, 7)
    assert lay.task_gpu_amount == pytest.approx(1 / 7) and lay.task_slots == 56
    assert lay.shuffle_partitions == 448          # 200 GiB / 512 MiB = 400, rounded up to a multiple of 56
    assert lay.conf()["spark.executor.resource.gpu.amount"] == "1"


def test_shuffle_partitions_follow_the_data_past_the_profiles_200():
    assert shuffle_partitions("cpu", 100 << 30, 60) == 840   # 800 partitions of 128 MiB, up to 14 x 60
    assert shuffle_partitions("cpu", 1 << 20, 2) == 200      # small data: the profile's, which AQE coalesces
    assert shuffle_partitions("cpu", 1 << 20, 128) == 256    # 2 x 128 slots


@pytest.mark.parametrize("r, message", [
    (Resources(1, 0, 24), "0 cores per node"),
    (Resources(0, 4, 24), "at least one node"),
    (Resources(1, 64, 512, gpus=9, gpu_memory_gib=80), "no server holds more than 8"),
    (Resources(2, 16, 64, gpus=3, gpu_memory_gib=80, local=False), "do not split evenly over 2 nodes"),
    (Resources(1, 4, 64, gpus=4, gpu_memory_gib=80, local=False), "needs a core of its own"),
    (Resources(1, 16, 64, gpus=1), "--gpu-memory"),
])
def test_impossible_resources_are_refused(r, message):
    with pytest.raises(UserError, match=message):
        plan("cpu", r, 0)


def test_fit_line_recovers_a_line_and_keeps_both_terms_non_negative():
    a, b = fit_line([(1.0, 3.0), (2.0, 5.0)])
    assert (a, b) == pytest.approx((1.0, 2.0))
    a, b = fit_line([(1.0, 5.0), (2.0, 4.0)])        # falling: no negative per-record cost, a fixed cost instead
    assert b == 0.0 and 4.0 < a < 5.0


def _calibration() -> Calibration:
    """One host of 16 cores and an 80 GiB GPU: cpu clean 20 s at 1M records, 110 s at 10M (so 10 s fixed + 160 us
    per record on one core); gpu clean 8 s and 17 s (7 s + 1 us per record on one GPU); train per customer."""
    host = Host("h", 16, 128, 1, "NVIDIA H100", 80)
    runs = [Run("hand", "h", "cpu", 16, 0, 1_000_000, 100_000, {"clean": 20.0, "train": 12.0}),
            Run("hand", "h", "cpu", 16, 0, 10_000_000, 1_000_000, {"clean": 110.0, "train": 30.0}),
            Run("hand", "h", "gpu", 16, 1, 1_000_000, 100_000, {"clean": 8.0, "train": 6.0}),
            Run("hand", "h", "gpu", 16, 1, 10_000_000, 1_000_000, {"clean": 17.0, "train": 9.0})]
    return Calibration({"h": host}, runs, ["hand"])


def _size(records: int, customers: int) -> InputSize:
    from jobs.advise.sizing import DatasetSize
    return InputSize("x", {"customers": DatasetSize(1, customers * 150, "none", customers * 150, 150.0, customers,
                                                    customers * 150),
                           "events": DatasetSize(1, (records - customers) * 70, "none", (records - customers) * 70,
                                                 70.0, records - customers, (records - customers) * 70)})


def test_the_fit_predicts_hand_computed_seconds():
    models = _calibration().fit("h", "cpu")
    assert models["clean"].fixed_s == pytest.approx(10.0) and models["clean"].us_per_unit == pytest.approx(160.0)
    # 5M records on 16 cores: 10 + 160e-6 * 5e6 / 16 = 60 s
    assert models["clean"].seconds(5_000_000, 16) == pytest.approx(60.0)
    # train by customers: 12 s at 100k, 30 s at 1M: 10 s + 320 us a customer on one core
    assert models["train"].seconds(500_000, 16) == pytest.approx(10.0 + 320e-6 * 500_000 / 16)


def test_the_fit_uses_the_newest_codes_runs_only():
    """An older commit's slower runs (added first) do not bend the line of the newest code's."""
    cal = _calibration()
    old = [Run("hand", "h", "cpu", 16, 0, 1_000_000, 100_000, {"clean": 90.0, "train": 40.0}, commit="old"),
           Run("hand", "h", "cpu", 16, 0, 10_000_000, 1_000_000, {"clean": 150.0, "train": 45.0}, commit="old")]
    newer = [Run(r.source, r.host, r.profile, r.cores, r.gpus, r.records, r.customers, r.seconds, commit="new")
             for r in cal.runs]
    cal = Calibration(cal.hosts, old + newer, cal.sources)
    assert cal.current_runs("h", "cpu") == newer[:2]
    models = cal.fit("h", "cpu")
    assert models["clean"].fixed_s == pytest.approx(10.0) and models["clean"].us_per_unit == pytest.approx(160.0)


def test_the_recommendation_moves_with_gpus_gpu_memory_and_nodes():
    cal, size = _calibration(), _size(100_000_000, 9_000_000)
    no_gpu = advise(size, Resources(1, 16, 128), cal)
    assert [c.profile for c in no_gpu.candidates] == ["cpu"] and no_gpu.recommended.profile == "cpu"
    one = advise(size, Resources(1, 16, 128, gpus=1, gpu_memory_gib=80, gpu_model="H100"), cal)
    assert one.recommended.profile == "gpu"
    # cpu clean 10 + 160e-6 * 1e8 / 16 = 1010 s; gpu clean 7 + 1e-6 * 1e8 = 107 s
    secs = {c.profile: c.seconds["clean"] for c in one.candidates}
    assert secs == pytest.approx({"cpu": 1010.0, "gpu": 107.0})
    # a GPU of 8 GiB leaves 1.6 GiB beside the RAPIDS pool: 9M x 0.7 x 44 x 8 B x 2 = 4.1 GiB does not fit
    small = advise(size, Resources(1, 16, 128, gpus=1, gpu_memory_gib=8, gpu_model="H100"), cal)
    assert small.recommended.profile == "cpu"
    assert any("training matrix" in n for n in next(c for c in small.candidates if c.profile == "gpu").blockers)
    # more GPUs: the gpu estimate falls; more nodes: the cpu one does, with more executors
    two = advise(size, Resources(1, 16, 128, gpus=2, gpu_memory_gib=80, gpu_model="H100"), cal)
    gpu1 = next(c for c in one.candidates if c.profile == "gpu")
    gpu2 = next(c for c in two.candidates if c.profile == "gpu")
    assert gpu2.seconds["clean"] < gpu1.seconds["clean"]
    four = advise(size, Resources(4, 16, 128, local=False), cal)
    assert four.recommended.layout.executors == 12
    assert four.recommended.seconds["clean"] < no_gpu.recommended.seconds["clean"]


def test_a_small_input_stays_on_cpu_when_the_gpu_gains_too_little():
    cal = _calibration()
    # 1M records: cpu clean 20 s + train 12 s = 32 s, gpu 8 + 6 = 14 s: the gpu wins; at no per-record gain
    # (a calibration whose gpu runs equal the cpu ones) the cpu is kept
    same = Calibration(cal.hosts, [r for r in cal.runs if r.profile == "cpu"] + [
        Run("hand", "h", "gpu", 16, 1, r.records, r.customers, dict(r.seconds)) for r in cal.runs if r.profile == "cpu"])
    small = _size(1_000_000, 100_000)
    r = Resources(1, 16, 128, gpus=1, gpu_memory_gib=80, gpu_model="H100")
    assert advise(small, r, cal).recommended.profile == "gpu"
    assert advise(small, r, same).recommended.profile == "cpu"


@pytest.mark.parametrize("args, message", [
    (["--input", "{tmp}/missing"], "advise: error: input folder {tmp}/missing does not exist"),
    (["--input", "{folder}", "--cores", "0"], "advise: error: 0 cores per node"),
    (["--input", "{folder}", "--cores", "16", "--memory", "64", "--gpus", "2", "--nodes", "4",
      "--gpu-memory", "80"], "advise: error: 2 GPUs do not split evenly over 4 nodes"),
    (["--input", "{folder}", "--cores", "64", "--memory", "512", "--gpus", "16", "--gpu-memory", "80"],
     "advise: error: 16 GPUs on 1 node(s) is 16 a node: no server holds more than 8"),
    ([], "advise: error: give --input DIR"),
])
def test_the_command_line_says_one_line_and_exits_2_for_bad_input(folder, tmp_path, capsys, args, message):
    fill = {"tmp": str(tmp_path), "folder": str(folder)}
    assert main([a.format(**fill) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message.format(**fill)), err


def test_the_command_line_advises_from_a_calibration_file(folder, tmp_path, capsys):
    path = cal_mod.write(_calibration(), tmp_path / "cal.json")
    assert main(["--input", str(folder), "--calibration", str(path), "--cores", "16", "--memory", "128",
                 "--gpus", "1", "--gpu-memory", "80", "--gpu-model", "H100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recommended"] == "gpu" and out["master"] == "local[*]"
    assert {c["profile"] for c in out["candidates"]} == {"cpu", "gpu"}
    assert out["conf"] == {}              # one machine, small data: the profile's settings stand
    assert main(["--input", str(folder), "--calibration", str(path), "--cores", "16", "--memory", "128",
                 "--emit-conf"]) == 0
    assert capsys.readouterr().out.strip() == "--profile cpu --master local[*]"


def test_the_repository_calibration_names_a_committed_source_for_every_run():
    from pathlib import Path
    root = Path(cal_mod.__file__).resolve().parents[2]
    cal = cal_mod.read(cal_mod.REPO_FILE)
    assert cal.runs and set(r.host for r in cal.runs) <= set(cal.hosts)
    for r in cal.runs:
        assert (root / r.source.split()[0]).is_file(), r.source
        assert r.records > r.customers > 0 and r.profile in ("cpu", "gpu")


def test_add_run_takes_a_lakes_stage_records_into_a_calibration_file(tmp_path, capsys):
    stages = tmp_path / "lake" / "_stages"
    stages.mkdir(parents=True)
    ingest = {"seconds": 12.5, "counts": {"totals": {"customers": {"records": 1000}, "events": {"records": 9000}},
                                          "input": {"customers": {"bytes": 150000}, "events": {"bytes": 630000}}}}
    (stages / "ingest.json").write_text(json.dumps(ingest))
    (stages / "clean.json").write_text(json.dumps({"seconds": 20.25, "counts": {}}))
    (stages / "generate.json").write_text(json.dumps({"seconds": 3.0, "counts": {}}))
    path = tmp_path / "cal.json"
    args = ["--add-run", str(tmp_path / "lake"), "--host", "box", "--profile", "cpu", "--cores", "8",
            "--calibration", str(path), "--wall", "40"]
    assert main(args) == 2 and "describe it with --memory" in capsys.readouterr().err
    assert main([*args, "--memory", "32"]) == 0
    cal = cal_mod.read(path)
    (run,) = cal.runs
    assert (run.records, run.customers, run.bytes, run.cores, run.host) == (10_000, 1000, 780_000, 8, "box")
    assert run.seconds == {"ingest": 12.5, "clean": 20.25}          # generate is no stage of a run on an input
    assert run.stage_seconds()["startup"] == pytest.approx(40 - 32.75)
    assert cal.hosts["box"].memory_gib == 32 and cal.hosts["box"].gpus == 0


def test_add_run_of_a_report_takes_the_report_stages_seconds_from_the_runs_lake(tmp_path, capsys):
    """report.json cannot hold the time of the stage that writes it: the run's lake record beside it does."""
    run_dir = tmp_path / "run"
    (run_dir / "report").mkdir(parents=True)
    ingest = {"counts": {"totals": {"customers": {"records": 2000}, "events": {"records": 18000}},
                         "input": {"customers": {"bytes": 300000}, "events": {"bytes": 1260000}}}}
    report = {"timings": {"generate": 4.0, "ingest": 9.5, "clean": 20.0, "features": 3.5, "train": 18.0,
                          "score": 1.5},
              "stages": {"ingest": ingest}}
    (run_dir / "report" / "report.json").write_text(json.dumps(report))
    path = tmp_path / "cal.json"
    args = ["--add-run", str(run_dir / "report" / "report.json"), "--host", "box", "--profile", "cpu",
            "--cores", "2", "--memory", "24", "--wall", "62", "--calibration", str(path)]
    assert main(args) == 0                                  # no lake beside it: the report's time is startup's
    assert "report" not in cal_mod.read(path).runs[0].seconds
    (run_dir / "lake" / "_stages").mkdir(parents=True)
    (run_dir / "lake" / "_stages" / "report.json").write_text(json.dumps({"stage": "report", "seconds": 5.18}))
    assert main(args) == 0
    run = cal_mod.read(path).runs[1]
    assert run.seconds == {"ingest": 9.5, "clean": 20.0, "features": 3.5, "train": 18.0, "score": 1.5,
                           "report": 5.18}
    assert run.stage_seconds()["startup"] == pytest.approx(62 - 57.68)
    capsys.readouterr()
