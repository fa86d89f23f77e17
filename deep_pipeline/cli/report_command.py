"""`deep-pipeline report COMPILE [-o report.html]`: the compile as one self-contained HTML page."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from deep_pipeline import home as homes
from deep_pipeline.cli.compile_commands import _home


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a finalized compile's report as one HTML page",
        description="Write one self-contained HTML file (inline CSS, no script, nothing fetched) from a finalized "
        "compile's records: the first and last score matrix of every level as heatmaps (each cell's reason and "
        "evidence on hover), the decision timeline numbered across levels (outcome, reason, scores, delta, per-call "
        "scores, order disagreement, skill use), the SKILL.md diff S_fast -> S_final, the evidence quotes with the "
        "trace steps around them, tokens and cost per role, and the latest evaluation when there is one. Reads only "
        "the compile's folder; the file is written atomically. Exit 2: unknown or unfinished compile, or an output "
        "path that is a folder.",
    )
    p.add_argument("compile_key", metavar="COMPILE")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="where to write the page (default: <compile folder>/report.html)")
    p.add_argument("--json", action="store_true", help="print where the page is as one JSON object")
    p.set_defaults(handler=_report)
    register_serve(sub)


def _report(args: argparse.Namespace) -> int:
    from deep_pipeline.engine.compiles import find_compile
    from deep_pipeline.errors import InputError
    from deep_pipeline.report import default_path, gather, render
    from deep_pipeline.store import atomic_write_text, require_writable_folder

    _home(create=False)  # no Dagster instance: the page is made from the compile's folder alone
    cdir = find_compile(homes.store_root(), args.compile_key)
    page = render(gather(cdir))  # an unfinished compile is refused before anything is made
    path = args.output if args.output is not None else default_path(cdir)
    if path.is_dir():
        raise InputError(f"{path}: -o: is a folder; expected the path of the HTML file to write")
    require_writable_folder(path.parent, "-o: the report's folder")
    atomic_write_text(path, page)
    print(json.dumps({"compile": args.compile_key, "report_html": str(path)}) if args.json else path)
    return 0


def register_serve(sub: argparse._SubParsersAction) -> None:
    from deep_pipeline.report.serve import DEFAULT_HOST, DEFAULT_PORT, URL_VARIABLE, local_address

    p = sub.add_parser(
        "serve-reports",
        help="serve the compiles' HTML reports over HTTP (the UI's report_url links)",
        description="Serve <compile>/report.html of every compile in the store, and a list of them at /, read-only "
        f"(nothing else of a compile folder). The compile_report asset's report_url points here (${URL_VARIABLE}, "
        f"default http://{DEFAULT_HOST}:{DEFAULT_PORT}/); `make ui` starts it beside the UI. Runs until Ctrl-C. "
        "Exit 2: the address is in use.",
    )
    host, port = local_address()
    p.add_argument("--host", default=host, help=f"the address to bind (default {host})")
    p.add_argument("--port", type=int, default=port,
                   help=f"the port to bind (default: ${URL_VARIABLE}'s when it names this machine, else {DEFAULT_PORT})")
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from deep_pipeline.errors import InputError
    from deep_pipeline.report.serve import report_server

    _home(create=False)
    store = homes.store_root()
    try:
        server = report_server(store, args.host, args.port)
    except OSError as exc:
        raise InputError(f"{args.host}:{args.port}: cannot serve the reports there: {exc.strerror or exc}") from None
    print(f"serving the reports of {store} at http://{args.host}:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
