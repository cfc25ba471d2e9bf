# OUTPUT0 = INPUT0 for BYTES (strings) of any length.
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0",
                        np.array(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy(), dtype=np.object_),
                    )
                ]
            )
            for r in requests
        ]
