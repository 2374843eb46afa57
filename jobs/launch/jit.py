"""The driver JVM's compilers under a local master on a few cores: Spark's generated classes left to C1.

Each query's whole-stage code and projections are classes of their own (``...expressions.GeneratedClass$...``),
compiled by Janino and then, as they run hot, by HotSpot's C1 and then C2. On 2 cores the JVM has one C2 thread, and
its queue never empties during a run (docs/jvm.md): the C2 time spent on one query's generated code serves that query
alone, while Spark's, Parquet's and Delta's own methods serve every query after. A compiler directive
(``conf/jit-generated-c1.json``, ``c2: {Exclude: true}`` on the generated classes) keeps them at C1 and leaves C2 to
the rest: the whole pipeline on 2 cores took 0.82x-1.06x the time in four alternated pairs at 200k customers (0.94x
on the means; the driver's compilers 0.73x the CPU time in one pair) and 0.92x / 0.99x at 1M (features, the stage
with the most rows through generated code, 1.08x; docs/jvm.md).

``spark.churn.jvm.generatedCodeC1``: ``auto`` (the default) adds the directive under a local master of at most
MAX_SLOTS task slots, where the driver runs every task; ``true`` adds it under any master (a cluster's driver runs
no task, and its executors keep both compilers); ``false`` never. A driver whose own Java options name a directives
file keeps it: the JVM reads one.
"""
from __future__ import annotations

import os
import re

from jobs.core.errors import UserError
from jobs.launch.classes import DRIVER_OPTIONS
from jobs.launch.profiles import CONF_DIR

GENERATED_C1_KEY = "spark.churn.jvm.generatedCodeC1"
DIRECTIVES = CONF_DIR / "jit-generated-c1.json"
# Measured on 2 cores; from 8 cores the JVM runs 2-3 C2 threads, and where they keep up C2's code pays for itself.
MAX_SLOTS = 4
OPTIONS = f"-XX:+UnlockDiagnosticVMOptions -XX:CompilerDirectivesFile={DIRECTIVES}"


def local_slots(master: str) -> int | None:
    """The task slots of a local master (``local``: 1, ``local[N]``, ``local[N,F]``, ``local[*]``: this machine's
    cores), None for any other master."""
    if master == "local":
        return 1
    m = re.fullmatch(r"local\[(\*|\d+)(?:,\s*\d+)?\]", master)
    if not m:
        return None
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def for_driver(props: dict[str, str], master: str) -> dict[str, str]:
    """``props`` with the directive in the driver's Java options where the key says so (module docstring)."""
    value = props.get(GENERATED_C1_KEY, "auto").strip().lower()
    if value not in ("auto", "true", "false"):
        raise UserError(f"{GENERATED_C1_KEY}={props[GENERATED_C1_KEY]!r} is not auto, true or false")
    own = props.get(DRIVER_OPTIONS, "").strip()
    slots = local_slots(master)
    wanted = value == "true" or (value == "auto" and slots is not None and slots <= MAX_SLOTS)
    if not wanted or "CompilerDirectivesFile" in own:
        return dict(props)
    return {**props, DRIVER_OPTIONS: f"{own} {OPTIONS}".strip()}
