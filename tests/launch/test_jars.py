"""The jars (jobs.launch.jars): exactly gradle's pins, built once, a missing jar naming its fix, and the natives jar
(cuDF's libraries uncompressed) found first by a JVM."""
from __future__ import annotations

import os
import subprocess
import zipfile

import pytest

from jobs.launch import jars
from tests.support.sessions import ROOT


def test_gradle_jars_are_exactly_the_pins_and_a_second_run_fetches_nothing():
    names = sorted(p.name for p in jars.JARS_DIR.iterdir())
    assert names == sorted([*jars.DELTA_JARS, jars.RAPIDS_JAR])
    built = [*jars.JARS_DIR.iterdir(), jars.JVM_JAR]
    before = {p: p.stat().st_mtime_ns for p in built}
    out = subprocess.run(["gradle", "--no-daemon", "--offline", "--console=plain", "jars", "jvmJar"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ":jars UP-TO-DATE" in out.stdout and ":jvmJar UP-TO-DATE" in out.stdout
    assert {p: p.stat().st_mtime_ns for p in built} == before


def test_missing_jars_name_the_fix(tmp_path):
    with pytest.raises(jars.MissingJarsError, match="Run scripts/setup") as e:
        jars.jars_for(rapids=True, jars_dir=tmp_path / "jars")
    assert "churn-jvm.jar" in str(e.value) and jars.RAPIDS_JAR in str(e.value)


@pytest.fixture(scope="module")
def natives(tmp_path_factory):
    return jars.build_natives_jar(out=tmp_path_factory.mktemp("natives") / "natives.jar")


def test_the_natives_jar_holds_the_plugins_native_libraries_uncompressed(natives):
    """cuDF looks its libraries up as ``<os.arch>/<os.name>/lib<name>.so`` class path resources (libcudf.so among
    them, 715 MB); the natives jar holds every ``.so`` of the plugin's jar at the same path with the same bytes
    (CRC-32 and size), stored, where the plugin's jar deflates them."""
    with zipfile.ZipFile(jars.JARS_DIR / jars.RAPIDS_JAR) as z:
        plugin = {i.filename: i for i in z.infolist() if i.filename.endswith(".so")}
    with zipfile.ZipFile(natives) as z:
        ours = {i.filename: i for i in z.infolist()}
    assert {"amd64/Linux/libcudf.so", "amd64/Linux/libcudfjni.so", "amd64/Linux/libnvcomp.so"} <= set(ours)
    assert set(ours) == set(plugin)
    assert plugin["amd64/Linux/libcudf.so"].compress_type == zipfile.ZIP_DEFLATED
    for name, info in ours.items():
        assert info.compress_type == zipfile.ZIP_STORED and info.compress_size == info.file_size, name
        assert (info.CRC, info.file_size) == (plugin[name].CRC, plugin[name].file_size), name
    assert not list(natives.parent.glob("*.part"))


CUDF_LOOKUP = """
public class Lookup {
    public static void main(String[] a) throws Exception {
        // the class loader cuDF's NativeDepsLoader asks, and the name it asks for libcudf.so (not initialised:
        // its static block would load the libraries)
        ClassLoader l = Class.forName("ai.rapids.cudf.NativeDepsLoader", false,
                                      ClassLoader.getSystemClassLoader()).getClassLoader();
        System.out.println(l.getResource(System.getProperty("os.arch") + "/" + System.getProperty("os.name") + "/"
                                         + System.mapLibraryName("cudf")));
    }
}
"""


def test_a_jvm_with_the_natives_jar_first_finds_cudf_there(natives, tmp_path):
    """The class path scripts/submit gives a GPU JVM (the natives jar, then the plugin's): the resource cuDF copies
    libcudf.so from is the natives jar's; without it, the plugin's."""
    src = tmp_path / "Lookup.java"
    src.write_text(CUDF_LOOKUP)
    plugin = jars.JARS_DIR / jars.RAPIDS_JAR

    def lookup(*class_path):
        out = subprocess.run(["java", "-cp", os.pathsep.join(map(str, class_path)), str(src)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert lookup(natives, plugin) == f"jar:file:{natives}!/amd64/Linux/libcudf.so"
    assert lookup(plugin) == f"jar:file:{plugin}!/amd64/Linux/libcudf.so"
