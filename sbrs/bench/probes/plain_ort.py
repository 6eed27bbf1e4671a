"""Plain ONNX Runtime as a user runs it: one session per model with ONNX Runtime's default options, every model
run ``frames`` times; then the same after glibc's ``malloc_trim``. Argument: a JSON object with ``models``,
``shape``, ``dtype``, ``frames``."""

import json
import sys

import numpy as np
import onnxruntime as ort
from stages import malloc_trim, stage

if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    stage("bare")
    sessions = [ort.InferenceSession(path, providers=["CPUExecutionProvider"]) for path in args["models"]]
    stage("loaded")
    frame = np.full(args["shape"], 0.5, args["dtype"])  # written pages, as a camera's frame (zeros map nothing)
    for session in sessions:
        feed = {session.get_inputs()[0].name: frame}
        for _ in range(args["frames"]):
            session.run(None, feed)
    stage("ran")
    stage("trimmed", {"trimmed": malloc_trim()})
