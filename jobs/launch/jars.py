"""Where the JVM jars live (build/jars, filled by ``gradle jars``; build/jvm, by ``gradle jvmJar``) and
which a profile needs."""
from __future__ import annotations

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
