"""The example zoo's digit classifiers, for 8x8 images (the shape of scikit-learn's bundled digits).

- ``digits_onnx``: a logistic-regression classifier trained (deterministically, in well under a second)
  on scikit-learn's digits dataset (``load_digits``: 8x8 images, pixel intensities 0 ... 16, shipped
  inside the wheel) and exported with skl2onnx without ZipMap: ``pixels`` [N,64] FP32 to ``label``
  (INT64) and ``probabilities`` [N,10], with a labels file (``digit_0`` ... ``digit_9``) for the
  classification extension, max_batch_size 16 and dynamic batching. About 97% right on the held-out
  quarter of the dataset. Needs ``onnx``, ``scikit-learn`` and ``skl2onnx`` (``.[examples]``).
- ``digits_torch``: a small CNN traced to TorchScript, with seeded weights and a labels file (``0`` ...
  ``9``) for the classification extension; served by the pytorch backend. Needs torch (``.[torch]``).

examples/build_models.py writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SEED = 20240601

DIGITS_CLASSES = 10

DIGITS_TORCH_CONFIG = """\
# A TorchScript CNN for 8x8 digit images (seeded weights): INPUT__0 [1, 8, 8] -> class scores.
# Ask for "classification": N on OUTPUT__0 to get the top N as "score:index:label".
name: "digits_torch"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1, 8, 8 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "digits_labels.txt" } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def digits_torch_module(seed: int = SEED) -> Any:
    """conv 3x3 (8) -> relu -> max-pool 2 -> linear (128 -> 10) -> softmax, weights from ``seed``, traced."""
    import torch  # the examples' only torch use: imported when this model is built

    rng = np.random.default_rng(seed)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(1),
        torch.nn.Linear(8 * 4 * 4, DIGITS_CLASSES),
        torch.nn.Softmax(dim=1),
    ).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.from_numpy(rng.normal(0.0, 0.3, p.shape).astype(np.float32)))
    return torch.jit.trace(net, torch.zeros(1, 1, 8, 8))


def write_digits_torch(dest: Path) -> None:
    import torch

    (dest / "1").mkdir(parents=True)
    torch.jit.save(digits_torch_module(), str(dest / "1" / "model.pt"))
    (dest / "config.pbtxt").write_text(DIGITS_TORCH_CONFIG)
    (dest / "digits_labels.txt").write_text("\n".join(str(i) for i in range(DIGITS_CLASSES)) + "\n")


DIGITS_ONNX_CONFIG = """\
# Logistic regression trained on scikit-learn's digits (load_digits), exported by skl2onnx without
# ZipMap. pixels: the 64 intensities (0 ... 16) of an 8x8 image, row by row.
# Ask for "classification": N on probabilities to get the top N as "score:index:label".
name: "digits_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [ { name: "pixels" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [
  { name: "label" data_type: TYPE_INT64 dims: [ 1 ] reshape { shape: [ ] } },
  { name: "probabilities" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "digits_labels.txt" }
]
dynamic_batching { }
"""
DIGITS_SPLIT_SEED = 0  # train_test_split's and LogisticRegression's random_state


def digits_data() -> tuple[np.ndarray[Any, Any], ...]:
    """scikit-learn's digits as FP32 pixels: ``x_train, x_test, y_train, y_test`` (a stratified 3:1 split)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    parts: list[np.ndarray[Any, Any]] = train_test_split(
        x.astype(np.float32), y, test_size=0.25, random_state=DIGITS_SPLIT_SEED, stratify=y
    )
    return tuple(parts)


def digits_classifier() -> Any:
    """The fitted scikit-learn classifier that digits_onnx exports (the same every time)."""
    from sklearn.linear_model import LogisticRegression

    x_train, _, y_train, _ = digits_data()
    return LogisticRegression(C=0.01, max_iter=2000, random_state=DIGITS_SPLIT_SEED).fit(x_train, y_train)


def digits_onnx_model(clf: Any = None) -> Any:
    """``clf`` (default: digits_classifier()) exported by skl2onnx, probabilities as a plain tensor."""
    import onnx
    import skl2onnx
    from skl2onnx.common.data_types import FloatTensorType

    clf = digits_classifier() if clf is None else clf
    model = skl2onnx.to_onnx(
        clf,
        initial_types=[("pixels", FloatTensorType([None, 64]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    onnx.checker.check_model(model)
    return model


def digits_labels() -> list[str]:
    return [f"digit_{i}" for i in range(DIGITS_CLASSES)]


def write_digits_onnx(dest: Path) -> None:
    import onnx

    (dest / "1").mkdir(parents=True)
    onnx.save(digits_onnx_model(), str(dest / "1" / "model.onnx"))
    (dest / "config.pbtxt").write_text(DIGITS_ONNX_CONFIG)
    (dest / "digits_labels.txt").write_text("\n".join(digits_labels()) + "\n")
