"""Import direction: the run path never loads the compiler or lark.

Checked in a fresh interpreter, so nothing imported earlier in the test session can hide a leak.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = (
    "import sys, clink, clink.runtime, clink.runtime.executor, clink.runtime.loader, "
    "clink.runtime.connectors; clink.runtime.connectors.default_registry(); "
    "print(sorted(m for m in sys.modules "
    "if m == 'lark' or m.startswith(('lark.', 'clink.compiler', 'clink.grammar', 'rich'))))"
)


def test_runtime_never_imports_the_compiler() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_running_a_compiled_module_never_imports_the_compiler(tmp_path: Path) -> None:
    from clink.compiler import compile_text

    sql = ("CREATE TABLE t (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '5', 'fields.a.max' = '1000');\n"
           "CREATE TABLE s (a BIGINT) WITH ('connector' = 'blackhole');\n"
           "INSERT INTO s SELECT a * 2 FROM t WHERE a > 0;\n")
    module = tmp_path / "plan.py"
    module.write_text(compile_text(sql, name="p.sql").source)
    script = (
        "import sys\n"
        "from clink.runtime.loader import load_plan_file\n"
        "from clink.runtime.executor import run_plan\n"
        "from clink.runtime.context import RuntimeContext\n"
        f"run_plan(load_plan_file({str(module)!r}), RuntimeContext())\n"
        "print(sorted(m for m in sys.modules if m == 'lark' or m.startswith(('lark.', 'clink.compiler', "
        "'clink.grammar'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_the_cluster_s_ray_module_imports_ray() -> None:
    """Ray is an optional extra: no module but ``clink/cluster/onray.py`` names it, and the runtime,
    the cluster's master and workers and the data plane load without it."""
    root = Path(__file__).resolve().parents[1] / "clink"
    importers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                       if any(line.strip().startswith(("import ray", "from ray"))
                              for line in p.read_text(encoding="utf-8").splitlines()))
    assert importers == ["cluster/onray.py"]
    check = ("import sys, clink.cluster.master, clink.cluster.worker, clink.cluster.local, "
             "clink.cluster.dataplane, clink.runtime.executor; print([m for m in sys.modules if m == 'ray' "
             "or m.startswith('ray.')])")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
