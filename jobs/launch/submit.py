"""The launch: run a job with spark-submit under a profile (base + profile merged), with the jars from
build/jars and the jobs package shipped to the executors, so the same command works on ``local[*]`` and on a
cluster (``--master spark://host:7077``, ``yarn``, ``k8s://...``).

    scripts/submit [--profile cpu|gpu|gpu-explain] [--master URL] [--conf k=v ...] <job | app.py> [args]
    scripts/pipeline [--profile ...|auto] [--master URL] [--conf k=v ...] [pipeline args]

A job is a stage or the pipeline (``jobs.run.runner``); any other PySpark application file runs with the same
profiles and jars. Mistakes (unknown profile or job, bad job arguments, missing jars, gpu profile without a GPU)
end in one line and exit 2 before Spark starts. ``scripts/pipeline`` also keeps Spark's event log in
<out>/eventlog, with each stage's memory peaks (``MEMORY_PEAKS``).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata as pkg_metadata
from pathlib import Path

from jobs.advise.layout import machine_memory_gib
from jobs.core.errors import UserError
from jobs.lake import lock
from jobs.launch import classes, jars, jit, profiles, settings
from jobs.run import runner

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "jobs"
APP = PACKAGE / "__main__.py"


# Resource requests that only a cluster manager can grant (see for_master), and the RAPIDS shuffle manager, which
# the gpu profile sets for executors on a cluster (measured there: conf/gpu.conf); under a local master the driver
# is the executor and keeps Spark's own shuffle (unless the user's own --conf names another).
GPU_REQUESTS = ("spark.task.resource.gpu.amount", "spark.executor.resource.gpu.amount")
LOCAL_MODE_DROPPED = (*GPU_REQUESTS, "spark.executor.resource.gpu.discoveryScript", "spark.shuffle.manager",
                      "spark.rapids.shuffle.mode")
# The RAPIDS shuffle manager's class names the Spark version it is built for (its shim): sparkXYZ for Spark X.Y.Z.
RAPIDS_SHUFFLE_MANAGER = re.compile(r"com\.nvidia\.spark\.rapids\.spark(\w+)\.RapidsShuffleManager")


class SubmitError(Exception):
    pass


def build_pyfiles(dest: Path) -> Path:
    """The jobs package as a zip for --py-files (rebuilt each time, so executors never run stale code)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(PACKAGE.rglob("*.py")):
            z.write(f, f.relative_to(ROOT).as_posix())
    return dest


