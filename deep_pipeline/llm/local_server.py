"""The local model server process: `python -m deep_pipeline.llm.local_server --model … --port …`.

Started by local_model.ensure_local_server in its own session so it outlives the run
that started it; it serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading


def default_threads() -> int:
    """Half the cores (1 on a 2-core machine), or DEEP_PIPELINE_LOCAL_THREADS.

    Measured here on 2 busy cores: 1 thread kept 49-57 tokens/s while 2 threads fell
    to 15-35 (llama.cpp's threads wait on each other when one is descheduled), and the
    other core stays free for Dagster and the agent.
    """
    configured = os.environ.get("DEEP_PIPELINE_LOCAL_THREADS")
    return int(configured) if configured else max(1, (os.cpu_count() or 2) // 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a GGUF model with xllamacpp on 127.0.0.1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--alias", required=True)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=default_threads())
    args = parser.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = 1  # llama.cpp splits the context across slots: one slot keeps all 8192
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.verbosity = 0

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # starts serving at once
    print(f"serving {args.alias} at {server.listening_address}", flush=True)
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
