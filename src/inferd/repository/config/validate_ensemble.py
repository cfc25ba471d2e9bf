"""An ensemble's steps checked (``ValidateEnsembleSchedulingConfig``): structure, then data flow
from the ensemble's inputs to its outputs."""

from __future__ import annotations

from inferd.errors import InvalidArgumentError
from inferd.repository.config.schema import ENSEMBLE_PLATFORM, ModelConfig


class _EnsembleTensor:
    __slots__ = ("is_output", "name", "next_nodes", "prev_nodes", "ready")

    def __init__(self, name: str, is_output: bool) -> None:
        self.name = name
        self.is_output = is_output
        self.ready = False
        self.prev_nodes: list[_EnsembleTensor] = []
        self.next_nodes: list[_EnsembleTensor] = []


def validate_ensemble(cfg: ModelConfig) -> None:
    """``ValidateEnsembleSchedulingConfig``: structure and data flow of the steps."""
    name = cfg.name
    if cfg.platform != ENSEMBLE_PLATFORM:
        raise InvalidArgumentError(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not {ENSEMBLE_PLATFORM}"
        )
    if len(cfg.instance_group) != 0:
        raise InvalidArgumentError(f"instance group should not be specified for ensemble '{name}'")
    if cfg.HasField("optimization"):
        raise InvalidArgumentError(f"optimization should not be specified for ensemble '{name}'")
    if len(cfg.model_warmup) != 0:
        raise InvalidArgumentError(f"model_warmup can not be specified for ensemble '{name}'")
    steps = cfg.ensemble_scheduling.step
    if len(steps) == 0:
        raise InvalidArgumentError(f"must specify 'step' for ensemble '{name}'")

    tensors: dict[str, _EnsembleTensor] = {}
    for index, step in enumerate(steps):
        if not step.model_name:
            raise InvalidArgumentError(f"must specify 'model_name' in step {index} of ensemble '{name}'")
        if len(step.input_map) == 0:
            raise InvalidArgumentError(f"must specify 'input_map' in step {index} of ensemble '{name}'")
        if len(step.output_map) == 0:
            raise InvalidArgumentError(f"must specify 'output_map' in step {index} of ensemble '{name}'")
        produced: list[_EnsembleTensor] = []
        for tensor_name in step.output_map.values():
            node = tensors.get(tensor_name)
            if node is None:
                node = tensors[tensor_name] = _EnsembleTensor(tensor_name, True)
            elif node.is_output:
                raise InvalidArgumentError(
                    f"ensemble tensor '{tensor_name}' can appear in an output map only once for "
                    f"ensemble '{name}' step {index}"
                )
            else:
                node.is_output = True
            produced.append(node)
        for tensor_name in step.input_map.values():
            node = tensors.get(tensor_name)
            if node is None:
                node = tensors[tensor_name] = _EnsembleTensor(tensor_name, False)
            for out in produced:
                out.prev_nodes.append(node)
                node.next_nodes.append(out)

    queue: list[_EnsembleTensor] = []
    for model_input in cfg.input:
        node = tensors.get(model_input.name)
        if node is None:
            # (sic) Triton's message has an unbalanced quote
            raise InvalidArgumentError(
                f"ensemble input '{model_input.name}' for ensemble {name}' is not used"
            )
        node.ready = True
        queue.append(node)
    while queue:
        ready_node = queue.pop(0)
        for next_node in ready_node.next_nodes:
            if next_node.ready:
                continue
            next_node.ready = all(prev.ready for prev in next_node.prev_nodes)
            if next_node.ready:
                queue.append(next_node)

    outputs: set[str] = set()
    for model_output in cfg.output:
        node = tensors.get(model_output.name)
        if node is None:
            raise InvalidArgumentError(
                f"ensemble output '{model_output.name}' for ensemble {name}' is not used"
            )
        if not node.ready:
            message = f"output '{model_output.name}' for ensemble '{name}' is not written"
            last = node
            seen: set[str] = set()
            prevs: list[_EnsembleTensor] | None = node.prev_nodes
            while prevs:
                current, prevs = prevs, None
                for candidate in current:
                    if not candidate.ready and candidate.name not in seen:
                        seen.add(candidate.name)
                        last = candidate
                        prevs = candidate.prev_nodes
                        break
            if last.name != node.name:
                message += f": at least one of its depending tensors, '{last.name}', is not connected"
            raise InvalidArgumentError(message)
        outputs.add(model_output.name)
    for tensor_name, node in tensors.items():
        if tensor_name in outputs:
            continue
        if not node.ready or not node.next_nodes:
            raise InvalidArgumentError(f"ensemble tensor '{tensor_name}' is unused in ensemble '{name}'")
