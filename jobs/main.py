"""spark-submit's application file. The jobs package itself travels to executors as a zip (--py-files)."""
import sys

from jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
