"""``python -m jobs.launch submit ...`` (scripts/submit) and ``python -m jobs.launch pipeline ...``
(scripts/pipeline)."""
import sys

from jobs.launch.submit import main, pipeline_main

commands = {"submit": main, "pipeline": pipeline_main}
if len(sys.argv) < 2 or sys.argv[1] not in commands:
    print(f"usage: python -m jobs.launch {{{','.join(commands)}}} [args]", file=sys.stderr)
    sys.exit(2)
sys.exit(commands[sys.argv[1]](sys.argv[2:]))
