"""sbrs through its Python API as an application embeds it: ``sbrs.runtime_for(app_path)`` on the app's build,
every scenario run ``frames`` frames. Arguments: the app's path, the number of frames."""

import sys

import numpy as np
import onnxruntime  # noqa: F401  (the baseline's imports, so the stages below show what sbrs adds)
from stages import stage

if __name__ == "__main__":
    app_path, frames = sys.argv[1], int(sys.argv[2])
    stage("bare")
    import sbrs

    stage("imported")
    runtime = sbrs.runtime_for(app_path)
    stage("loaded", {"scenarios": list(runtime.scenarios)})
    (shape, dtype), = runtime.input_specs.values()
    frame = np.zeros(shape, dtype)
    for scenario in runtime.scenarios:
        runtime.switch(scenario)
        for _ in range(frames):
            runtime.infer(frame)
    stage("ran", {"memory_report": runtime.memory_report()})
