"""Batch arithmetic for native backends (backends/batched.py): grouping, stacking, splitting, reshape both ways."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.backends.batched import (
    group_compatible,
    reshape_shape,
    shape_key,
    split,
    stack,
    unreshape_shape,
)
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor
from inferd.errors import InternalError


def _request(**shapes: tuple[int, ...]) -> InferRequest:
    inputs = {
        name: Tensor.from_array(name, np.zeros(shape, dtype=np.float32)) for name, shape in shapes.items()
    }
    return InferRequest(model_name="m", inputs=inputs, batch_size=next(iter(shapes.values()))[0])


def test_shape_key_leaves_out_the_batch_dimension_when_batching() -> None:
    r = _request(X=(3, 4, 5))
    assert shape_key(r, True) == (("X", (4, 5)),)
    assert shape_key(r, False) == (("X", (3, 4, 5)),)


def test_requests_of_one_shape_form_one_group_whatever_their_batch_sizes() -> None:
    reqs = [_request(X=(1, 4)), _request(X=(3, 4)), _request(X=(2, 4))]
    assert group_compatible(reqs, True) == [[0, 1, 2]]


def test_different_shapes_form_groups_in_order_of_first_appearance() -> None:
    reqs = [_request(X=(1, 4)), _request(X=(1, 5)), _request(X=(2, 4)), _request(X=(1, 5))]
    assert group_compatible(reqs, True) == [[0, 2], [1, 3]]


def test_different_input_sets_do_not_share_a_group() -> None:
    """An optional input left out of one request: its tensors cannot be stacked with the others'."""
    reqs = [_request(X=(1, 4), Y=(1, 2)), _request(X=(1, 4)), _request(Y=(1, 2), X=(1, 4))]
    assert group_compatible(reqs, True) == [[0, 2], [1]]


def test_without_batching_each_request_is_its_own_group() -> None:
    reqs = [_request(X=(4,)), _request(X=(4,))]
    assert group_compatible(reqs, False) == [[0], [1]]
    assert group_compatible(reqs[:1], True) == [[0]]


def test_stack_concatenates_along_the_first_dimension() -> None:
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    b = np.arange(8, dtype=np.float32).reshape(2, 4) + 10
    out = stack([a, b])
    assert out.shape == (3, 4)
    np.testing.assert_array_equal(out[0], a[0])
    np.testing.assert_array_equal(out[1:], b)


def test_stack_of_one_array_is_that_array() -> None:
    a = np.zeros((2, 3), dtype=np.float32)
    assert stack([a]) is a


def test_split_gives_views_per_request() -> None:
    out = np.arange(12, dtype=np.float32).reshape(4, 3)
    parts = split(out, [1, 2, 1], "Y")
    assert [p.shape for p in parts] == [(1, 3), (2, 3), (1, 3)]
    np.testing.assert_array_equal(parts[1], out[1:3])
    assert all(np.shares_memory(p, out) for p in parts)


def test_split_of_one_request_is_the_array() -> None:
    out = np.zeros((2, 3), dtype=np.float32)
    assert split(out, [2])[0] is out


@pytest.mark.parametrize("shape", [(3, 3), (5,), ()])
def test_split_refuses_an_output_without_the_batch(shape: tuple[int, ...]) -> None:
    with pytest.raises(InternalError, match=r"output 'Y' has shape .* the batch held 4 item\(s\)"):
        split(np.zeros(shape, dtype=np.float32), [1, 3], "Y")


def test_reshape_fixed_dims() -> None:
    # densenet: API [3,224,224] <-> framework [1,3,224,224], no batch dimension
    assert reshape_shape((3, 224, 224), (3, 224, 224), (1, 3, 224, 224), False) == (1, 3, 224, 224)
    assert unreshape_shape((1, 1000, 1, 1), (1000,), (1, 1000, 1, 1), False) == (1000,)


def test_reshape_keeps_the_batch_dimension() -> None:
    assert reshape_shape((5, 4), (4,), (2, 2), True) == (5, 2, 2)
    assert unreshape_shape((5, 4), (2, 2), (4,), True) == (5, 2, 2)


def test_reshape_fills_variable_dims_in_order() -> None:
    # dims [-1, 2, -1] -> reshape [-1, -1, 2]: the variable sizes move over in order
    assert reshape_shape((7, 3, 2, 9), (-1, 2, -1), (-1, -1, 2), True) == (7, 3, 9, 2)
    assert unreshape_shape((7, 3, 9, 2), (-1, 2, -1), (-1, -1, 2), True) == (7, 3, 2, 9)


def test_reshape_to_a_scalar_per_batch_item() -> None:
    # auto-complete's dims [1] + reshape {} for a graph tensor of shape [N]
    assert reshape_shape((6, 1), (1,), (), True) == (6,)
    assert unreshape_shape((6,), (1,), (), True) == (6, 1)


def test_reshape_of_a_shape_with_the_wrong_rank_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match=r"shape \[1, 1000, 1\] does not have the 4 dimension"):
        unreshape_shape((1, 1000, 1), (1000,), (1, 1000, 1, 1), False)
