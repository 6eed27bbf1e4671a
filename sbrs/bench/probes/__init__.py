"""Processes whose memory ``sbrs.bench.device_memory`` reads from outside. Each file is run by its path (``python
FILE ...``), never imported, so that only what it imports itself is in the process: the bare baseline and the
plain ONNX Runtime probes import numpy and onnxruntime and nothing of sbrs.

The protocol: at each stage a probe prints ``STAGE <name> <json facts>`` on stdout and waits for a line on stdin
before going on (the parent reads ``/proc/PID/smaps`` meanwhile); it ends when stdin closes.
"""
