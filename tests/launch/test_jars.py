"""The jars (jobs.launch.jars): exactly gradle's pins, built once, and a missing jar naming its fix."""
from __future__ import annotations

import subprocess

import pytest

from jobs.launch import jars
from tests.support.sessions import ROOT


def test_gradle_jars_are_exactly_the_pins_and_a_second_run_fetches_nothing():
    names = sorted(p.name for p in jars.JARS_DIR.iterdir())
    assert names == sorted([*jars.DELTA_JARS, jars.RAPIDS_JAR])
    built = [*jars.JARS_DIR.iterdir(), jars.JVM_JAR]
    before = {p: p.stat().st_mtime_ns for p in built}
    out = subprocess.run(["gradle", "--offline", "--console=plain", "jars", "jvmJar"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ":jars UP-TO-DATE" in out.stdout and ":jvmJar UP-TO-DATE" in out.stdout
    assert {p: p.stat().st_mtime_ns for p in built} == before


def test_missing_jars_name_the_fix(tmp_path):
    with pytest.raises(jars.MissingJarsError, match="Run scripts/setup") as e:
        jars.jars_for(rapids=True, jars_dir=tmp_path / "jars")
    assert "churn-jvm.jar" in str(e.value) and jars.RAPIDS_JAR in str(e.value)
