"""ModelConfig, the messages and enums the config modules read, and Triton's platform, backend and
default file names."""

from __future__ import annotations

from inferd.repository._proto import pb2

# typed by typings/tritonclient/grpc/model_config_pb2.pyi (scripts/proto_stubs.py)
ModelConfig = pb2.ModelConfig
BatchInput = pb2.BatchInput
BatchOutput = pb2.BatchOutput
DataType = pb2.DataType
ModelInput = pb2.ModelInput
ModelOutput = pb2.ModelOutput
ModelParameter = pb2.ModelParameter
ModelInstanceGroup = pb2.ModelInstanceGroup
ModelQueuePolicy = pb2.ModelQueuePolicy
ModelRateLimiter = pb2.ModelRateLimiter
ModelSequenceBatching = pb2.ModelSequenceBatching
ModelWarmup = pb2.ModelWarmup

ENSEMBLE_PLATFORM = "ensemble"

TENSORFLOW_BACKEND = "tensorflow"
TF_GRAPHDEF_PLATFORM = "tensorflow_graphdef"
TF_SAVEDMODEL_PLATFORM = "tensorflow_savedmodel"
TF_GRAPHDEF_FILENAME = "model.graphdef"
TF_SAVEDMODEL_FILENAME = "model.savedmodel"

TENSORRT_BACKEND = "tensorrt"
TENSORRT_PLATFORM = "tensorrt_plan"
TENSORRT_FILENAME = "model.plan"

ONNXRUNTIME_BACKEND = "onnxruntime"
ONNXRUNTIME_PLATFORM = "onnxruntime_onnx"
ONNXRUNTIME_FILENAME = "model.onnx"

OPENVINO_BACKEND = "openvino"
OPENVINO_FILENAME = "model.xml"

PYTORCH_BACKEND = "pytorch"
PYTORCH_PLATFORM = "pytorch_libtorch"
PYTORCH_FILENAME = "model.pt"

PYTHON_BACKEND = "python"
PYTHON_FILENAME = "model.py"

#: Legacy platform name -> the backend that serves it (Triton ``GetBackendTypeFromPlatform``).
KNOWN_PLATFORM_BACKENDS: dict[str, str] = {
    TF_GRAPHDEF_PLATFORM: TENSORFLOW_BACKEND,
    TF_SAVEDMODEL_PLATFORM: TENSORFLOW_BACKEND,
    TENSORRT_PLATFORM: TENSORRT_BACKEND,
    ONNXRUNTIME_PLATFORM: ONNXRUNTIME_BACKEND,
    PYTORCH_PLATFORM: PYTORCH_BACKEND,
}
