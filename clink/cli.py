"""The ``clink`` command: compile | run | inspect | explain | checkpoints | test.

Exit codes: 0 success, 1 the pipeline failed while running, 2 a usage or SQL error. Errors are
printed as ``file:line:col: error: ...`` with the source line and a caret; ``--debug`` adds the
Python traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from clink._version import __version__
from clink.plans import plan_from_sql, read_source
from clink.errors import ClinkError, UsageError

if TYPE_CHECKING:
    from clink.runtime.plan import Plan


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clink", description="Streaming SQL, compiled to Python, run anywhere.")
    parser.add_argument("--version", action="version", version=f"clink {__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    # --debug is taken after the command too (`clink run x.sql --debug`); SUPPRESS keeps a
    # command without it from resetting one given before the command.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", parents=[common],
                       help="compile a SQL pipeline into an artefact (.clk) or a Python module")
    p.add_argument("file", help="the pipeline (.sql)")
    p.add_argument("-i", "--init", action="append", default=[], metavar="FILE",
                   help="a SQL file of declarations (tables, views, functions, SET) to read first; repeatable")
    p.add_argument("-o", "--output",
                   help="where to write it: x.clk for the artefact, x.py for the module alone "
                        "(default: the module on standard output)")
    p.add_argument("--emit-python", metavar="DIR", help="also write the module as DIR/<name>.py, for reading")

    # What run and submit both take: the pipeline, its declarations, settings, state.
    pipeline = argparse.ArgumentParser(add_help=False)
    pipeline.add_argument("file", help="the pipeline (.sql, .clk or .py)")
    pipeline.add_argument("-i", "--init", action="append", default=[], metavar="FILE",
                          help="a SQL file of declarations (tables, views, functions, SET) to read first; "
                               "repeatable")
    pipeline.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                          help="a configuration setting, as SET 'KEY' = 'VALUE' would (repeatable)")
    pipeline.add_argument("-p", "--parallelism", type=int, metavar="N",
                          help="run N subtasks of every operator ('parallelism.default'; sinks run as one); "
                               "on Ray, N workers")
    pipeline.add_argument("--state-dir", metavar="DIR",
                          help="keep checkpoints here (a local path or file:// URI; on Ray, one that every worker "
                               "reaches), and resume from the newest valid one at start")
    pipeline.add_argument("--from-checkpoint", metavar="PATH", help="resume from this checkpoint directory")
    pipeline.add_argument("--recompile", action="store_true",
                          help="compile the SQL even if the plan cache holds this text's plan")
    pipeline.add_argument("--ray-address", metavar="HOST:PORT",
                          help="the Ray cluster to run on ('ray.address', else RAY_ADDRESS); for run without "
                               "it, a Ray runtime is started for the job and stopped after it")

    p = sub.add_parser("run", parents=[common, pipeline],
                       help="run a pipeline (.sql, or an artefact or module from `clink compile`)")
    p.add_argument("--progress", action="store_true", default=None,
                   help="show each operator's rows/s, watermark lag, late rows and state while running (the "
                        "default when stderr is a terminal and no query streams rows to the same terminal)")
    p.add_argument("--no-progress", action="store_false", dest="progress", help="do not show the live view")
    p.add_argument("--metrics-port", type=int, metavar="N",
                   help="serve the job's metrics to Prometheus on port N (0: a free one); as SET 'metrics.port'")
    p.add_argument("--stop-with-checkpoint-after", type=int, metavar="N",
                   help="stop, with a final checkpoint, once N checkpoints have been taken")
    p.add_argument("--target", choices=("local", "ray"),
                   help="where the job runs ('execution.target'): this process (default), or worker "
                        "processes on Ray, one per subtask index (docs/cluster.md)")
    p.add_argument("--serve", type=int, metavar="PORT",
                   help="serve each SELECT's rows as an Arrow Flight stream on PORT (0: a free port) instead "
                        "of printing them; clients need the token printed at start, or CLINK_SERVE_TOKEN "
                        "(docs/arrow.md)")
    p.add_argument("--serve-host", metavar="HOST",
                   help="the address --serve binds (default 127.0.0.1: this machine only)")
    p.add_argument("--serve-buffer", metavar="SIZE",
                   help="how much of each query's output --serve keeps for clients, e.g. '64 mb' (the default)")
    p.add_argument("--ui", action="store_true",
                   help="serve a web dashboard of the running job (its URL is printed; docs/observability.md)")
    p.add_argument("--ui-port", type=int, default=0, metavar="N", help="the dashboard's port (default: any free one)")
    p.add_argument("--ui-host", default="127.0.0.1", metavar="HOST",
                   help="the address the dashboard binds (default 127.0.0.1; any other needs the printed token)")

    p = sub.add_parser("submit", parents=[common, pipeline],
                       help="start a pipeline on a running Ray cluster and leave it running (docs/cluster.md)")

    p = sub.add_parser("jobs", parents=[common], help="list the jobs on a Ray cluster, or show one")
    p.add_argument("job", nargs="?", help="a job id (from clink submit or clink jobs)")
    p.add_argument("--ui", action="store_true",
                   help="serve the job's web dashboard until it ends or Ctrl-C (its URL is printed)")
    p.add_argument("--ui-port", type=int, default=0, metavar="N", help="the dashboard's port (default: any free one)")
    p.add_argument("--ui-host", default="127.0.0.1", metavar="HOST",
                   help="the address the dashboard binds (default 127.0.0.1; any other needs the printed token)")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="the Ray cluster (default: RAY_ADDRESS)")

    p = sub.add_parser("stop", parents=[common], help="stop a job on a Ray cluster")
    p.add_argument("job", help="the job id")
    p.add_argument("--with-checkpoint", action="store_true",
                   help="take a checkpoint first and commit its output; clink run or submit with the same "
                        "--state-dir continues from it")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="the Ray cluster (default: RAY_ADDRESS)")

    p = sub.add_parser("rescale", parents=[common],
                       help="change a running Ray job's parallelism: stop with a checkpoint, go on with M workers")
    p.add_argument("job", help="the job id")
    p.add_argument("-p", "--parallelism", type=int, metavar="M", required=True, help="the new parallelism")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="the Ray cluster (default: RAY_ADDRESS)")

    p = sub.add_parser("inspect", parents=[common], help="print an artefact's manifest and plan")
    p.add_argument("file", help="the artefact (.clk)")

    p = sub.add_parser("checkpoints", parents=[common],
                       help="list the checkpoints in a state directory, and whether each is valid")
    p.add_argument("state_dir", help="the job's state directory")

    p = sub.add_parser("explain", parents=[common], help="print the logical and physical plans")
    p.add_argument("file", help="the pipeline (.sql)")
    p.add_argument("-i", "--init", action="append", default=[], metavar="FILE",
                   help="a SQL file of declarations (tables, views, functions, SET) to read first; repeatable")
    p.add_argument("--rewrites", action="store_true", help="also print the plan after each rewrite")

    p = sub.add_parser("sql", parents=[common],
                       help="the interactive SQL client: type statements, see their results (docs/client.md)")
    p.add_argument("-i", "--init", action="append", default=[], metavar="FILE",
                   help="a SQL file of declarations and settings to run first; repeatable")
    p.add_argument("-f", "--file", metavar="FILE",
                   help="run this SQL file's statements, then leave (the first error stops it)")
    p.add_argument("--history", metavar="FILE",
                   help="keep the typed statements here (default: CLINK_SQL_HISTORY, else ~/.clink_sql_history)")
    p.add_argument("--no-history", action="store_true", help="keep no history file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting, as SET 'KEY' = 'VALUE' would (repeatable)")

    p = sub.add_parser("test", parents=[common],
                       help="run a pipeline's test cases: rows in, expected rows out, no external systems "
                            "(docs/testing.md)")
    p.add_argument("file", help="the pipeline (.sql)")
    p.add_argument("cases", help="the case file (.yaml, .yml or .json)")
    p.add_argument("-k", "--case", action="append", default=[], metavar="NAME",
                   help="run only the case of this name (repeatable)")

    p = sub.add_parser("plan", parents=[common], help="compare pipelines before a restart (docs/checkpoints.md)")
    plan_sub = p.add_subparsers(dest="plan_command", metavar="COMMAND", required=True)
    d = plan_sub.add_parser("diff", parents=[common],
                            help="which state a changed pipeline keeps, loses or starts afresh; exit 0 if a restart "
                                 "keeps it all, 1 if not")
    d.add_argument("files", nargs="+", metavar="FILE",
                   help="old.sql new.sql, or new.sql with --state-dir (its newest checkpoint plays the old plan)")
    d.add_argument("--state-dir", metavar="DIR", help="the old job's state directory")
    d.add_argument("-i", "--init", action="append", default=[], metavar="FILE",
                   help="a SQL file of declarations to read before each pipeline; repeatable")
    d.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting for both pipelines, as SET 'KEY' = 'VALUE' would (repeatable)")

    p = sub.add_parser("state", parents=[common],
                       help="show the keyed state of an operator in a checkpoint, or list the operators")
    p.add_argument("state_dir", help="the job's state directory")
    p.add_argument("--operator", metavar="ID", help="the operator's id (from the list without --operator)")
    p.add_argument("--checkpoint", type=int, metavar="N", help="read checkpoint N (default: the newest valid one)")
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table",
                   help="how to write it (default: a table on the terminal)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to this file (csv, json and parquet)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    sources: dict[str, str] = {}
    try:
        if args.command == "compile":
            return _compile(args, sources)
        if args.command in ("run", "submit"):
            return _run(args, sources)
        if args.command in ("jobs", "stop", "rescale"):
            return _cluster_command(args)
        if args.command == "explain":
            return _explain(args, sources)
        if args.command == "checkpoints":
            return _checkpoints(args)
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "test":
            return _test(args, sources)
        if args.command == "plan":
            return _plan_diff(args, sources)
        if args.command == "state":
            return _state(args)
        if args.command == "sql":
            from clink.sqlclient import main as sql_client

            return sql_client(args, read_sql=_read_sql, settings=_settings(args.set))
        raise UsageError(f"unknown command {args.command!r}")
    except ClinkError as exc:
        if args.debug:
            traceback.print_exc()
        print(exc.render(sources), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence against a raw traceback
        if args.debug:
            traceback.print_exc()
        print(f"error: internal error: {type(exc).__name__}: {exc}\n"
              "this is a bug in clink; run again with --debug to see the traceback", file=sys.stderr)
        return 1


def _read_sql(path: str, sources: dict[str, str]) -> tuple[str, str]:
    return read_source(path, sources)


def _init_scripts(args: argparse.Namespace, sources: dict[str, str]) -> list[tuple[str, str]]:
    return [_read_sql(path, sources) for path in args.init]


def _compile(args: argparse.Namespace, sources: dict[str, str]) -> int:
    from clink.compiler import compile_text

    init = _init_scripts(args, sources)
    name, text = _read_sql(args.file, sources)
    compiled = compile_text(text, name=name, init=init)
    written = []
    try:
        if args.emit_python:
            folder = Path(args.emit_python)
            folder.mkdir(parents=True, exist_ok=True)
            module = folder / f"{Path(name).stem}.py"
            module.write_text(compiled.source, encoding="utf-8")
            written.append(module)
        if args.output and args.output.endswith(".clk"):
            from clink.runtime.artefact import write_artefact
            from clink.runtime.loader import load_generated

            plan = load_generated(compiled.source, name=name, fingerprint=compiled.fingerprint).PLAN
            sql = "".join(f"-- init script {n}\n{t.rstrip()}\n\n" for n, t in init) + text
            written.append(write_artefact(args.output, module_source=compiled.source, plan=plan, sql=sql,
                                          explain=compiled.explain(), clink_version=__version__))
        elif args.output:
            out = Path(args.output)
            out.write_text(compiled.source, encoding="utf-8")
            written.append(out)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename}: {exc.strerror}") from None
    for out in written:
        print(f"wrote {out} (plan sha256:{compiled.fingerprint})", file=sys.stderr)
    if not written:
        sys.stdout.write(compiled.source)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    import json

    from clink.runtime.artefact import read_artefact

    artefact = read_artefact(args.file)
    manifest = dict(artefact.manifest)
    sql = manifest.pop("sql", "")
    print(json.dumps(manifest, indent=2, sort_keys=True))
    print("\n-- source SQL\n" + sql.rstrip())
    print("\n-- plan\n" + artefact.explain.rstrip())
    return 0


def _explain(args: argparse.Namespace, sources: dict[str, str]) -> int:
    from clink.compiler import compile_text

    init = _init_scripts(args, sources)
    name, text = _read_sql(args.file, sources)
    compiled = compile_text(text, name=name, init=init)
    if args.rewrites:
        for step in compiled.rewrite_trace:
            print(step)
            print()
    sys.stdout.write(compiled.explain())
    return 0


def _checkpoints(args: argparse.Namespace) -> int:
    import datetime as dt

    from clink.runtime.checkpoint import CheckpointStore

    from clink.runtime.fs import local_directory

    root = local_directory(args.state_dir)
    if not (root / "checkpoints").is_dir():
        raise UsageError(f"{root} holds no checkpoints (no {root / 'checkpoints'} directory)")
    infos = CheckpointStore(root).list()
    if not infos:
        print("no checkpoints")
        return 0
    print(f"{'id':>6}  {'created (UTC)':<23}  {'size':>10}  status")
    for info in infos:
        created = (dt.datetime.fromtimestamp(info.created_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
                   if info.created_ms else "-")
        status = "valid" if info.valid else f"INVALID: {info.problem}"
        print(f"{info.id:>6}  {created:<23}  {info.size:>10}  {status}")
    return 0


def _settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set takes KEY=VALUE, got {pair!r}")
        from clink.runtime.settings import check_setting, close_settings

        key, value = key.strip(), value.strip()
        problem = check_setting(key, value)
        if problem is not None:
            close = close_settings(key)
            raise UsageError(f"--set {pair}: {problem}" + (f"; did you mean {close[0]!r}?" if close else ""))
        out[key] = value
    return out


def _run(args: argparse.Namespace, sources: dict[str, str]) -> int:
    from clink.runtime.connectors.base import TableSpec
    from clink.runtime.context import RuntimeContext
    from clink.runtime.executor import Job

    config = _settings(args.set)
    # With a state directory, SIGTERM or Ctrl-C stops between rounds with a checkpoint (a second
    # Ctrl-C stops at once). The handlers go in first, so a signal during compiling counts too.
    stop_requested: list[bool] = []
    stop_target: list = []
    if args.state_dir or args.from_checkpoint:
        import signal

        def stop(signum: int, frame: object) -> None:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            stop_requested.append(True)
            for job in stop_target:
                job.request_stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    if args.init and args.file.endswith((".clk", ".py")):
        raise UsageError("--init applies to SQL files; a compiled plan already holds its declarations")
    sql = ""
    if args.file.endswith(".clk"):
        from clink.runtime.artefact import read_artefact

        artefact = read_artefact(args.file)
        plan, source = artefact.plan(), artefact.module_source
    elif args.file.endswith(".py"):
        from clink.runtime.loader import load_plan_file

        plan = load_plan_file(args.file)
        source = Path(args.file).read_text(encoding="utf-8")
    else:
        name, sql = _read_sql(args.file, sources)
        plan, source = plan_from_sql(sql, name, recompile=args.recompile, init=_init_scripts(args, sources))

    for text in plan.explain:
        sys.stdout.write(text)
    import os

    state_dir = None
    if args.state_dir or args.from_checkpoint:
        from clink.runtime.fs import local_directory  # only then: a plain run starts without it
    if args.state_dir:
        state_dir = local_directory(args.state_dir)
    if args.from_checkpoint:
        from clink.runtime.fs import check_location, scheme_of

        if scheme_of(args.from_checkpoint) in (None, "file"):
            checkpoint = local_directory(args.from_checkpoint)
            config["execution.savepoint.path"] = str(checkpoint)
            if state_dir is None:
                state_dir = checkpoint.resolve().parent.parent
        else:
            # A checkpoint in a remote store (s3://...): downloaded to restore from; the job's
            # working files go to --state-dir, or to a temporary folder.
            problem = check_location(args.from_checkpoint)
            if problem is not None:
                raise UsageError(f"--from-checkpoint: {problem}")
            config["execution.savepoint.path"] = args.from_checkpoint
    if args.parallelism is not None:
        if args.parallelism < 1:
            raise UsageError(f"--parallelism must be at least 1, got {args.parallelism}")
        config["parallelism.default"] = str(args.parallelism)
    if os.environ.get("CLINK_FAULT"):
        config["test.fault-point"] = os.environ["CLINK_FAULT"]
    if args.command == "submit":
        config["execution.target"] = "ray"
    elif args.target:
        config["execution.target"] = args.target
    if args.ray_address:
        config["ray.address"] = args.ray_address
    if getattr(args, "metrics_port", None) is not None:
        config["metrics.port"] = str(args.metrics_port)
    if ({**plan.config, **config}.get("execution.target") or "local") == "ray":
        if getattr(args, "serve", None) is not None:
            raise UsageError("--serve serves a job that runs in this process; a job on Ray cannot be served "
                             "yet: run it locally ('execution.target' = 'local'), or write its rows to a table")
        return _run_on_ray(args, plan, source, sql, {**plan.config, **config}, state_dir)
    ctx = RuntimeContext(config=config, state_dir=state_dir)
    queries = [s for s in plan.sinks if s.connector == "collect"]
    server = _query_server(args, queries)
    collected: dict[str, list] = {q.table: [] for q in queries}
    printers: dict[str, object] = {}

    def stream_rows() -> None:
        """Print each query's rows as they come, in the print connector's format."""
        print_connector = ctx.connectors.get("print")
        for q in queries:
            options = {"print-identifier": q.table} if len(queries) > 1 else {}
            spec = TableSpec(name=q.table, schema=q.schema, table_schema=q.schema, options=options,
                             changelog=q.changelog)
            printers[q.table] = print_connector.create_sink(spec, ctx)

    def deliver(name: str, batch) -> None:
        if server is not None:
            server.publish(name, batch)
        elif name in printers:
            printers[name].write(batch)
        else:
            collected[name].append(batch)

    ctx.on_result = deliver
    job = Job(plan, ctx)
    for warning in job.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if job.metrics_endpoint is not None:
        print(f"metrics: {job.metrics_endpoint.url}", file=sys.stderr)
    if job.metrics.restored_from is not None:
        print(f"resuming from checkpoint {job.metrics.restored_from}", file=sys.stderr)
    # A table is shown at the end, so only for one bounded query on a terminal; otherwise stream.
    table_mode = server is None and sys.stdout.isatty() and len(queries) == 1 and not job.unbounded_sources
    if not table_mode and server is None:
        stream_rows()
    if not plan.sinks:
        return 0
    if stop_requested:
        job.request_stop()
    stop_target.append(job)
    progress = args.progress
    if progress is None:  # rows streaming to the terminal are the view themselves
        progress = sys.stderr.isatty() and not (sys.stdout.isatty() and queries and not table_mode)
    dashboard = _serve_dashboard(args, job, sources) if getattr(args, "ui", False) else None
    try:
        if server is not None:
            from clink.serve import serve_job

            serve_job(job, server, stop_after_checkpoints=args.stop_with_checkpoint_after)
        elif progress:
            from rich.console import Console

            from clink.live import run_with_view

            run_with_view(job, Console(stderr=True), stop_after_checkpoints=args.stop_with_checkpoint_after)
        else:
            job.run(stop_after_checkpoints=args.stop_with_checkpoint_after)
    except Exception as exc:  # a failure, shown on the page; an interrupt is not one
        if dashboard is not None:
            dashboard.fail(exc)
        raise
    finally:
        if dashboard is not None:
            dashboard.close()
    if job.metrics.stopped_at is not None:
        print(f"stopped with checkpoint {job.metrics.stopped_at}; run again with --state-dir "
              f"{ctx.state_dir} to continue", file=sys.stderr)
        return 0
    for printer in printers.values():
        printer.close()
    if table_mode:
        import pyarrow as pa

        from clink.runtime.changelog import materialize

        for q in queries:
            rows = materialize(pa.Table.from_batches(collected[q.table], schema=q.schema), q.changelog)
            _print_table(rows, job.ctx.time_zone)
    print(job.metrics.summary(), file=sys.stderr)
    return 0


def _query_server(args: argparse.Namespace, queries: list):
    """The Flight server of ``clink run --serve``, or None without it."""
    if getattr(args, "serve", None) is None:
        for flag in ("serve_host", "serve_buffer"):
            if getattr(args, flag, None) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} applies to --serve PORT, which is not given")
        return None
    if args.progress:
        raise UsageError("--progress and --serve both want the run's loop: leave one out")
    if not 0 <= args.serve <= 65535:
        raise UsageError(f"--serve takes a port from 0 (any free one) to 65535, got {args.serve}")
    if not queries:
        raise UsageError("--serve serves the rows of the script's SELECT queries, and it has none "
                         "(INSERT INTO writes to its table)")
    from clink.serve import DEFAULT_BUFFER_BYTES, QueryServer, token_from_environment

    buffer_bytes = DEFAULT_BUFFER_BYTES
    if args.serve_buffer is not None:
        from clink.runtime.settings import parse_size

        try:
            buffer_bytes = parse_size(args.serve_buffer)
        except ValueError as exc:
            raise UsageError(f"--serve-buffer: {exc}") from None
    token, made = token_from_environment()
    host = args.serve_host or "127.0.0.1"
    server = QueryServer({q.table: q.schema for q in queries}, token=token, host=host, port=args.serve,
                         buffer_bytes=buffer_bytes)
    shown = host if ":" not in host else f"[{host}]"
    print(f"serving {', '.join(q.table for q in queries)} over Arrow Flight at grpc://{shown}:{server.port}",
          file=sys.stderr)
    print(f"token: {token}" if made else "token: the value of CLINK_SERVE_TOKEN", file=sys.stderr, flush=True)
    return server


def _serve_dashboard(args: argparse.Namespace, job, sources: dict[str, str]):
    """``--ui``: the dashboard of ``job`` in a thread of this process, until the run ends."""
    from clink.ui import serve

    dashboard = serve(job, sql=dict(sources), host=args.ui_host, port=args.ui_port)
    print(f"dashboard: {dashboard.url}", file=sys.stderr, flush=True)
    return dashboard


def _serve_cluster_dashboard(args: argparse.Namespace, job, plan: Plan, sources: dict[str, str]):
    """``--ui`` for a job on Ray: the dashboard in this process, from its job master's status."""
    from clink.ui.cluster import serve_cluster_job

    board = serve_cluster_job(job, plan, sql=sources, name=plan.name, host=args.ui_host, port=args.ui_port)
    print(f"dashboard: {board.url}", file=sys.stderr, flush=True)
    return board


