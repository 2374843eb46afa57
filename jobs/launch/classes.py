"""The driver's class archive: the JVM classes a pipeline run loads, kept parsed and verified in one file that the next
driver maps at start (the JDK's application class-data sharing, a dynamic archive: ``-XX:ArchiveClassesAtExit`` /
``-XX:SharedArchiveFile``).

A Spark driver loads ~21,000 classes (Spark, Scala, Hadoop, Delta, Jackson, Netty...), each read from its jar, parsed
and verified before it runs, on the cores the first stages want: on the README's 2-core machine a start-up-bound job
ran ~6 s faster from the archive (docs/jvm.md). The first ``scripts/pipeline`` run without an archive
writes one as its driver exits (a few seconds, ~200 MB under build/class-archive/); every later driver, of any job,
maps it. One archive per Java and class path (the key below): a new jar, JDK or class path makes a new one, and
the newest KEPT are kept. The JVM checks the archive against its own class path and Java build as it starts and, on
any mismatch, loads classes from the jars as usual, so a stale archive costs speed, never a wrong class.
``spark.churn.jvm.classArchive=false`` leaves it out. Only the driver: on ``local[*]`` it is the one executor; a
cluster's executors start as usual.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from jobs.launch.jars import ROOT

ARCHIVE_DIR = ROOT / "build" / "class-archive"
CLASS_ARCHIVE_KEY = "spark.churn.jvm.classArchive"
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
# The JVM's notes on classes it cannot archive (thousands, harmless: e.g. classes of old class file versions, and
# Spark's generated code) and on a mismatched archive stay out of the job's output.
QUIET = "-Xlog:cds*=off"
KEPT = 3   # archives kept, the newest first
# Java options the archive is left out with: the user's own class sharing, which stands alone; and what this JDK's JVM
# (Debian's 17.0.15) dies with, of SIGSEGV, as it maps a dynamic archive: a flight recording started with the JVM
# (-XX:StartFlightRecording; one started later with jcmd is fine) and a Java agent that transforms classes (JaCoCo,
# tracing agents); native agents (-agentpath, -agentlib) too, as they can set the same class-load hook.
NOT_WITH = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare", "StartFlightRecording", "-javaagent",
            "-agentpath", "-agentlib")
# Where else a user's Java options can come from: the JVM reads both as it starts.
JAVA_OPTIONS_ENV = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")


def java_binary(env: dict[str, str]) -> Path | None:
    """The java spark-submit runs: $JAVA_HOME/bin/java, else the one on PATH (spark-class's rule)."""
    home = env.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java", path=env.get("PATH"))
    return Path(found).resolve() if found and Path(found).is_file() else None


def archive_key(java: Path, class_path: list[Path]) -> str:
    """A digest of what an archive depends on: the java binary and every jar the driver loads classes from (path,
    size, modification time), in class-path order."""
    digest = hashlib.sha256()
    for p in (java, *class_path):
        try:
            st = p.stat()
            digest.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{p}\0missing\n".encode())
    return digest.hexdigest()[:16]


def driver_class_path(spark_home: Path, props: dict[str, str], jars: list[Path]) -> list[Path]:
    """The driver's jars: the properties' extra class path, Spark's own jars, then those of ``--jars``."""
    extra = [Path(p) for p in props.get("spark.driver.extraClassPath", "").split(os.pathsep) if p.strip()]
    return [*extra, *sorted((spark_home / "jars").glob("*.jar")), *jars]


class Archive:
    """What one driver does with the class archive: ``options`` for its JVM; ``finish`` after it exits."""

    def __init__(self, path: Path, writing: Path | None):
        self.path, self.writing = path, writing

    def options(self) -> str:
        if self.writing is not None:
            return f"-XX:ArchiveClassesAtExit={self.writing} {QUIET}"
        return f"-XX:SharedArchiveFile={self.path} {QUIET}"

    def finish(self, returncode: int) -> None:
        """A written archive becomes the one later drivers of its key map (renamed whole, so a reader never meets a
        part), if the driver ended well; of the others, the newest KEPT stay (e.g. the cpu and gpu profiles' class
        paths), and the parts of writers that are gone are removed (one archive is ~200 MB)."""
        if self.writing is None:
            return
        try:
            if returncode == 0 and self.writing.is_file() and self.writing.stat().st_size > 0:
                os.replace(self.writing, self.path)
                archives = sorted(self.path.parent.glob("driver-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
                parts = [p for p in self.path.parent.glob("driver-*.part") if not writer_alive(p)]
                for old in [*archives[KEPT:], *parts]:
                    old.unlink(missing_ok=True)
            self.writing.unlink(missing_ok=True)
        except OSError:
            pass   # an archive is a speed-up only: a folder we cannot tidy costs disk, never the run


def writer_alive(part: Path) -> bool:
    """Whether the process that names an archive being written (``driver-KEY.PID.part``) still runs."""
    try:
        os.kill(int(part.name.split(".")[-2]), 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def for_driver(props: dict[str, str], env: dict[str, str], spark_home: Path, jars: list[Path],
               write: bool, folder: Path | None = None) -> Archive | None:
    """The archive this driver maps (one exists for its key), or writes (none does, and ``write``: a run that loads
    most of the classes, the pipeline's), or None (off, no java found, or neither). ``folder``: ARCHIVE_DIR."""
    folder = folder or ARCHIVE_DIR
    if props.get(CLASS_ARCHIVE_KEY, "true").strip().lower() == "false":
        return None
    java = java_binary(env)
    if java is None:
        return None
    path = folder / f"driver-{archive_key(java, driver_class_path(spark_home, props, jars))}.jsa"
    own = " ".join([props.get(DRIVER_OPTIONS, ""), *(env.get(name, "") for name in JAVA_OPTIONS_ENV)])
    if any(flag in own for flag in NOT_WITH):
        return None
    if path.is_file():
        return Archive(path, None)
    if not write:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    archive = Archive(path, path.with_name(f"{path.stem}.{os.getpid()}.part"))
    return archive if can_write(java, props, archive) else None


def can_write(java: Path, props: dict[str, str], archive: Archive) -> bool:
    """Whether this java, with the driver's heap and VM options, can write an archive: a JVM that does not load the
    JDK's own base archive (a JDK shipped without one, or options it was not built for) refuses to start at all when
    asked to write one, where it only ignores an archive it cannot map. Tried once, on ``java -version``, before a
    driver is asked to write."""
    vm = [o for o in shlex.split(props.get(DRIVER_OPTIONS, "")) if o.startswith("-XX:")]
    heap = props.get("spark.driver.memory", "").strip()
    heap = f"{heap}m" if heap.isdigit() else heap   # Spark reads a bare number as MiB, java as bytes
    try:
        out = subprocess.run([str(java), *([f"-Xmx{heap}"] if heap else []), *vm, *archive.options().split(),
                              "-version"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        if archive.writing is not None:
            archive.writing.unlink(missing_ok=True)
    return out.returncode == 0


def with_options(props: dict[str, str], archive: Archive | None) -> dict[str, str]:
    """``props`` with the archive's options after the driver's own Java options."""
    if archive is None:
        return dict(props)
    own = props.get(DRIVER_OPTIONS, "").strip()
    return {**props, DRIVER_OPTIONS: f"{own} {archive.options()}".strip()}
