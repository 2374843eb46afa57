"""Where a JVM's threads spend their time, from the thread dumps it printed (the output of SIGQUIT, as a Spark
executor writes them to its stdout): every matching thread of every dump is one sample, counted by its state, its
top frame and the package of its first frame outside the JDK and Scala. A sampling profiler that needs nothing but
a JRE (scripts/gpu-validate, DUMP_EXECUTOR: the executor's task threads during one stage).

    python3 tools/thread_dumps.py STDOUT... [--threads 'Executor task launch worker'] [--top 25] > summary.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

DUMP_START = "Full thread dump"
HEADER = re.compile(r'^"(?P<name>[^"]*)"')
STATE = re.compile(r"^\s+java\.lang\.Thread\.State: (?P<state>\w+)")
FRAME = re.compile(r"^\s+at (?P<method>[\w$.<>/]+)\(")
RUNTIME = ("java.", "javax.", "jdk.", "sun.", "scala.")


def samples(text: str, thread_prefix: str) -> tuple[int, list[tuple[str, list[str]]]]:
    """(dumps, [(state, frames top first)]) for the threads whose name starts with ``thread_prefix``."""
    dumps, out = 0, []
    current: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        if line.startswith(DUMP_START):
            dumps += 1
            current = None
            continue
        header = HEADER.match(line)
        if header:
            current = None
            if header.group("name").startswith(thread_prefix):
                current = ("", [])
                out.append(current)
            continue
        if current is None:
            continue
        state = STATE.match(line)
        if state:
            current = (state.group("state"), current[1])
            out[-1] = current
            continue
        frame = FRAME.match(line)
        if frame:
            current[1].append(frame.group("method"))
    return dumps, out


def package_of(frames: list[str]) -> str:
    """The package (up to three parts) of the first frame outside the JDK and Scala; "(JDK)" if there is none."""
    for method in frames:
        if not method.startswith(RUNTIME):
            parts = method.split(".")
            return ".".join(parts[:min(3, len(parts) - 2)]) or method
    return "(JDK)"


def summary(texts: list[str], thread_prefix: str, top: int = 25) -> dict:
    dumps, taken = 0, []
    for text in texts:
        n, got = samples(text, thread_prefix)
        dumps += n
        taken += got
    return {
        "dumps": dumps,
        "threads": thread_prefix,
        "samples": len(taken),
        "states": dict(Counter(state for state, _ in taken).most_common()),
        "packages": dict(Counter(package_of(frames) for _, frames in taken).most_common(top)),
        "top_frames": dict(Counter(frames[0] if frames else "(no frames)" for _, frames in taken).most_common(top)),
        "runnable_packages": dict(Counter(package_of(frames) for state, frames in taken
                                          if state == "RUNNABLE").most_common(top)),
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tools/thread_dumps.py", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="files holding thread dumps (an executor's stdout)")
    p.add_argument("--threads", default="Executor task launch worker", help="names of the threads to sample start so")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    texts = [Path(f).read_text(errors="replace") for f in args.files]
    json.dump(summary(texts, args.threads, args.top), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