def _run_on_ray(args: argparse.Namespace, plan: Plan, source: str, sql: str, config: dict,
                state_dir: Path | None) -> int:
    """``clink run --target ray``: the job's artefact on Ray workers, to its end."""
    import os

    queries = [s for s in plan.sinks if s.connector == "collect"]
    if queries and args.command == "submit":
        raise UsageError(f"a submitted job leaves this process: its queries ({', '.join(q.table for q in queries)}) "
                         "have nowhere to return their rows; write them to a table (INSERT INTO)")
    printers = {}
    if queries:
        # The rows of each query come back from the workers and are printed as they come.
        from clink.runtime.connectors.base import TableSpec
        from clink.runtime.context import RuntimeContext

        print_connector = RuntimeContext().connectors.get("print")
        for q in queries:
            options = {"print-identifier": q.table} if len(queries) > 1 else {}
            spec = TableSpec(name=q.table, schema=q.schema, table_schema=q.schema, options=options,
                             changelog=q.changelog)
            printers[q.table] = print_connector.create_sink(spec, RuntimeContext())
    if getattr(args, "stop_with_checkpoint_after", None) is not None or getattr(args, "progress", False):
        raise UsageError("--stop-with-checkpoint-after and --progress apply to local runs; on Ray: clink stop "
                         "JOB --with-checkpoint")
    if args.command != "submit" and not (config.get("ray.address") or os.environ.get("RAY_ADDRESS")):
        # The Ray runtime started for this run listens on the loopback address only (read by Ray
        # when it is imported): it serves this machine's job, not a network.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    onray = _onray()
    from clink.runtime.artefact import artefact_bytes

    artefact = artefact_bytes(module_source=source, plan=plan, sql=sql, clink_version=__version__)
    parallelism = int(config.get("parallelism.default") or 1)
    config = {k: str(v) for k, v in config.items()}
    state = str(state_dir.resolve()) if state_dir is not None else None
    if args.command == "submit":
        _connect(onray, config.get("ray.address"))
        job = onray.submit(artefact, config=config, state_dir=state, workers=parallelism, parallelism=parallelism,
                           fingerprint=plan.fingerprint, cwd=os.getcwd(), host=onray.data_plane_host(False),
                           detached=True)
        print(job.id)
        print(f"submitted {plan.name} to Ray: {parallelism} worker(s); clink jobs {job.id} shows it", file=sys.stderr)
        return 0
    print(f"running {plan.name} on Ray: {parallelism} worker(s)", file=sys.stderr)
    boards = []

    def submitted(job) -> None:
        if getattr(args, "ui", False):
            boards.append(_serve_cluster_dashboard(args, job, plan, {plan.name: sql}))

    try:
        outcome = onray.run_on_ray(artefact, config=config, state_dir=state, fingerprint=plan.fingerprint,
                                   cwd=os.getcwd(), on_result=(lambda name, batch: printers[name].write(batch))
                                   if printers else None,
                                   on_print=lambda stream, text: (sys.stdout if stream == "stdout" else
                                                                  sys.stderr).write(text),
                                   on_submitted=submitted)
    finally:
        for board in boards:
            board.close()
    for printer in printers.values():
        printer.close()
    for warning in outcome["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    for line in outcome["log"]:
        print(line, file=sys.stderr)
    rows_in = sum(outcome["records_in"].values())
    rows_out = sum(outcome["records_out"].values())
    hosts = ", ".join(sorted(set(outcome["hosts"].values())))
    print(f"{rows_in:,} rows in, {rows_out:,} rows out in {outcome['seconds']:.2f} s on {parallelism} worker(s) "
          f"at {hosts}; "
          f"{outcome['checkpoints']} checkpoint(s), {outcome['attempts'] - 1} restart(s)", file=sys.stderr)
    return 0


def _onray():
    try:
        from clink.cluster import onray
    except ImportError as exc:
        raise UsageError(f"running on Ray needs Ray: pip install 'clink[ray]' ({exc})") from None
    return onray


def _connect(onray, address: str | None) -> None:
    """Connect to a running Ray cluster (``--ray-address``, else ``RAY_ADDRESS``)."""
    import os

    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise UsageError("which Ray cluster? pass --ray-address HOST:PORT (or set RAY_ADDRESS); `ray start --head` "
                         "prints the address")
    try:
        onray.ensure_ray(address, workers=1)
    except (ConnectionError, RuntimeError) as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {exc}") from None


def _cluster_command(args: argparse.Namespace) -> int:
    """``clink jobs [JOB]``, ``clink stop JOB``, ``clink rescale JOB -p M``."""
    onray = _onray()
    _connect(onray, args.ray_address)
    if args.command == "jobs" and args.job is None:
        jobs = onray.list_jobs()
        if not jobs:
            print("no clink jobs on this Ray cluster", file=sys.stderr)
            return 0
        print(f"{'job':<32} {'name':<20} {'state':<12} {'parallelism':>11} {'restarts':>8} {'checkpoint':>10}")
        for j in jobs:
            print(f"{j['id']:<32} {j['name'][:20]:<20} {j['state']:<12} {j['parallelism']:>11} {j['restarts']:>8} "
                  f"{j['last_checkpoint'] if j['last_checkpoint'] is not None else '-':>10}")
        return 0
    job = onray.RayJob.find(args.job)
    if args.command == "jobs" and args.ui:
        artefact = job.artefact()
        board = _serve_cluster_dashboard(args, job, artefact.plan(), {artefact.name: artefact.manifest.get("sql", "")})
        import time

        try:
            while not board.finished:
                time.sleep(0.5)
            time.sleep(1.5)  # the final state reaches the open pages
        except KeyboardInterrupt:
            pass
        finally:
            board.close()
        _print_job(job.status())
    elif args.command == "jobs":
        _print_job(job.status())
    elif args.command == "stop":
        outcome = job.stop(with_checkpoint=args.with_checkpoint)
        if outcome.get("stopped_at") is not None:
            print(f"stopped {job.id} with checkpoint {outcome['stopped_at']}; clink run or submit with --state-dir "
                  "DIR goes on from it", file=sys.stderr)
        else:
            print(f"stopped {job.id} ({outcome.get('state')})", file=sys.stderr)
    else:
        if args.parallelism < 1:
            raise UsageError(f"--parallelism must be at least 1, got {args.parallelism}")
        job.rescale(args.parallelism)
        print(f"{job.id}: rescaling to {args.parallelism} (stop with a checkpoint, then go on from it)",
              file=sys.stderr)
    return 0


def _print_job(status: dict) -> None:
    from clink.runtime.executor import format_watermark

    print(f"job {status['id']} ({status['name']}): {status['state']}, parallelism {status['parallelism']}, "
          f"attempt {status['attempt']}, {status['restarts']} restart(s)")
    last = status["last_checkpoint"]
    durations = status["checkpoint_ms"]
    print(f"last checkpoint: {last if last is not None else '-'}"
          + (f" (last {len(durations)} took {min(durations):.0f}-{max(durations):.0f} ms)" if durations else ""))
    for worker, m in sorted(status["workers"].items()):
        rate = sum(m["records_in"].values()) / m["seconds"] if m["seconds"] else 0.0
        watermark = format_watermark(m["watermark"]) if m["watermark"] is not None else "-"
        print(f"  worker {worker} (subtasks {worker} of each operator): {sum(m['records_in'].values()):,} rows in "
              f"({rate:,.0f}/s), {sum(m['records_out'].values()):,} out, {m['bytes_out']:,} bytes sent, "
              f"watermark {watermark}")
    for worker, m in sorted(status["workers"].items()):
        if m.get("metrics_url"):
            print(f"  worker {worker} metrics: {m['metrics_url']}")
    for failure in status["failures"]:
        print(f"  failure: {failure}")
    from rich.console import Console

    from clink.live import cluster_metrics, render

    metrics = cluster_metrics(status)
    if metrics.operators:
        Console(soft_wrap=False, width=max(120, Console().width)).print(render(metrics))


def _newest_checkpoint(state_dir: str, checkpoint: int | None = None):
    """A state directory's newest valid checkpoint (or checkpoint ``checkpoint``) and its job.json."""
    import json

    from clink.runtime.checkpoint import CheckpointStore
    from clink.runtime.fs import local_directory

    root = local_directory(state_dir)
    if not (root / "checkpoints").is_dir():
        raise UsageError(f"{root} holds no checkpoints (no {root / 'checkpoints'} directory)")
    store = CheckpointStore(root)
    if checkpoint is None:
        info, warnings = store.latest()
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if info is None:
            raise UsageError(f"{root} holds no valid checkpoint")
    else:
        info = next((i for i in store.list() if i.id == checkpoint), None)
        if info is None:
            raise UsageError(f"{root} holds no checkpoint {checkpoint}")
        if not info.valid:
            raise UsageError(f"checkpoint {checkpoint} in {root} is not valid: {info.problem}")
    return info, json.loads((info.path / "job.json").read_text())


def _plan_diff(args: argparse.Namespace, sources: dict[str, str]) -> int:
    """``clink plan diff``: exit 0 when a restart keeps every state, 1 when it would not."""
    from clink.runtime.context import RuntimeContext
    from clink.runtime.plan_diff import checkpoint_identities, compatible, diff, plan_identities, render

    if args.state_dir is not None and len(args.files) != 1:
        raise UsageError("clink plan diff NEW.sql --state-dir DIR takes one pipeline, the new one")
    if args.state_dir is None and len(args.files) != 2:
        raise UsageError("clink plan diff takes OLD.sql NEW.sql, or NEW.sql --state-dir DIR")
    init = _init_scripts(args, sources)
    ctx = RuntimeContext(config=_settings(args.set))

    def identities(path: str):
        name, text = _read_sql(path, sources)
        plan, _ = plan_from_sql(text, name, recompile=False, init=init)
        return name, plan_identities(plan, ctx)

    if args.state_dir is not None:
        info, state = _newest_checkpoint(args.state_dir)
        old_name, old = f"checkpoint {info.id} in {args.state_dir}", checkpoint_identities(state)
    else:
        old_name, old = identities(args.files[0])
    new_name, new = identities(args.files[-1])
    changes = diff(old, new)
    print(render(changes, old=old_name, new=new_name))
    return 0 if compatible(changes) else 1


def _state(args: argparse.Namespace) -> int:
    """``clink state``: an operator's state in a checkpoint, or the list of its operators."""
    import pyarrow as pa

    from clink.runtime.state_view import read_checkpoint_operator, write_table

    info, state = _newest_checkpoint(args.state_dir, args.checkpoint)
    operators = state.get("operators", {})
    max_parallelism = int(state.get("max_parallelism") or 128)
    if args.operator is None:
        rows = []
        for uid, entry in sorted(operators.items()):
            count = read_checkpoint_operator(info.path, uid, entry, max_parallelism).num_rows if "states" in entry else None
            rows.append({"operator": uid, "kind": entry.get("kind") or uid.replace(":", "-").split("-", 1)[0],
                         "position": entry.get("span", ""), "rows": count})
        table = pa.Table.from_pylist(rows, schema=pa.schema([("operator", pa.string()), ("kind", pa.string()),
                                                             ("position", pa.string()), ("rows", pa.int64())]))
        footer = f"checkpoint {info.id}: {len(rows)} stateful operator{'s' if len(rows) != 1 else ''}"
    else:
        entry = operators.get(args.operator)
        if entry is None:
            known = ", ".join(sorted(operators)) or "none"
            raise UsageError(f"checkpoint {info.id} holds no state of operator {args.operator!r}; "
                             f"the operators with state are: {known}")
        table = read_checkpoint_operator(info.path, args.operator, entry, max_parallelism)
        footer = f"checkpoint {info.id}, operator {args.operator}: {table.num_rows} row{'s' if table.num_rows != 1 else ''}"
    if args.format == "table":
        if args.output:
            raise UsageError("--output takes --format csv, json or parquet")
        from clink.display import print_table

        print_table(table, "UTC", footer=footer)
        return 0
    if args.output is None and args.format == "parquet":
        raise UsageError("--format parquet needs --output FILE")
    try:
        write_table(table, args.format, args.output or "/dev/stdout")
    except BrokenPipeError:  # the reader (head, less) had enough
        return 0
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename}: {exc.strerror}") from None
    return 0


