"""sbrs through its Python API as an application embeds it: ``sbrs.runtime_for(app_path)`` on the app's build,
every scenario run ``frames`` frames through ``process`` (the stream entry point: two frames in flight on band
streams, as in ``sbrs run``), on a frame whose pages are written (a zero frame maps the kernel's zero page and
would count as nothing). Arguments: the app's path, the number of frames."""

import itertools
import sys

import numpy as np
import onnxruntime  # noqa: F401  (the baseline's imports, so the stages below show what sbrs adds)
from stages import compiled_here, stage

if __name__ == "__main__":
    app_path, frames = sys.argv[1], int(sys.argv[2])
    stage("bare")
    import sbrs

    stage("imported")
    runtime = sbrs.runtime_for(app_path)
    stage("loaded", {"scenarios": list(runtime.scenarios), "compiled_from_source": compiled_here("sbrs")})
    (shape, dtype), = runtime.input_specs.values()
    frame = np.full(shape, 0.5, dtype)
    for scenario in runtime.scenarios:
        runtime.switch(scenario)
        for _ in runtime.process(itertools.repeat(frame, frames)):
            pass
    stage("ran", {"memory_report": runtime.memory_report()})
