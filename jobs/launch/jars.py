"""Where the JVM jars live (build/jars, filled by ``gradle jars``; build/generator, by ``gradle generatorJar``) and
which a profile needs."""
from __future__ import annotations

from pathlib import Path

JARS_DIR = Path(__file__).resolve().parents[2] / "build" / "jars"
DELTA_JARS = ("delta-spark_2.12-3.3.2.jar", "delta-storage-3.3.2.jar")
RAPIDS_JAR = "rapids-4-spark_2.12-25.04.0.jar"
# The generator's data source (jvm/), built by ``gradle generatorJar`` (scripts/setup).
GENERATOR_JAR = JARS_DIR.parent / "generator" / "churn-generate.jar"


class MissingJarsError(FileNotFoundError):
    pass


def jars_for(rapids: bool, jars_dir: Path = JARS_DIR) -> list[Path]:
    names = list(DELTA_JARS) + ([RAPIDS_JAR] if rapids else [])
    paths = [jars_dir / n for n in names] + [jars_dir.parent / "generator" / GENERATOR_JAR.name]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise MissingJarsError(
            f"missing jars: {', '.join(missing)}. Run scripts/setup (it runs 'gradle jars generatorJar')."
        )
    return paths