def _print_table(table, zone: str) -> None:
    """The rows as a table; TIMESTAMP_LTZ values as the wall clock of the session time zone."""
    from clink.display import print_table

    print_table(table, zone)


def _test(args: argparse.Namespace, sources: dict[str, str]) -> int:
    """Run each case of the case file; 0 when all pass, 1 when one fails (its diff is printed),
    2 for a mistake in the case file or the SQL."""
    from clink._cases import check_case, load_case_file, pipeline_plan, run_case

    cases = load_case_file(args.cases, sources)
    chosen = [c for c in cases.cases if not args.case or c.name in args.case]
    unknown = [name for name in args.case if name not in {c.name for c in cases.cases}]
    if unknown:
        raise UsageError(f"{args.cases} has no case named {unknown[0]!r} (its cases: "
                         f"{', '.join(c.name for c in cases.cases) or 'none'})")
    plan = pipeline_plan(args.file, sources)
    for case in chosen:  # a mistake in any case stops the run before the first case runs
        check_case(plan, case)
    failed = 0
    for case in chosen:
        outcome = run_case(plan, case)
        print(outcome.line(), flush=True)
        if not outcome.passed:
            failed += 1
            print(outcome.report, flush=True)
    passed = len(chosen) - failed
    print(f"{len(chosen)} case{'s' if len(chosen) != 1 else ''}: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
