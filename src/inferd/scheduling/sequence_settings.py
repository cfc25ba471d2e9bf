"""A ``sequence_batching`` model's settings, read once at load: the batcher's, its pools' and its
wrapped instances' (scheduling/sequence.py, sequence_instance.py).

``direct`` gives each instance ``max_batch_size`` slots and fillers in the empty ones; its
``max_queue_delay_microseconds`` with ``minimum_slot_utilization`` holds a batch until that share
of the slots is ready. ``oldest`` gives ``max_candidate_sequences`` slots per instance and the
dynamic batcher's policy over the sequences' next requests (``preferred_batch_size``,
``max_queue_delay_microseconds``), no fillers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from inferd.core.request import RequestedOutput
from inferd.core.tensor import Tensor
from inferd.scheduling.queue import BatchPolicy
from inferd.scheduling.sequence_state import SequenceControls, StateSpec, state_specs


class SequenceSettings:
    """What the model's config says of its sequences (raises ``InferdError`` where the reference's
    load checks fail)."""

    __slots__ = (
        "all_output_names",
        "all_outputs",
        "controls",
        "fillers",
        "idle_ns",
        "iterative",
        "oldest",
        "policy",
        "slot_count",
        "state_output_names",
        "state_outputs",
        "state_specs",
    )

    def __init__(self, config: Any, model_dir: Path | None) -> None:
        """``model_dir``: where ``initial_state/`` files are."""
        self.controls = SequenceControls(config)
        self.state_specs: list[StateSpec] = state_specs(config, model_dir)
        sb = config.sequence_batching
        mbs = int(config.max_batch_size)
        self.oldest = sb.HasField("oldest")
        slot_count = max(1, mbs)
        if self.oldest:
            slot_count = int(sb.oldest.max_candidate_sequences) or slot_count
            self.policy = BatchPolicy(
                max_batch_size=mbs,
                max_queue_delay_ns=int(sb.oldest.max_queue_delay_microseconds) * 1000 if mbs > 0 else 0,
                preferred_batch_size=tuple(int(x) for x in sb.oldest.preferred_batch_size),
            )
        else:
            utilization = float(sb.direct.minimum_slot_utilization)
            delay_ns = int(sb.direct.max_queue_delay_microseconds) * 1000
            wait = mbs > 1 and delay_ns > 0 and utilization > 0
            self.policy = BatchPolicy(
                max_batch_size=mbs,
                max_queue_delay_ns=delay_ns if wait else 0,
                hold_for=max(1, math.ceil(utilization * mbs)) if wait else 0,
            )
        #: batch slots per instance
        self.slot_count = slot_count
        decoupled = bool(config.model_transaction_policy.decoupled)
        #: direct: fillers keep every request at its slot's position (a decoupled model's fillers
        #: would have nobody to send to: it gets none)
        self.fillers = not self.oldest and mbs > 0 and not decoupled
        self.idle_ns = int(sb.max_sequence_idle_microseconds) * 1000
        # what the wrapped instances ask the backend for besides the client's outputs: the states
        self.state_outputs = [RequestedOutput(s.output_name) for s in self.state_specs]
        self.state_output_names = frozenset(s.output_name for s in self.state_specs)
        self.all_outputs = [RequestedOutput(o.name) for o in config.output] + self.state_outputs
        self.all_output_names = frozenset(o.name for o in self.all_outputs)
        #: iterative_sequence: requests without an ID start a sequence of their own (sequence.py)
        self.iterative = bool(sb.iterative_sequence)

    def controls_for_filler(self) -> dict[str, Tensor]:
        """The control tensors of a ``direct`` filler request (for the wrapped instances)."""
        return self.controls.for_filler()
