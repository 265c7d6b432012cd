"""Where compiling SQL in the process spends its time: CPU milliseconds per stage.

``bench/cold_start.py`` times ``clink run q.sql --recompile`` as a whole, against the floor;
this script splits the same work into its stages, each timed with ``time.process_time()`` in
``--runs`` fresh processes (8 by default; medians), with the cache directory warmed first:

    pyarrow        import pyarrow (the floor of every case)
    runtime        what `clink run` imports with or without the compiler (cli, executor, loader)
    lark           import lark
    compiler       import clink.compiler (its ~140 attrs classes, binders, codegen)
    parser         clink.grammar.parser(): the cached parser tables loaded
    parse          the first parse_script (builds the lexer's regular expressions)
    compile        compile_text: parse, bind, rewrite, plan, generate the module
    load           load_generated + plan_of: the module compiled and its plan read

CPU time rather than wall time because a shared machine's load stretches wall time unevenly;
the figures are for comparing stages and commits on one machine, not targets.

    python bench/compile_stages.py
    python bench/compile_stages.py --runs 20 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cold_start import SQL  # the same pipeline as the cold-start benchmark

STAGES = """
import sys, time
marks = []
def mark(stage, last=[time.process_time()]):
    now = time.process_time(); marks.append((stage, (now - last[0]) * 1000)); last[0] = now
import pyarrow; mark("pyarrow")
import clink.cli
from clink.runtime.loader import load_generated, plan_of
from clink.runtime.executor import Job
mark("runtime")
import lark; mark("lark")
import clink.compiler; mark("compiler")
from clink.grammar import parser
parser(); mark("parser")
from clink.compiler import compile_text
from clink.compiler.parse import parse_script
text = open(sys.argv[1], encoding="utf-8").read()
parse_script(text, "q.sql"); mark("parse")
compiled = compile_text(text, name="q.sql"); mark("compile")
plan_of(load_generated(compiled.source, name="q.sql", fingerprint=compiled.fingerprint), "q.sql"); mark("load")
import json; print(json.dumps(marks))
"""


def measure(runs: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="clink-stages-") as tmp:
        folder = Path(tmp)
        (folder / "q.sql").write_text(SQL)
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "0", "XDG_CACHE_HOME": str(folder / "cache")}
        subprocess.run([sys.executable, "-m", "clink", "run", "--recompile", str(folder / "q.sql")], check=True,
                       capture_output=True, env=env)
        times: dict[str, list[float]] = {}
        for _ in range(runs):
            done = subprocess.run([sys.executable, "-c", STAGES, str(folder / "q.sql")], check=True,
                                  capture_output=True, text=True, env=env, cwd=folder)
            for stage, ms in json.loads(done.stdout.strip().splitlines()[-1]):
                times.setdefault(stage, []).append(ms)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="fresh processes (default 8)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    times = measure(args.runs)
    medians = {stage: statistics.median(values) for stage, values in times.items()}
    if args.json:
        print(json.dumps({"runs": args.runs, "median_cpu_ms": medians}, indent=2))
        return
    from clink import __version__

    print(f"\ncompile stages: CPU ms, median of {args.runs} fresh processes, clink {__version__}, "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for stage, ms in medians.items():
        print(f"{stage:10} {ms:8.1f}")
    over = sum(ms for stage, ms in medians.items() if stage not in ("pyarrow", "runtime"))
    print(f"{'compiling':10} {over:8.1f}   (lark + compiler + parser + parse + compile + load: "
          f"what --recompile adds to a run from the plan cache)")


if __name__ == "__main__":
    main()
