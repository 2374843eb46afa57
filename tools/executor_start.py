"""How a GPU executor started, from the start of its log as `scripts/gpu-validate` keeps it (executor-start-RUN.log:
the first 300 lines, timestamped to the millisecond, then a line with the whole log's count of the pinned pool's
refusals): seconds from its JVM's start to its first task, the pinned pool's allocation (the plugin logs its next line
when the allocation is done), and the refusals. The plugin cannot run a task before its pools exist, so at each
application's start the pinned pool's allocation is on ingest's path.

    python3 tools/executor_start.py executor-start-RUN.log
"""
from __future__ import annotations

import json
import re
import sys

STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) ")
REFUSALS = re.compile(r"pinned pool refusals in the whole log: (\d+)")


def summary(text: str) -> dict:
    """The first executor's figures in ``text`` (None where its log does not say)."""
    stamped, refusals, headers = [], None, 0
    for line in text.splitlines():
        counted = REFUSALS.search(line)
        if counted:
            refusals = int(counted.group(1))
            break           # the first executor's section ends with its count
        if line.startswith("== "):
            headers += 1
            if headers > 1:
                break
            continue
        x = STAMP.match(line)
        if x:
            h, m, s, ms = (int(g) for g in x.groups())
            stamped.append((h * 3600 + m * 60 + s + ms / 1000, line))

    def first(what: str) -> int | None:
        return next((i for i, (_, line) in enumerate(stamped) if what in line), None)

    def between(i: int | None, j: int | None) -> float | None:
        if i is None or j is None or j >= len(stamped):
            return None
        return round((stamped[j][0] - stamped[i][0]) % 86400, 3)      # a start across midnight too

    jvm, task, pinned = first("Started daemon"), first("Got assigned task"), first("Initializing pinned memory pool")
    return {
        "first_task_s": between(jvm, task),
        "pinned_init_s": between(pinned, None if pinned is None else pinned + 1),
        "pinned_refusals": refusals,
    }


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8", errors="replace") as f:
        print(json.dumps(summary(f.read())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
