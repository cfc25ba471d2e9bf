# TEXT [N,1] (UTF-8) -> input_ids, attention_mask [N,L] INT64: WordPiece with the `tokenizers` package.
# Each request is padded to its own longest row, so rows of one request share L and stack in minilm_onnx.
import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        try:
            from tokenizers import Tokenizer
        except ImportError as e:
            raise pb_utils.TritonModelException(
                "minilm_tokenizer needs the 'tokenizers' package (pip install tokenizers, or inferd's "
                "'examples' extra)"
            ) from e
        path = Path(args["model_repository"]) / "tokenizer.json"
        if not path.is_file():
            raise pb_utils.TritonModelException(
                f"minilm_tokenizer: {path} is missing (examples/build_models.py writes it)"
            )
        config = json.loads(args["model_config"])
        max_len = int(config["parameters"]["max_seq_length"]["string_value"])
        self.tokenizer = Tokenizer.from_file(str(path))
        # tokenizer.json pads every row to 128 and truncates at 128; sentence-transformers truncates
        # at max_seq_length and pads to the longest row
        self.tokenizer.enable_truncation(max_len)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            try:
                texts = [r.decode("utf-8") if isinstance(r, bytes) else str(r) for r in rows]
            except UnicodeDecodeError as e:
                error = pb_utils.TritonError(f"TEXT must be UTF-8: {e}")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            encodings = self.tokenizer.encode_batch(texts)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            outputs = [pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
