"""The baseline: an interpreter with numpy and onnxruntime imported, nothing else; lives until stdin closes."""

import sys

import numpy  # noqa: F401
import onnxruntime  # noqa: F401
from stages import stage

if __name__ == "__main__":
    stage("bare")
    sys.stdin.read()
