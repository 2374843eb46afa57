"""Where the JVM jars live (build/jars, filled by ``gradle jars``; build/jvm, by ``gradle jvmJar``; build/natives, by
``python -m jobs.launch.jars``) and which a profile needs."""
from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JARS_DIR = ROOT / "build" / "jars"


def versions(path: Path = ROOT / "gradle.properties") -> dict[str, str]:
    """The jar versions of gradle.properties (the one place they are set)."""
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.strip().startswith("#"):
            out[key.strip()] = value.strip()
    return out


_V = versions()
DELTA_JARS = (f"delta-spark_2.12-{_V['deltaVersion']}.jar", f"delta-storage-{_V['deltaVersion']}.jar")
RAPIDS_JAR = f"rapids-4-spark_2.12-{_V['rapidsVersion']}.jar"
# The project's own data sources (jvm/: the generator, the CSV reader), built by ``gradle jvmJar`` (scripts/setup).
JVM_JAR = JARS_DIR.parent / "jvm" / "churn-jvm.jar"


# cuDF's native libraries ride in the RAPIDS jar deflated (libcudf.so: 715 MB, 455 MB compressed), and cuDF writes each
# one to a temporary file before it loads it, so every JVM that runs on a GPU inflates them as it starts. The same
# entries stored uncompressed in a jar of their own, ahead of the plugin's jar on the class path (cuDF finds them as
# class path resources, first match wins), make that a plain copy. Built where a GPU is (scripts/setup,
# scripts/gpu-validate install); spark.churn.rapids.nativesJar=false leaves it off the class path.
NATIVES_DIR = JARS_DIR.parent / "natives"
NATIVES_JAR_KEY = "spark.churn.rapids.nativesJar"


def natives_jar() -> Path:
    return NATIVES_DIR / f"rapids-natives-{_V['rapidsVersion']}.jar"


def natives_current(natives: Path, rapids_jar: Path) -> bool:
    """Whether ``natives`` exists and is no older than the plugin's jar it was built from: an older one may hold
    another build's libraries, which the plugin's classes must not meet."""
    return natives.is_file() and (not rapids_jar.is_file() or natives.stat().st_mtime >= rapids_jar.stat().st_mtime)


def build_natives_jar(rapids_jar: Path | None = None, out: Path | None = None) -> Path:
    """Every native library (``*.so``) of the RAPIDS jar, at the same path, stored uncompressed in ``out``; written
    to a temporary name and renamed, so a jar at ``out`` is always whole."""
    rapids_jar = rapids_jar or JARS_DIR / RAPIDS_JAR
    out = out or natives_jar()
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    with zipfile.ZipFile(rapids_jar) as src, zipfile.ZipFile(part, "w", zipfile.ZIP_STORED) as dst:
        libs = [i for i in src.infolist() if i.filename.endswith(".so")]
        if not libs:
            raise MissingJarsError(f"{rapids_jar} holds no native libraries (*.so): is it the RAPIDS plugin's jar?")
        for info in libs:
            entry = zipfile.ZipInfo(info.filename, info.date_time)
            with src.open(info) as r, dst.open(entry, "w", force_zip64=True) as w:
                while chunk := r.read(1 << 22):
                    w.write(chunk)
    os.replace(part, out)
    return out


class MissingJarsError(FileNotFoundError):
    pass


def jars_for(rapids: bool, jars_dir: Path = JARS_DIR) -> list[Path]:
    names = list(DELTA_JARS) + ([RAPIDS_JAR] if rapids else [])
    paths = [jars_dir / n for n in names] + [jars_dir.parent / "jvm" / JVM_JAR.name]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise MissingJarsError(
            f"missing jars: {', '.join(missing)}. Run scripts/setup (it runs 'gradle jars jvmJar')."
        )
    return paths


if __name__ == "__main__":   # python -m jobs.launch.jars [RAPIDS_JAR]: the natives jar, built unless it is current
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else JARS_DIR / RAPIDS_JAR
    if natives_current(natives_jar(), source):
        print(f"{natives_jar()} up to date")
    else:
        print(f"unpacking cuDF's native libraries into {build_natives_jar(source)}")
