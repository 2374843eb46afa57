"""The driver's class archive (jobs.launch.classes): written by one real JVM as it exits, mapped by the next, keyed by
the java and the jars, replaced whole or not at all."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from jobs.launch import classes, jit, profiles, submit


def spark_java(archive: classes.Archive | None, *extra: str) -> subprocess.CompletedProcess:
    """Spark's launcher class on Spark's own jars (``--version``: it loads Spark's and Scala's classes, prints the
    version and exits), with the archive's options (none for None)."""
    class_path = os.pathsep.join(str(p) for p in classes.driver_class_path(submit.spark_home(), {}, []))
    options = archive.options().split() if archive is not None else []
    return subprocess.run([str(classes.java_binary(dict(os.environ))), *options, *extra,
                           "-cp", class_path, "org.apache.spark.deploy.SparkSubmit", "--version"],
                          capture_output=True, text=True, timeout=120)


def test_a_driver_writes_the_archive_as_it_exits_and_the_next_one_loads_sparks_classes_from_it(tmp_path):
    home = submit.spark_home()
    first = classes.for_driver({}, dict(os.environ), home, [], write=True, folder=tmp_path)
    assert first.writing is not None and not first.path.exists()
    out = spark_java(first)
    assert "version" in out.stdout + out.stderr and "cds" not in out.stdout + out.stderr, out.stderr[-2000:]
    first.finish(out.returncode)
    assert first.path.is_file() and not first.writing.exists()
    assert [p.name for p in tmp_path.iterdir()] == [first.path.name]

    second = classes.for_driver({}, dict(os.environ), home, [], write=True, folder=tmp_path)
    assert second.path == first.path and second.writing is None
    loaded = spark_java(second, "-Xlog:class+load=info").stdout.splitlines()
    spark = [line for line in loaded if " org.apache.spark." in line]
    shared = [line for line in spark if line.endswith("source: shared objects file (top)")]
    from_jars = [line for line in spark if "source: jar:" in line or "source: file:" in line]
    # Without the archive every Spark class comes from its jar ("source: jar:file:..."); with it none does (the
    # lambdas' classes the JVM spins at run time, "source: org.apache.spark...", are neither).
    assert len(shared) > 50 and from_jars == [], (len(shared), from_jars[:5])


def test_a_failed_driver_leaves_no_archive_and_a_new_one_replaces_the_old(tmp_path):
    home = submit.spark_home()
    failed = classes.for_driver({}, dict(os.environ), home, [], write=True, folder=tmp_path)
    failed.writing.write_bytes(b"half an archive")
    failed.finish(1)
    assert list(tmp_path.iterdir()) == []

    others = [tmp_path / f"driver-{n:016x}.jsa" for n in range(classes.KEPT)]   # other class paths', oldest first
    for age, other in enumerate(others):
        other.write_bytes(b"an archive of another class path")
        os.utime(other, (1_000_000 + age, 1_000_000 + age))
    dead = tmp_path / "driver-0123456789abcdef.999999999.part"   # a writer killed on its way
    dead.write_bytes(b"part")
    alive = tmp_path / f"driver-0123456789abcdef.{os.getpid()}.part"   # one still writing
    alive.write_bytes(b"part")
    done = classes.for_driver({}, dict(os.environ), home, [], write=True, folder=tmp_path)
    done.writing.write_bytes(b"a whole archive")
    done.finish(0)
    kept = [done.path, *others[1:]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, *(p.name for p in kept)])


def driver_options(tmp_path, job: str, *conf: str) -> str:
    cmd, *_ = submit.spark_submit_command("cpu", "local[2]", job, [], list(conf), tmp_path)
    return profiles.read_conf(Path(cmd[cmd.index("--properties-file") + 1]))[classes.DRIVER_OPTIONS]


