"""sbrs inside an application that runs ONNX Runtime sessions of its own (issue: "sbrs inside a real application").

Each case runs in a fresh interpreter, because ONNX Runtime's environment is created once per process and the
order in which the application and sbrs make their first sessions is what is tested. The application's session
is made with ONNX Runtime's default options, as a user who has never heard of sbrs makes it; its outputs and
sbrs' are checked against ONNX Runtime running each scenario's own model on the same frames, also while both
run at once from two threads. No "EP Error" banner may reach the process's output.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

TINY = REPO / "apps" / "tiny.yaml"

CASE = textwrap.dedent(r"""
    import sys, threading
    import numpy as np
    import onnxruntime as ort
    from sbrs import load_app, runtime_for

    order, app_path = sys.argv[1], sys.argv[2]
    app = load_app(app_path)
    models = {s.name: s.model_path for s in app.config.scenarios}
    rng = np.random.default_rng(7)
    frames = [rng.standard_normal(app.config.input.shape).astype(np.float32) for _ in range(4)]

    def user_session(path):  # the application's own session: ONNX Runtime's defaults
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    def close(got, want):
        return all(np.abs(got[k] - v).max() <= 1e-5 * max(1.0, float(np.abs(v).max())) for k, v in want.items())

    if order == "user-first":
        user = user_session(models["full"])
        runtime = runtime_for(app)
    elif order == "sbrs-first":
        runtime = runtime_for(app)
        user = user_session(models["full"])
    elif order == "sbrs-closed-first":
        runtime_for(app).close()
        user = user_session(models["full"])
        runtime = runtime_for(app)
    else:
        raise SystemExit(f"unknown order {order}")
    references = {name: user_session(path) for name, path in models.items()}
    names = [o.name for o in user.get_outputs()]
    feed = user.get_inputs()[0].name

    def reference(scenario, frame):
        session = references[scenario]
        return dict(zip(names, session.run(None, {feed: frame})))

    failures = []

    def user_loop():
        for i in range(150):
            frame = frames[i % len(frames)]
            got = dict(zip(names, user.run(None, {feed: frame})))
            if not close(got, reference("full", frame)):
                failures.append(f"user frame {i}")

    def sbrs_loop():
        for i in range(150):
            scenario = list(models)[i % len(models)]
            runtime.switch(scenario)
            frame = frames[i % len(frames)]
            got = runtime.infer(frame)
            if not close(got, reference(scenario, frame)):
                failures.append(f"sbrs frame {i} on {scenario}")

    user_loop(); sbrs_loop()  # one after the other, then both at once
    threads = [threading.Thread(target=user_loop), threading.Thread(target=sbrs_loop)]
    for thread in threads: thread.start()
    for thread in threads: thread.join()
    runtime.close()
    late = user_session(models["skip"])  # a session made after sbrs is done works too
    late.run(None, {feed: frames[0]})
    print("FAILURES", failures)
    print("OK")
""")


def run_case(order: str, app: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CASE, order, str(app)], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


@pytest.mark.parametrize("order", ["user-first", "sbrs-first", "sbrs-closed-first"])
def test_sbrs_and_the_applications_own_sessions_share_a_process(order: str) -> None:
    done = run_case(order, TINY)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FAILURES []" in done.stdout and done.stdout.rstrip().endswith("OK"), done.stdout[-2000:]
    assert "EP Error" not in done.stdout + done.stderr


PROCESS_SCOPE = textwrap.dedent(r"""
    import logging, sys
    import numpy as np
    import onnxruntime as ort
    from sbrs import load_app, runtime_for

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("sbrs").addHandler(handler)
    app = load_app(sys.argv[1])
    frame = np.zeros(app.config.input.shape, np.float32)
    with runtime_for(app) as runtime:
        assert runtime.thread_pool.scope == "process"
        runtime.infer(frame)
    assert any("threads_scope: process" in r.getMessage() and "refuse" in r.getMessage() for r in records), \
        [r.getMessage() for r in records]
    try:
        ort.InferenceSession(app.config.scenarios[0].model_path, providers=["CPUExecutionProvider"],
                             enable_fallback=0)
    except Exception as error:
        print("REFUSED", "use_per_session_threads" in str(error))
    else:
        print("ACCEPTED")
""")


def test_the_process_wide_pool_is_opt_in_and_says_what_it_costs(tmp_path: Path) -> None:
    app = tmp_path / "tiny.yaml"
    text = TINY.read_text(encoding="utf-8")
    app.write_text(text + "runtime: {threads_scope: process}\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", PROCESS_SCOPE, str(app)], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    # ONNX Runtime's own rule, which the opt-in accepts and the warning above announced
    assert "REFUSED True" in done.stdout, done.stdout