def spark_home() -> Path:
    """The Spark inside the installed pyspark package (a venv, or a --target install on a GPU host)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def has_local_gpu() -> bool:
    nvsmi = shutil.which("nvidia-smi")
    if not nvsmi:
        return False
    out = subprocess.run([nvsmi, "-L"], capture_output=True, text=True)
    return out.returncode == 0 and "GPU" in out.stdout


def is_local_mode(master: str) -> bool:
    """``local`` or ``local[...]``: the driver's JVM runs every task (not ``local-cluster[...]``, whose executors are
    real)."""
    return master == "local" or master.startswith("local[")


def for_master(props: dict[str, str], master: str) -> dict[str, str]:
    """The profile's properties as ``master`` can honour them. Local mode offers its tasks no GPU resource, so
    a task that asks for a share of one is never scheduled: the job would wait for ever at its first stage
    (the gpu profile under local[*] on a one-GPU machine). The plugin and spark-rapids-ml find the local GPU
    without those requests. A ``local-cluster[...]`` master is not local mode: its executors are real and keep
    the requests, as on any cluster."""
    if not is_local_mode(master):
        return dict(props)
    local = {k: v for k, v in props.items() if k not in LOCAL_MODE_DROPPED}
    return {**local, **local_driver_memory(local, machine_memory_gib())}


def refuse_local_gpu_requests(master: str, extra_conf: list[str]) -> None:
    """A ``--conf`` asking for GPUs per task or executor under a local master stops here, with the fix: local mode
    has no executor resources, so Spark fails to start ("No executor resource configs were specified for the
    following task configs: gpu"), or a task's share is never granted. ``for_master`` drops the profile's own
    requests; a user's are refused rather than dropped unseen."""
    if not is_local_mode(master):
        return
    asked = [key for key in (kv.partition("=")[0].strip() for kv in extra_conf) if key in GPU_REQUESTS]
    if asked:
        raise SubmitError(f"{', '.join(asked)} asks for GPUs per task or executor, which local mode ({master}) "
                          "cannot grant: drop it (the plugin and spark-rapids-ml use this machine's GPU without "
                          "it), or submit to a cluster whose workers offer GPUs (--master spark://...)")


# Under local[*] the driver JVM is the one executor: its heap holds every task's sort and hash buffers and clean's
# materialised rows, which spill to disk (serialised) when it is full. The profile's spark.driver.memory is the
# least it gets; a machine with more memory gives it half of its own, the rest staying with the OS, the Python
# workers and the page cache of the files read and written (1M customers on 2 cores and 24 GiB: clean 123 s with
# the 6 GiB of the cpu profile, 109 s with 12 GiB). A --conf spark.driver.memory still wins.
LOCAL_HEAP_SHARE = 0.5
_UNITS = {"k": 1 / (1 << 20), "m": 1 / 1024, "g": 1.0, "t": 1024.0}


def memory_gib(value: str) -> float:
    """A JVM memory string as Spark writes them ("6g", "6144m", "512k", "2T") in GiB; a bare number is MiB."""
    v = value.strip().lower().rstrip("b")
    unit = v[-1] if v and v[-1] in _UNITS else "m"
    return float(v.rstrip("kmgt")) * _UNITS[unit]


def local_driver_memory(props: dict[str, str], machine_gib: float) -> dict[str, str]:
    """The driver memory setting for local mode (LOCAL_HEAP_SHARE), or nothing when the profile's is as large."""
    share = int(machine_gib * LOCAL_HEAP_SHARE)
    profile_gib = memory_gib(props.get("spark.driver.memory", "1g"))
    return {"spark.driver.memory": f"{share}g"} if share > profile_gib else {}


def rapids_shuffle_classpath(props: dict[str, str], rapids_jar: Path) -> dict[str, str]:
    """The class paths the RAPIDS shuffle manager needs, where ``props`` name it (else nothing): Spark creates a
    shuffle manager as its driver and executors start, from their own class path, before the jars of ``--jars``
    are loaded, so the plugin's jar goes first on both (any class path given stays after it; on a cluster of
    several hosts the jar must be at that path on each of them). Its class must be the shim of this Spark."""
    manager = props.get("spark.shuffle.manager", "").strip()
    shim = RAPIDS_SHUFFLE_MANAGER.fullmatch(manager)
    if not shim:
        return {}
    spark = pkg_metadata.version("pyspark")
    want = "".join(spark.split(".")[:3])
    if shim.group(1) != want:
        raise SubmitError(f"spark.shuffle.manager {manager} is the RAPIDS shuffle manager for another Spark than "
                          f"this one ({spark}): set it to com.nvidia.spark.rapids.spark{want}.RapidsShuffleManager")
    return class_paths_with(props, rapids_jar)


def class_paths_with(props: dict[str, str], jar: Path) -> dict[str, str]:
    """The driver's and executors' class paths with ``jar`` first (any class path given keeps its place after it)."""
    return {key: os.pathsep.join(p for p in (str(jar), props.get(key, "").strip()) if p)
            for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath")}


def natives_classpath(props: dict[str, str], natives: Path, rapids_jar: Path) -> dict[str, str]:
    """The driver's and executors' class paths with the uncompressed native libraries (jars.natives_jar) first, where
    the properties run on a GPU, the jar is built and NATIVES_JAR_KEY is not false (else nothing): cuDF then copies
    them out of it instead of inflating them from the plugin's jar as each JVM starts. A natives jar older than the
    plugin's jar may hold another build's libraries, which the plugin's classes must not meet: it is left out, with a
    warning naming the fix."""
    if (not profiles.needs_gpu(props) or not natives.is_file()
            or props.get(jars.NATIVES_JAR_KEY, "true").strip().lower() == "false"):
        return {}
    if not jars.natives_current(natives, rapids_jar):
        print(f"warning: {natives} is older than {rapids_jar.name}, so cuDF's libraries come from the plugin's jar "
              f"(slower to start): run scripts/setup (or python -m jobs.launch.jars) to rebuild it", file=sys.stderr)
        return {}
    return class_paths_with(props, natives)


def spark_submit_command(profile: str, master: str, job: str, job_args: list[str], extra_conf: list[str],
                         workdir: Path) -> tuple[list[str], dict[str, str], classes.Archive | None]:
    """spark-submit's command line and environment for ``job``, and the driver's class archive (``jobs.launch.classes``:
    mapped where one exists; written by a pipeline run where none does), whose ``finish`` the caller calls after."""
    if job.endswith(".py"):
        if not Path(job).is_file():
            raise SubmitError(f"no application file {job}: give a job ({', '.join(runner.job_names())}) "
                              "or the path of a PySpark application file")
        job = str(Path(job).resolve())
    elif job not in runner.job_names():
        raise SubmitError(f"unknown job {job!r}; jobs: {', '.join(runner.job_names())}, "
                          "or a PySpark application file (.py)")
    try:
        props = profiles.load_profile(profile)
    except profiles.ProfileError as e:
        raise SubmitError(str(e)) from None
    try:
        jar_paths = jars.jars_for(rapids=profiles.uses_rapids(props))
    except jars.MissingJarsError as e:
        raise SubmitError(str(e)) from None
    if profiles.needs_gpu(props) and master.startswith("local") and not has_local_gpu():
        raise SubmitError(
            f"profile {profile!r} runs on NVIDIA GPUs, but this machine has none (nvidia-smi finds no GPU). "
            "Use --profile cpu, or --profile gpu-explain to see what would run on a GPU, "
            "or submit to a cluster with GPU executors (--master)."
        )
    refuse_local_gpu_requests(master, extra_conf)
    props = settings.check(for_master(props, master), extra_conf)
    if profiles.uses_rapids(props):
        on_class_path = rapids_shuffle_classpath(props, jars.JARS_DIR / jars.RAPIDS_JAR)
        props.update(on_class_path)
        if on_class_path:   # not in --jars too: each executor would fetch its 600 MB from the driver as it starts
            jar_paths = [p for p in jar_paths if p.name != jars.RAPIDS_JAR]
        props.update(natives_classpath(props, jars.natives_jar(), jars.JARS_DIR / jars.RAPIDS_JAR))
    props = jit.for_driver(props, master)
    env = dict(os.environ)
    archive = classes.for_driver(props, env, spark_home(), jar_paths, write=job == "pipeline")
    props = classes.with_options(props, archive)
    props_file = profiles.write_properties(props, workdir / "spark.properties")
    pyfiles = build_pyfiles(workdir / "jobs.zip")
    spark_submit = spark_home() / "bin" / "spark-submit"
    cmd = [str(spark_submit), "--master", master, "--properties-file", str(props_file),
           "--jars", ",".join(str(p) for p in jar_paths), "--py-files", str(pyfiles),
           str(APP), job, *job_args]
    # Executors on this machine (local, or a standalone cluster on the same host) use this venv's Python;
    # on a cluster set PYSPARK_PYTHON to the executors' interpreter that has the pinned packages.
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return cmd, env, archive


def options(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, add_help=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="cpu", help="cpu (default), gpu or gpu-explain: a file under conf/; "
                                                    "scripts/pipeline also takes auto (scripts/advise chooses)")
    p.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark property")
    p.add_argument("--dry-run", action="store_true", help="print the spark-submit command, run nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    """scripts/submit."""
    p = options("scripts/submit")
    p.add_argument("-h", "--help", action="help")
    p.add_argument("job", help=f"one of: {', '.join(runner.job_names())}, or a PySpark application file (.py)")
    p.add_argument("job_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    return submit(args, args.job, args.job_args, "submit")


# The event log also keeps, per Spark stage and executor, the peaks of the executor's memory metrics (JVM heap and
# off-heap, execution and storage memory), sampled every 100 ms rather than at each 10 s heartbeat, which short
# stages would slip between (at 250 ms a small run's score stage sometimes did): jobs/lake/eventlog.py reads them per
# pipeline stage (scripts/bench-memory); the history server shows them per stage. The resident memory of the JVM and
# of its Python workers (``eventlog.PROCESS_MEMORY``) is left to whoever asks for it with --conf (scripts/bench-memory
# does): Spark finds the process tree by starting ``pgrep`` once per process at every sample, ten samples a second,
# which on 2 cores took a fifth of the machine (a 20k-customer pipeline 1.24x the wall time, twice the
# system time). A user's --conf wins over these.
MEMORY_PEAKS = ("spark.eventLog.logStageExecutorMetrics=true", "spark.executor.metrics.pollingInterval=100ms")


def pipeline_main(argv: list[str] | None = None) -> int:
    """scripts/pipeline: the pipeline job, with Spark's event log in <out>/eventlog."""
    ns, rest = options("scripts/pipeline").parse_known_args(argv)
    if "-h" in rest or "--help" in rest:
        print(__doc__)
        runner.job("pipeline").parser().print_help()
        return 0
    try:
        args = runner.job("pipeline").parse(rest)
    except UserError as e:
        print(f"pipeline: error: {e}", file=sys.stderr)
        return 2
    try:
        lock.check_free(runner.output_folder(runner.job("pipeline"), args))  # the driver takes it; say so early
        if ns.profile == "auto":
            ns.profile, advised = auto_profile(args, ns.master)
            ns.conf = [*advised, *ns.conf]          # the user's own --conf values come later and win
    except UserError as e:
        print(f"pipeline: error: {e}", file=sys.stderr)
        return 2
    eventlog = Path(args["out"]) / "eventlog"
    eventlog.mkdir(parents=True, exist_ok=True)
    ns.conf = [*MEMORY_PEAKS, *ns.conf, "spark.eventLog.enabled=true", f"spark.eventLog.dir={eventlog.as_uri()}"]
    return submit(ns, "pipeline", [*rest, "--out", args["out"], "--as-of", args["as_of"]], "pipeline", checked=True)


def auto_profile(args: dict, master: str) -> tuple[str, list[str]]:
    """--profile auto: the advisor's choice for this machine (jobs.advise), said in one line."""
    from jobs.advise.advisor import auto

    advice, conf = auto(args.get("input"), args.get("customers"), master)
    best = advice.recommended
    others = ", ".join(f"{c.profile} {c.total_s:.0f} s" for c in advice.candidates if c is not best)
    print(f"pipeline: --profile auto: {best.profile} (estimated {best.total_s:.0f} s"
          + (f"; {others}" if others else "") + ")"
          + (f" with {' '.join('--conf ' + c for c in conf)}" if conf else "")
          + "; scripts/advise --input DIR says why", file=sys.stderr)
    return best.profile, conf


def submit(ns: argparse.Namespace, job: str, job_args: list[str], prog: str, checked: bool = False) -> int:
    """spark-submit for ``job``; its arguments are checked first unless the caller has (``checked``)."""
    with tempfile.TemporaryDirectory(prefix="submit-") as tmp:
        try:
            cmd, env, archive = spark_submit_command(ns.profile, ns.master, job, job_args, ns.conf, Path(tmp))
            if not checked and job in runner.job_names():
                runner.job(job).parse(job_args)  # the job's own arguments, checked before Spark starts
        except (SubmitError, UserError) as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
        if ns.dry_run:
            print(" ".join(cmd))
            return 0
        returncode = subprocess.call(cmd, env=env)
        if archive is not None:
            archive.finish(returncode)
        return returncode


if __name__ == "__main__":
    sys.exit(main())
