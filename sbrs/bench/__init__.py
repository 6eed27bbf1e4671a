"""``sbrs bench``: an interface above the runtime that opens runtimes and measures them against plain ONNX
Runtime (throughput, process memory, switch response delays as the caller sees them)."""