def test_scripts_pipeline_writes_the_archive_and_every_job_maps_it_after_the_profiles_own_options(tmp_path,
                                                                                                   monkeypatch):
    monkeypatch.setattr(classes, "ARCHIVE_DIR", tmp_path / "archive")
    # the profile's options, then (local[2]: two task slots) the compiler directive for generated code
    own = profiles.load_profile("cpu")[classes.DRIVER_OPTIONS] + " " + jit.OPTIONS
    assert "-XX:ArchiveClassesAtExit=" not in driver_options(tmp_path, "tools/smoke.py")   # none yet: no job writes
    writing = driver_options(tmp_path, "pipeline")
    assert writing.startswith(own + " -XX:ArchiveClassesAtExit=" + str(tmp_path / "archive" / "driver-"))
    part = Path(writing.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
    archive = part.with_name(part.name.split(".")[0] + ".jsa")
    archive.write_bytes(b"an archive")
    for job in ("pipeline", "tools/smoke.py"):
        assert driver_options(tmp_path, job) == f"{own} -XX:SharedArchiveFile={archive} {classes.QUIET}"
    assert driver_options(tmp_path, "pipeline", f"{classes.CLASS_ARCHIVE_KEY}=false") == own


def test_a_java_that_cannot_write_an_archive_is_not_asked_to(tmp_path):
    # Without compressed class pointers this JDK maps no base archive, and a JVM asked to write one on top of it
    # would not start: the driver gets no archive options and starts as it would without them.
    props = {classes.DRIVER_OPTIONS: "-XX:-UseCompressedClassPointers", "spark.driver.memory": "512"}
    assert classes.for_driver(props, dict(os.environ), submit.spark_home(), [], write=True, folder=tmp_path) is None
    assert classes.for_driver({"spark.driver.memory": "512"}, dict(os.environ), submit.spark_home(), [], write=True,
                              folder=tmp_path) is not None
    assert [p.name for p in tmp_path.iterdir()] == []   # the trials leave nothing


def test_the_archive_is_keyed_by_every_jar_and_is_left_out_where_the_setting_says(tmp_path):
    home = submit.spark_home()
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"one")
    key = lambda: classes.for_driver({}, dict(os.environ), home, [jar], write=True, folder=tmp_path).path  # noqa: E731
    before = key()
    jar.write_bytes(b"two, longer")
    assert key() != before
    on_class_path = classes.for_driver({"spark.driver.extraClassPath": str(jar)}, dict(os.environ), home, [],
                                       write=True, folder=tmp_path).path
    assert on_class_path != key()

    assert classes.for_driver({classes.CLASS_ARCHIVE_KEY: "false"}, dict(os.environ), home, [], write=True,
                              folder=tmp_path) is None
    assert classes.for_driver({}, dict(os.environ), home, [], write=False, folder=tmp_path) is None   # none yet
    archive = classes.Archive(tmp_path / "driver-x.jsa", None)
    props = classes.with_options({classes.DRIVER_OPTIONS: "-XX:+UseParallelGC"}, archive)
    assert props[classes.DRIVER_OPTIONS] == f"-XX:+UseParallelGC -XX:SharedArchiveFile={tmp_path}/driver-x.jsa " \
                                            f"{classes.QUIET}"


def test_a_driver_started_with_a_flight_recording_or_a_java_agent_is_not_given_the_archive(tmp_path):
    # This JDK's JVM dies (SIGSEGV) mapping a dynamic archive under a flight recording started with it, or a Java
    # agent that transforms classes: such a driver starts without the archive, wherever its options come from.
    home = submit.spark_home()
    writer = classes.for_driver({}, dict(os.environ), home, [], write=True, folder=tmp_path)
    writer.finish(spark_java(writer).returncode)
    assert classes.for_driver({}, dict(os.environ), home, [], write=True, folder=tmp_path).path == writer.path
    recording = f"-XX:StartFlightRecording=filename={tmp_path}/driver.jfr"
    for props, env in (({classes.DRIVER_OPTIONS: f"-Xss4m {recording}"}, {}),
                       ({}, {"JAVA_TOOL_OPTIONS": recording}),
                       ({}, {"JDK_JAVA_OPTIONS": "-javaagent:/opt/agents/tracer.jar"}),
                       ({classes.DRIVER_OPTIONS: "-agentpath:/opt/profiler/libprofiler.so"}, {})):
        assert classes.for_driver(props, {**os.environ, **env}, home, [], write=True, folder=tmp_path) is None, props
    started = spark_java(None, recording)
    assert started.returncode == 0 and (tmp_path / "driver.jfr").is_file(), started.stderr[-2000:]
