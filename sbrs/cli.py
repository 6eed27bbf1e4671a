"""The ``sbrs`` command line (contract in DESIGN.md, "Interfaces").

Exit status: 0 ok, 1 runtime failure, 2 bad input or usage; every failure is one line on stderr naming the
file, field or request at fault. ``--json`` prints exactly one JSON object on stdout.

The command owns its process, so it is where logging is configured: one handler on the ``sbrs`` logger (never
the root logger) writing each record's message as one line on stderr, at INFO, or DEBUG with ``-v``/
``--verbose``, or warnings and errors only with ``-q``/``--quiet`` (every command takes both). The library
itself only logs (``sbrs.log``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Any

from sbrs import __version__
from sbrs.errors import InputError, SbrsError

Handler = Callable[[argparse.Namespace], int]

logger = logging.getLogger("sbrs.cli")


class _StderrLines(logging.Handler):
    """Each record's message as one line on ``sys.stderr``, looked up when the record comes (a test or a caller
    may have replaced it since the handler was made)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(record.getMessage() + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def logging_to_stderr(level: int) -> Iterator[None]:
    """While inside, the ``sbrs`` logger writes its records at ``level`` and above on stderr (``_StderrLines``);
    its handlers and level are as they were afterwards."""
    root = logging.getLogger("sbrs")
    handler = _StderrLines(level)
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def _mb(value: int) -> str:
    return f"{value / 1e6:.2f}"


def cmd_check(args: argparse.Namespace) -> int:
    from sbrs.app import load_app

    app = load_app(args.app)
    summary = app.summary()
    if args.json:
        _print_json(summary)
        return 0
    print(f"app {app.name}: {len(app.models)} scenarios, input {app.config.input.name} "
          f"{list(app.config.input.shape)} {app.config.input.dtype}, adaptive {list(app.config.adaptive)}")
    print(f"{'scenario':<20} {'source':<7} {'layers':>6} {'edges':>6} {'params':>12} {'params MB':>10} {'naive MB':>9}")
    for scenario in app.config.scenarios:
        row = summary["scenarios"][scenario.name]
        print(f"{scenario.name:<20} {scenario.model_kind:<7} {row['layers']:>6} {row['edges']:>6} "
              f"{row['parameters']:>12,} {_mb(row['params_bytes']):>10} {_mb(row['naive_buffer_bytes']):>9}")
    print(f"unique parameters of the app: {_mb(summary['params_bytes'])} MB (a tensor shared by scenarios counts once)")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """The one-screen summary (``sbrs.report.summary``) by default; the whole capture table with ``--table``;
    the MoC as JSON with ``--json``."""
    from sbrs.app import load_app
    from sbrs.moc import derive_moc, format_capture_table, moc_summary

    app = load_app(args.app)
    moc = derive_moc(app.models, app.config.adaptive)
    if args.json:
        _print_json(moc_summary(moc))
    elif args.table:
        print(format_capture_table(moc))
    else:
        import textwrap

        from sbrs.report.summary import MAX_LINES, WIDTH, app_summary, format_summary, plan_for

        streams = textwrap.wrap(_streams_line(args.app, str(app.config.runtime.streams)), WIDTH,
                                subsequent_indent="  ")
        session = _session_line(args.app) if app.config.runtime.session == "auto" else None
        if session is not None:
            streams = [*textwrap.wrap(session, WIDTH, subsequent_indent="  "), *streams]
        print(format_summary(app_summary(app, moc, plan_for(app)), MAX_LINES - len(streams)))  # one screen in all
        print("\n".join(streams))
    return 0


def _streams_line(app_path: str, asked: str) -> str:
    """How many frames the app's runtime keeps in flight (``runtime.streams``) and why: its current build's
    choice (under ``auto``, measured by ``sbrs build``), or what it asks while it has none."""
    from sbrs.artifact.read import build_dir, verify_build

    try:
        choice = verify_build(build_dir(app_path), app_path)["streams"]
    except InputError:
        return (f"runtime.streams: {asked}" + (" (measured by `sbrs build`: no current build yet, one stream until "
                                               "then)" if asked == "auto" else ""))
    return f"runtime.streams: {asked} → {choice['streams']} in the build ({choice['reason']})"


def _session_text(choice: dict[str, Any]) -> str:
    """How a build runs the app and why (its manifest's ``session``, ``sbrs.compile.session_choice``)."""
    from sbrs.compile.session_choice import SessionChoice

    return "session: " + SessionChoice.from_dict(choice).describe()


def _session_line(app_path: str) -> str | None:
    """Under ``runtime.session: auto``, how the current build runs the app and why, or that no build has chosen
    yet; None where the app names its form (the summary says it)."""
    from sbrs.artifact.read import build_dir, verify_build

    try:
        choice = verify_build(build_dir(app_path), app_path)["session"]
    except InputError:
        return ("session: runtime.session: auto, measured by `sbrs build` (no current build yet: units until then)")
    return None if choice["asked"] != "auto" else _session_text(choice)


ADAPTIVE_SETS = (("I", "O", "par"), ("I", "O"))


def _memory_table(app: Any, plans: dict[tuple[str, ...], Any]) -> str:
    from sbrs.memory.app_plan import naive_total_bytes

    naive_total = naive_total_bytes(app)
    lines = [
        f"memory of app '{app.name}' in MB (buffers exclude parameters; thesis Table 5.5 / Eq. 2.5-2.8)",
        f"{'A':<12} {'params':>8} {'naive':>8} {'supergr.':>8} {'Alg. 8':>8} {'arena':>8} {'bound':>8}"
        f" {'arena/bd':>8} {'total':>8} {'vs M_naive':>10}",
    ]
    for adaptive, memory in plans.items():
        total = memory.params_bytes + memory.arena_bytes
        lines.append(
            f"{'{' + ', '.join(adaptive) + '}':<12} {_mb(memory.params_bytes):>8} {_mb(memory.naive_bytes):>8}"
            f" {_mb(memory.supergraph_tensor_bytes):>8} {_mb(memory.reuse_bytes):>8} {_mb(memory.arena_bytes):>8}"
            f" {_mb(memory.lower_bound_bytes):>8} {memory.arena_bytes / max(memory.lower_bound_bytes, 1):>8.3f}"
            f" {_mb(total):>8} {100 * (naive_total - total) / naive_total:>9.1f}%")
    lines.append(f"M_naive (every scenario alone, nothing shared: parameters + one buffer per edge):"
                 f" {_mb(naive_total)} MB")
    return "\n".join(lines)


def cmd_build(args: argparse.Namespace) -> int:
    from sbrs.artifact.build import build_app
    from sbrs.reduction import GaParams
    from sbrs.reduction.search import parse_min_fps

    min_fps = parse_min_fps(args.min_fps)
    params = GaParams(seed=args.seed, population=args.population, generations=args.generations)
    result = build_app(args.app, memory_limit_mb=args.memory_limit, min_fps=min_fps, min_fps_ratio=args.min_fps_ratio,
                       cost=args.cost, params=params, plan_path=args.plan)
    if args.json:
        _print_json(result.to_dict())
    else:
        print(_build_text(result))
    violation = result.violation_error()
    if violation is not None:
        raise violation
    return 0


def _build_text(result: Any) -> str:
    """``sbrs build``'s report for people: the memory table per A, per scenario, where the plan and the build
    went, and the reduction when a memory limit needed one."""
    from sbrs.memory.app_plan import plan_memory

    app, plan, report = result.app, result.plan, result.report
    reduction = report.get("reduction")
    built = report["build"]
    plans = {tuple(app.config.adaptive): plan.memory}
    for adaptive in ADAPTIVE_SETS:
        if adaptive not in plans:  # the table's other rows need the figures alone, not a whole plan
            plans[adaptive] = plan_memory(app, adaptive)
    lines = [f"app {app.name}: {len(app.models)} scenarios, A = {{{', '.join(plan.adaptive)}}},"
             f" {report['supergraph_layers']} supergraph layers, {report['supergraph_edges']} edges,"
             f" {report['control_parameters']} control parameters", _memory_table(app, plans),
             f"{'scenario':<16} {'params':>8} {'naive':>8} {'arena':>8} {'bound':>8}"]
    for name, figures in plan.per_scenario.items():
        lines.append(f"{name:<16} {_mb(figures.params_bytes):>8} {_mb(figures.naive_bytes):>8}"
                     f" {_mb(figures.arena_bytes):>8} {_mb(figures.lower_bound_bytes):>8}")
    lines.append(f"plan saved to {result.plan_path}")
    files = (f"{built['call_files']} band-call files (the app runs by parts)" if built["run_by_parts"] is not None
             else "the app as one graph (one.onnx)" if built["execution"] == "one" else f"{built['units']} unit files")
    optimized = built["optimized_for"]
    lines.append(f"build written to {built['folder']}: {files}, {built['weights_bytes'] / 1e6:.1f} MB of weights "
                 "stored once" + (f" (no ONNX Runtime-optimised form: {built['not_optimized']})" if optimized is None
                                  else ", and ONNX Runtime's optimised form of each for this machine")
                 + " (figures above are planned from the models; `sbrs bench` measures process memory)")
    if reduction is not None:
        from sbrs.reduction.search import format_reduction

        lines.append(format_reduction(reduction))
        lines.append(f"the chosen band heights are saved in the plan ({result.plan_path})")
    streams = built["streams"]
    load = "" if streams.get("load") is None else f", measured at load average {streams['load']:.1f}"
    lines.append(f"streams: {streams['streams']} (runtime.streams: {streams['asked']}; {streams['reason']}{load})")
    if built.get("execution") == "parts":  # (the session choice is the units' form, which this build does not run)
        lines.append("session: runs by parts, band calls under its memory limit")
    else:
        lines.append(_session_text(built["session"]))
    footprint = built["footprint"]
    lines.append(f"plan of what the runtime holds: parameters as executed {_mb(footprint['params_bytes'])} + tensors "
                 f"{_mb(footprint['tensors_bytes'])} (every tensor, those inside ONNX Runtime calls too) + transition "
                 f"room {_mb(footprint['transition_bytes'])} = {_mb(footprint['plan_bytes'])} MB")
    parts = built["run_by_parts"]
    if parts is not None:
        cut, streams = parts["transition_cut"], parts["band_streams"]
        if streams > 1:
            room = (f"{streams} band streams: {streams} frames in flight at once, one per core, a switch's new frame "
                    "beside the old one")
            arena = f"{streams} arenas of line buffers of {_mb(parts['arena_bytes'])} MB each"
        else:
            room = ("no room left for SBRS-TP transitions to overlap: switches happen at frame boundaries"
                    if cut is None else "room for an SBRS-TP transition to overlap an old frame's "
                    + ("last call" if cut >= 1 else f"calls from {cut:.0%} of the frame on"))
            arena = f"arena of line buffers {_mb(parts['arena_bytes'])} MB"
        lines.append(f"the build runs by parts within the limit of {_mb(report['memory_limit_bytes'])} MB: sbrs' "
                     f"{arena}; {room}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    # Signals stop the run from here to the end: one while the build is made or loaded ends the run before its
    # first frame, a second one during the shutdown changes nothing (the summary is still written).
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            return _run(args, stop)
    finally:
        # The run is over and reported; the process is only exiting now. A repeated Ctrl-C or SIGTERM (an
        # impatient supervisor) must not turn a clean stop into a death by signal.
        import signal

        from sbrs.run.loop import STOP_SIGNALS

        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)


def _run(args: argparse.Namespace, stop: threading.Event) -> int:
    from sbrs.artifact.child import BuildStopped, ensure_build
    from sbrs.artifact.read import config_from_dict, read_manifest
    from sbrs.run.loop import RunSummary, run_app, write_summary

    # The command owns its process: OpenCV and its FFmpeg, where a video source loads them, say nothing on
    # stderr but errors (a stream's read timeout is a warning of theirs; sbrs logs what it does about it).
    os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    if args.source is not None:  # a text that names no source fails before the app is built or loaded
        from sbrs.run.sources import parse_source

        parse_source(args.source)

    try:
        folder = ensure_build(args.app, rebuild=args.rebuild, stop=stop)
    except BuildStopped as stopped:  # ended before its first frame, as a signal while the build loads does
        logger.info("sbrs run: %s", stopped)
        if args.summary:
            write_summary(args.summary, RunSummary(arena_bytes=0, interrupted=True))
        return 0
    config = config_from_dict(read_manifest(folder, args.app)["config"])
    observers: list[Any] = []
    metrics_server = None
    # prometheus_client only when asked; an address or allow-remote without any port is refused there, not ignored
    if (args.metrics_port is not None or config.metrics.port is not None or args.metrics_address is not None
            or args.metrics_allow_remote):
        from sbrs.metrics import metrics_from_args

        # The metrics endpoint starts before the models load, so a busy port fails at once.
        observer, metrics_server = metrics_from_args(args, config)
        observers.append(observer)
    if metrics_server is not None:
        logger.info("sbrs run: metrics on %s", metrics_server.url)
    try:
        return run_app(args.app, frames=args.frames, source=args.source, output=args.output, seed=args.seed,
                       granularity=args.granularity, transition=args.transition, on_switch=args.on_switch,
                       socket_path=args.socket,
                       listen=args.listen, no_socket=args.no_socket, order=args.order, observers=observers,
                       summary_path=args.summary, stop=stop, save_outputs=args.save_outputs,
                       realtime=args.realtime, reconnect=args.reconnect, save_video=args.save_video, show=args.show,
                       env_sources=args.env_source, env_poll_s=args.env_poll, env_max_age_s=args.env_max_age)
    finally:
        if metrics_server is not None:
            metrics_server.stop()


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP (the terminal went away) set ``stop`` instead of killing the
    process (main thread only). A second signal during the shutdown only sets it again. The command owns the
    process and its signals; the library never touches them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request_stop(signum: int, frame: Any) -> None:
        stop.set()

    import signal

    from sbrs.run.loop import STOP_SIGNALS

    previous = {sig: signal.signal(sig, request_stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_bench(args: argparse.Namespace) -> int:
    from sbrs.bench.bench import bench_app, format_report
    from sbrs.bench.switching import format_switching, measure_switching

    if args.switching:
        report = measure_switching(args.app, repeats=args.repeats or 10, granularity=args.granularity,
                                   transition_arena=args.transition_arena, methods=tuple(args.methods.split(",")))
        if args.json:
            _print_json(report)
        else:
            print(format_switching(report))
        return 0
    report = bench_app(args.app, frames=args.frames, repeats=args.repeats or 3, granularity=args.granularity)
    if args.json:
        _print_json(report)
    else:
        print(format_report(report))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Pictures and an offline HTML page of the app (``sbrs.report.make``); the files written, or --json."""
    from sbrs.report.make import make_report

    report = make_report(args.app, args.output, bench_path=args.bench, switching_path=args.switching,
                         measure=args.measure)
    if args.json:
        _print_json(report.to_dict())
        return 0
    for role, path in report.files.items():
        print(f"{role:<11} {path}")
    for role, why in report.missing.items():
        logger.info("sbrs report: no %s picture: %s", role, why)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """The app as one ONNX model and its JSON sidecar (``sbrs.artifact.export``)."""
    from sbrs.artifact.export import export_app

    written = export_app(args.app, args.output)
    if args.json:
        _print_json(written)
        return 0
    sharing = written["sharing"]
    print(f"wrote {written['files'][0]} ({len(written['scenarios'])} scenarios as one graph: "
          f"{sharing['nodes']} layers for {sum(sharing['steps'].values())} steps, {sharing['shared_nodes']} run by "
          f"every scenario, {sharing['if_nodes']} If; weights {_mb(sharing['params_bytes'])} MB, "
          f"{_mb(sharing['params_sum_bytes'])} MB as separate models) and {written['files'][1]}")
    return 0


def cmd_zoo_list(args: argparse.Namespace) -> int:
    from sbrs import zoo

    entries = zoo.list_models()
    if args.json:
        _print_json({"models": [asdict(entry) for entry in entries]})
        return 0
    for entry in entries:
        options = ", ".join(f"{name}={spec.default!r}" for name, spec in entry.options.items())
        print(f"{entry.name:<16} {entry.description}")
        print(f"{'':<16} options: {options}")
    return 0


def _parse_option(model: str, text: str) -> tuple[str, Any]:
    from sbrs import zoo

    if "=" not in text:
        raise InputError(f"--option '{text}': expected KEY=VALUE")
    key, _, value = text.partition("=")
    return key.strip(), zoo.parse_option_text(model, key.strip(), value)


def cmd_zoo_export(args: argparse.Namespace) -> int:
    from sbrs import zoo

    options: dict[str, Any] = dict(_parse_option(args.name, text) for text in args.option)
    for key in ("width", "resolution", "seed"):
        value = getattr(args, key)
        if value is not None:
            options[key] = value
    path = zoo.export(args.name, args.output, **options)
    if args.json:
        _print_json({"model": args.name, "options": options, "path": str(path)})
    else:
        print(f"wrote {path}")
    return 0


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, with the terminal width read here: argparse imports ``shutil`` for it at every
    ``add_argument`` otherwise (0.46 MB of every ``sbrs run``, for help text that a run never prints)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it: ``COLUMNS``, the terminal, else 80."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` using ``_Formatter``; its subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


#: Every subcommand's name (``build_parser``).
COMMANDS: tuple[str, ...] = ("check", "inspect", "build", "run", "bench", "report", "switch", "env", "status",
                             "zoo", "export")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: every subcommand, or only ``command``'s (one of ``COMMANDS``). ``main`` builds only the
    one asked for: the parsers of all the others cost ``sbrs run`` about 0.3 MB it would hold to the end."""
    parser = _Parser(
        prog="sbrs",
        description="Run one CNN application with several scenarios that share layers, weights and one memory "
                    "arena, switching between them at run time.")
    parser.add_argument("--version", action="version", version=f"sbrs {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        _verbosity_arguments(sub)
        return sub

    def wanted(*names: str) -> bool:
        return command is None or command in names

    if wanted("check"):
        _check_arguments(add("check", cmd_check, "validate an app and print each scenario's CNN figures"))
    if wanted("inspect"):
        inspect = add("inspect", cmd_inspect, "the SBRS MoC on one screen: what the scenarios share and what it "
                                              "saves; --table: the capture table (thesis Table 5.1) and steps")
        _check_arguments(inspect)
        inspect.add_argument("--table", action="store_true",
                             help="print the full capture table, control parameters and every scenario's steps")
    if wanted("build"):
        _build_arguments(add("build", cmd_build,
                             "derive the MoC and plan one arena for every scenario; print memory figures"))
    if wanted("run"):
        _run_arguments(add("run", cmd_run, "run the app (the main job)"))
    if wanted("bench"):
        _bench_arguments(add("bench", cmd_bench,
                             "throughput per scenario against plain ONNX Runtime, and process memory"))
    if wanted("report"):
        _report_arguments(add("report", cmd_report, "pictures and an offline HTML page of the app: supergraph, "
                                                    "memory, switch timeline, Pareto front (needs sbrs[plots])"))
    if wanted("switch", "env", "status"):
        from sbrs.server.client import add_client_commands

        add_client_commands(commands, add)
    if wanted("zoo"):
        _zoo_commands(add("zoo", lambda _args: 2, "reference CNN architectures with seeded weights"))
    if wanted("export"):
        export = add("export", cmd_export, "write the app as one ONNX model (every scenario behind an int64 input "
                                           "'scenario') and a JSON sidecar naming each scenario's index and outputs")
        export.add_argument("app", metavar="APP.yaml")
        export.add_argument("-o", "--output", required=True, metavar="APP.onnx",
                            help="the model file; the sidecar is written beside it with the suffix .json")
        export.add_argument("--json", action="store_true", help="print one JSON object: the sidecar and the files")
    return parser


def _verbosity_arguments(parser: argparse.ArgumentParser) -> None:
    """``-v``/``--verbose`` and ``-q``/``--quiet``: what the command logs on stderr (module docstring)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", help="also log details (DEBUG), e.g. the arena chart")
    group.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")


def _check_arguments(check: argparse.ArgumentParser) -> None:  # check and inspect take the same arguments
    check.add_argument("app", metavar="APP.yaml")
    check.add_argument("--json", action="store_true", help="print one JSON object")


def _build_arguments(build: argparse.ArgumentParser) -> None:
    build.add_argument("app", metavar="APP.yaml")
    build.add_argument("--json", action="store_true", help="print one JSON object")
    build.add_argument("--plan", metavar="FILE", default=None,
                       help="where to save the plan (default: APP.plan.json beside the app file)")
    build.add_argument("--memory-limit", type=float, default=None, metavar="MB",
                       help="M^c: parameters plus buffers; above what reuse alone reaches, choose layers to process by "
                            "parts (thesis Algorithm 9; default: app memory_limit_mb); exit 2 when unreachable")
    build.add_argument("--min-fps", action="append", default=None, metavar="SCENARIO=FPS",
                       help="T^c_n: a scenario's minimum throughput under the cost model (repeatable)")
    build.add_argument("--min-fps-ratio", type=float, default=None, metavar="R",
                       help="every scenario at least R times its unreduced throughput under the cost model")
    build.add_argument("--cost", choices=("auto", "analytic", "measured"), default="measured",
                       help="throughput model of the search: measured on this machine (default; measured once, "
                            "then cached), analytic, or auto (the cached measured table if any, else analytic)")
    build.add_argument("--seed", type=int, default=0, help="seed of the genetic search")
    build.add_argument("--population", type=int, default=24, help="GA population")
    build.add_argument("--generations", type=int, default=16, help="GA generations")


def _run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("app", metavar="APP.yaml")
    run.add_argument("--frames", type=int, default=None, help="stop after N frames (default: until interrupted)")
    run.add_argument("--source", "--input", dest="source", default=None, metavar="SRC",
                     help="where frames come from: a folder of .npy frames or of images, a video file, a camera "
                          "(0, /dev/videoN, v4l2:///dev/videoN), a stream (rtsp://, rtp://@:PORT, udp://@:PORT, "
                          "http(s)://), csi://N or a GStreamer pipeline (default: the app's source:, else seeded "
                          "random frames; video needs sbrs[video])")
    run.add_argument("--realtime", action="store_true",
                     help="pace a video file at its frame rate, the newest frame taken, as a camera would give it "
                          "(default: every frame of the file, as fast as the app runs)")
    run.add_argument("--reconnect", action=argparse.BooleanOptionalAction, default=None,
                     help="reopen a source that stops giving frames, with backoff (default: on for network streams, "
                          "off otherwise)")
    run.add_argument("--save-video", default=None, metavar="OUT.mp4",
                     help="also write every processed frame with its result drawn on it (labels or boxes, the "
                          "scenario, fps, switches) to a video (.mp4, .mkv, .mov, .avi)")
    run.add_argument("--show", action="store_true",
                     help="show the processed frames in a window (needs a display and OpenCV with a GUI)")
    run.add_argument("--output", default=None, metavar="FILE", help="write the JSON lines here (default: stdout)")
    run.add_argument("--summary", default=None, metavar="FILE",
                     help="also write the run's summary as one JSON object to FILE (frames, switches, and the "
                          "runtime's memory report: params_bytes, arena_bytes, limit_bytes)")
    run.add_argument("--save-outputs", default=None, metavar="DIR",
                     help="also write each frame's raw outputs to DIR/frame-NNNNNNNNNN.npz (with its frame index and "
                          "scenario; DIR is made if missing and must hold no frame files yet)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random frames")
    run.add_argument("--rebuild", action="store_true",
                     help="compile the app again first (default: run its current build, made on first run)")
    run.add_argument("--granularity", choices=("auto", "layer"), default=None,
                     help="override runtime.granularity of the app")
    run.add_argument("--transition", choices=("sbrs-tp", "naive"), default=None,
                     help="override runtime.transition of the app (how switches run)")
    run.add_argument("--on-switch", choices=("finish", "cancel", "resume"), default=None,
                     help="override runtime.on_switch of the app: let the frame in flight finish on the old "
                          "scenario, cancel it and run that frame again on the new one, or resume it on the new "
                          "one from the layers both scenarios share")
    run.add_argument("--order", choices=("completion", "stream"), default="completion",
                     help="order of the JSON lines: as each frame's outputs exist (default; during an SBRS-TP switch "
                          "the new scenario's first frame may come before the frame in flight) or as frames came")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--socket", default=None, metavar="PATH",
                       help="control socket (default: $XDG_RUNTIME_DIR/sbrs/APP.sock, else /tmp/sbrs-UID/APP.sock)")
    where.add_argument("--no-socket", action="store_true", help="serve no control socket")
    run.add_argument("--listen", default=None, metavar="HOST:PORT",
                     help="also serve the control protocol on TCP, loopback addresses only")
    sensing = run.add_argument_group("environment from sensors", "readings go to the app's policy as `sbrs env` "
                                     "requests do (these replace the app file's environment: section)")
    sensing.add_argument("--env-source", action="append", default=None, metavar="SPEC",
                         help="a sensor (repeatable): power_supply[:NAME|:PATH], thermal[:NAME|:PATH], "
                              "mavlink:udpin:HOST:PORT, mavlink:tcp:HOST:PORT, mavlink:DEVICE[:BAUD]; 'none': none")
    sensing.add_argument("--env-poll", type=float, default=None, metavar="S",
                         help="read the sysfs sensors every S seconds (default: environment.poll_s, 1)")
    sensing.add_argument("--env-max-age", type=float, default=None, metavar="S",
                         help="forget a sensor's value S seconds after its last reading (default: "
                              "environment.max_age_s, 10)")
    from sbrs.metrics import cli_arguments

    cli_arguments(run)


def _bench_arguments(bench: argparse.ArgumentParser) -> None:
    bench.add_argument("app", metavar="APP.yaml")
    bench.add_argument("--frames", type=int, default=20, help="frames per timed block")
    bench.add_argument("--repeats", type=int, default=None,
                       help="timed blocks per side and scenario (median; default 3); with --switching, samples per "
                            "ordered pair and method (default 10)")
    bench.add_argument("--granularity", choices=("auto", "layer"), default=None,
                       help="override runtime.granularity of the app")
    bench.add_argument("--switching", action="store_true",
                       help="switch response delay of every ordered pair as the caller sees it, sbrs (SBRS-TP, "
                            "naive) against plain ONNX Runtime (thesis Figure 5.7)")
    bench.add_argument("--transition-arena", choices=("shadow", "shared"), default=None,
                       help="with --switching: SBRS-TP's arena (default shadow)")
    bench.add_argument("--methods", default="sbrs-tp,sbrs-naive,ort-all,ort-load", metavar="M,M,...",
                       help="with --switching: what to measure (sbrs-tp, sbrs-naive, ort-all: plain ONNX Runtime with "
                            "every session loaded, ort-load: ONNX Runtime loading the new session on a switch; "
                            "also sbrs-cancel: sbrs with on_switch cancel, ort-cancel: ONNX Runtime stopping its "
                            "call in flight, both running that frame again on the new scenario; resume: sbrs with "
                            "on_switch resume, continuing that frame on the new scenario from the layers both share)")
    bench.add_argument("--json", action="store_true", help="print one JSON object")


def _report_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument("app", metavar="APP.yaml")
    report.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="folder to write the PNG files, supergraph.onnx/.json and index.html into (made if "
                             "missing)")
    report.add_argument("--bench", default=None, metavar="FILE.json",
                        help="an `sbrs bench APP.yaml --json` report: device memory and throughput beside the plan")
    report.add_argument("--switching", default=None, metavar="FILE.json",
                        help="an `sbrs bench APP.yaml --switching --json` report: the switch timeline")
    report.add_argument("--measure", action="store_true",
                        help="make short bench runs for what --bench/--switching do not give, and a short reduction "
                             "search for the Pareto front of an app without a saved one (slower; default: only the "
                             "plan, and the page says what is missing)")
    report.add_argument("--json", action="store_true", help="print one JSON object: the files written, what is missing")


def _zoo_commands(zoo: argparse.ArgumentParser) -> None:
    zoo_commands = zoo.add_subparsers(dest="zoo_command", metavar="ZOO_COMMAND", required=True)
    zoo_list = zoo_commands.add_parser("list", help="list the zoo's models and their options")
    zoo_list.set_defaults(handler=cmd_zoo_list)
    _verbosity_arguments(zoo_list)
    zoo_list.add_argument("--json", action="store_true", help="print one JSON object")
    export = zoo_commands.add_parser("export", help="write a zoo model as an ONNX file")
    export.set_defaults(handler=cmd_zoo_export)
    _verbosity_arguments(export)
    export.add_argument("name", help="model name (see `sbrs zoo list`)")
    export.add_argument("-o", "--output", required=True, metavar="FILE.onnx")
    export.add_argument("--width", type=float, default=None, help="width multiplier")
    export.add_argument("--resolution", type=int, default=None, help="input height and width")
    export.add_argument("--seed", type=int, default=None, help="weights seed")
    export.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="any other model option (e.g. drop_blocks=1,2 or exit_stage=2)")
    export.add_argument("--json", action="store_true", help="print one JSON object")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    level = (logging.DEBUG if getattr(args, "verbose", False) else
             logging.WARNING if getattr(args, "quiet", False) else logging.INFO)
    try:
        with logging_to_stderr(level):
            return int(args.handler(args))
    except SbrsError as exc:
        _say(f"sbrs: error: {exc}")
        return exc.exit_code
    except BrokenPipeError:  # e.g. `sbrs zoo list | head`: the reader left; say nothing more
        if sys.stdout is not None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        _say("sbrs: interrupted")
        return 130
    except Exception as exc:
        if os.environ.get("SBRS_DEBUG"):
            raise
        message = " ".join(str(exc).split())[:500]
        _say(f"sbrs: internal error: {type(exc).__name__}: {message} (set SBRS_DEBUG=1 for a traceback)")
        return 1


def _say(line: str) -> None:
    """``line`` on stderr, where there is one: started with stderr closed (``2>&-``), Python makes it None, and
    writing the error there failed in turn, exit 1 where the error's own status was due."""
    if sys.stderr is not None:
        sys.stderr.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
