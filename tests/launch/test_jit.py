"""The driver's compiler directive (jobs.launch.jit): which masters get it, and a real JVM that reads the project's
directive file and compiles a hot method of a class named as Spark names its generated code with C1 alone, while the
same method of another class reaches C2."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from jobs.core.errors import UserError
from jobs.launch import classes, jit

OWN = "-XX:+UseParallelGC"
WITH = f"{OWN} {jit.OPTIONS}"


@pytest.mark.parametrize("master, cores, options", [
    ("local[2]", 16, WITH),            # the README's machine: two task slots
    ("local", 16, WITH),
    ("local[4, 3]", 16, WITH),          # slots, retries
    ("local[*]", 2, WITH),
    ("local[*]", 16, OWN),              # a machine whose C2 threads keep up
    ("local[8]", 2, OWN),
    ("spark://127.0.0.1:7077", 2, OWN),  # a cluster's driver runs no task
])
def test_auto_gives_the_directive_to_a_local_driver_of_at_most_four_task_slots(monkeypatch, master, cores, options):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert jit.for_driver({classes.DRIVER_OPTIONS: OWN}, master)[classes.DRIVER_OPTIONS] == options


def test_the_key_forces_it_on_or_off_and_a_drivers_own_directives_file_stands():
    on = jit.for_driver({jit.GENERATED_C1_KEY: "true"}, "spark://127.0.0.1:7077")
    assert on[classes.DRIVER_OPTIONS] == jit.OPTIONS
    off = {jit.GENERATED_C1_KEY: " False ", classes.DRIVER_OPTIONS: OWN}
    assert jit.for_driver(off, "local[2]") == off
    own = {classes.DRIVER_OPTIONS: "-XX:+UnlockDiagnosticVMOptions -XX:CompilerDirectivesFile=/etc/mine.json"}
    assert jit.for_driver(own, "local[2]") == own
    with pytest.raises(UserError, match=r"spark\.churn\.jvm\.generatedCodeC1='sometimes' is not auto, true or false"):
        jit.for_driver({jit.GENERATED_C1_KEY: "sometimes"}, "local[2]")


HOT = """
    static long work(long n) {
        long s = 0;
        for (long i = 0; i < n; i++) s += i ^ (s >>> 3);
        return s;
    }
"""
PROGRAM = f"""
package org.apache.spark.sql.catalyst.expressions;

public class GeneratedClass {{
    {HOT}
    public static void main(String[] args) {{
        long t = 0;
        for (int k = 0; k < 40000; k++) t += work(2000) + Plain.work(2000);
        System.out.println(t);
    }}
}}

class Plain {{
    {HOT}
}}
"""


def test_a_real_jvm_reads_the_directive_and_compiles_generated_classes_with_c1_alone(tmp_path):
    source = tmp_path / "GeneratedClass.java"
    source.write_text(PROGRAM)
    java = str(classes.java_binary(dict(os.environ)))
    out = subprocess.run([java, *jit.OPTIONS.split(), "-XX:+PrintCompilation", str(source)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "1 compiler directives added" in out.stdout
    levels = {name: {int(m.group(1)) for m in re.finditer(
        rf"^\s*\d+\s+\d+\s+[%sbn! ]*(\d)\s+org\.apache\.spark\.sql\.catalyst\.expressions\.{name}::work ", out.stdout,
        re.M)} for name in ("GeneratedClass", "Plain")}
    assert 4 in levels["Plain"], out.stdout[-3000:]
    assert levels["GeneratedClass"] and 4 not in levels["GeneratedClass"], levels
