# Stand-in Python-backend model used in place of QA models whose real backend
# (TensorFlow / ONNX Runtime / PyTorch / identity) is not in the reference's CPU
# build.  Mode comes from the model name:
#   simple*, simple_int8 : OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1
#   anything else        : OUTPUTi = INPUTi (identity, cast to the output type); an optional input
#                          left out gives zeros of the first given input's shape (what
#                          L0_optional_input's pipeline expects of the identity backend)
# A parameter execute_delay_ms (the identity backend's) sleeps that long per execute.
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.name = cfg["name"]
        self.inputs = [i["name"] for i in cfg.get("input", [])]
        self.outputs = [
            (o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in cfg.get("output", [])
        ]
        self.add_sub = self.name in ("simple", "simple_int8", "simple_string")
        delay = cfg.get("parameters", {}).get("execute_delay_ms", {}).get("string_value", "0")
        self.delay_s = int(delay) / 1000.0

    def execute(self, requests):
        if self.delay_s:
            time.sleep(self.delay_s)
        responses = []
        for request in requests:
            arrs = []
            for n in self.inputs:
                t = pb_utils.get_input_tensor_by_name(request, n)
                arrs.append(None if t is None else t.as_numpy())
            outs = []
            if self.add_sub and len(arrs) >= 2:
                if self.name == "simple_string":
                    a = arrs[0].astype(np.int32)
                    b = arrs[1].astype(np.int32)
                    vals = [a + b, a - b]
                    vals = [
                        np.array([str(x).encode() for x in v.flatten()], dtype=np.object_).reshape(v.shape)
                        for v in vals
                    ]
                else:
                    vals = [arrs[0] + arrs[1], arrs[0] - arrs[1]]
                for (n, dt), v in zip(self.outputs, vals, strict=False):
                    outs.append(pb_utils.Tensor(n, v.astype(dt)))
            else:
                for k, (n, dt) in enumerate(self.outputs):
                    if k < len(arrs) and arrs[k] is None:  # an optional input not given
                        given = next(a for a in arrs if a is not None)
                        outs.append(pb_utils.Tensor(n, np.zeros(given.shape, dtype=dt)))
                        continue
                    src = (
                        arrs[k]
                        if k < len(arrs) and arrs[k] is not None
                        else next(a for a in arrs if a is not None)
                    )
                    if dt == np.object_ or src.dtype == np.object_:
                        try:
                            v = src.astype(dt)
                        except Exception:
                            v = np.zeros(src.shape, dtype=dt)
                    else:
                        v = src.astype(dt)
                    outs.append(pb_utils.Tensor(n, v))
            responses.append(pb_utils.InferenceResponse(outs))
        return responses
