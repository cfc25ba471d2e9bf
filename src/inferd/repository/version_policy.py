"""Which version directories a ``version_policy`` selects (Triton ``VersionsToLoad``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from inferd.errors import InvalidArgumentError
from inferd.repository._proto import pb2

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelVersionPolicy
else:
    ModelVersionPolicy = pb2.ModelVersionPolicy

__all__ = ["ModelVersionPolicy", "no_version_message", "select_versions"]


def no_version_message(model_name: str) -> str:
    """Triton's load error when a policy selects nothing."""
    return f"at least one version must be available under the version policy of model '{model_name}'"


def select_versions(
    policy: ModelVersionPolicy, available: Iterable[int], *, model_name: str | None = None
) -> list[int]:
    """The versions ``policy`` selects among ``available`` (those on disk), ascending.

    ``latest {num_versions: N}``: the N highest; ``all``: every one; ``specific {versions}``: the
    listed ones that are on disk (others are skipped; Triton logs them).  An unset policy acts as
    ``all``, as Triton's does (normalisation sets ``latest 1`` first).  When the selection is empty
    and ``model_name`` is given, raise InvalidArgumentError with Triton's message; otherwise the
    empty list is returned.
    """
    on_disk = sorted(set(available))
    choice = policy.WhichOneof("policy_choice")
    if choice == "latest":
        count = max(policy.latest.num_versions, 0)
        selected = on_disk[len(on_disk) - count :] if count else []
    elif choice == "specific":
        present = set(on_disk)
        selected = sorted({int(v) for v in policy.specific.versions if int(v) in present})
    else:
        selected = on_disk
    if not selected and model_name is not None:
        raise InvalidArgumentError(no_version_message(model_name))
    return selected
