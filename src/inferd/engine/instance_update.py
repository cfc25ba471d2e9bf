"""A model version's instances from its ``instance_group``, and a change of them made in place.

As the reference (``model_lifecycle.cc``, ``backend_model.cc``): a load of a READY version whose
files did not change and whose new config differs from the serving one in nothing but
``instance_group`` and ``version_policy`` (``ConfigChangeRequiresReload``) updates that version
where it serves (``UpdateInstanceGroup``) instead of loading it again:

- each wanted instance reuses a serving one of the same **signature** (its group's settings
  without ``name`` and ``count``, and its device), else a new one is created, named
  ``<group>_<i>`` after its place ``i`` in the group; serving instances left over are removed;
- reuse takes the last serving instance of a signature first (``pop_back``), so the kept ones
  come in reverse order, and new ones after them: 3 instances loaded with 4 create one
  (``<group>_3``), 4 loaded with 2 remove two of them, and 2 loaded with 3 create one named
  ``<group>_2`` (a name one of the kept ones may bear too, as in the reference);
- requests in flight on the kept instances go on (the load does not wait for them); the removed
  ones finish theirs, finalize, and then the load answers;
- new instances are made by the version's own backend model, so a Python model's
  ``args["model_config"]`` is the one it was loaded with (as the reference's backend keeps it), and
  run the config's warmup;
- with ``--rate-limit execution_count``, new instances register with the rate limiter once made, as
  the reference's do: counts that cannot fit them refuse the update (they initialized, and finalize
  then), the version serving on as it was; each warms up holding its resources. Removed ones leave
  the limiter once unloaded. A group whose ``rate_limiter`` changed is another signature: its
  instances are replaced.

Left to a full reload: ensembles and file overrides.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.backends.base import BackendInstance, BackendModel, InstanceSpec, instance_devices
from inferd.engine.model import Member, Model
from inferd.engine.warmup import warm_up
from inferd.scheduling.rate_limiter import Gate, RateLimiter, admit, group_limits

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig
    from inferd.scheduling.base import Resizable

log = logging.getLogger("inferd.repository")

_KIND_NAMES = {0: "CPU", 1: "GPU", 2: "CPU", 3: "MODEL"}  # KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL


def wanted_instances(cfg: ModelConfig) -> list[tuple[InstanceSpec, bytes]]:
    """The instances ``cfg``'s ``instance_group`` asks for, in order, each with its signature: as the
    reference's ``PrepareInstances``, ``<group>_<i>`` for each ``i`` below ``count``, on each device
    of the group (``KIND_GPU``: every GPU it lists, each such instance bearing the same name)."""
    out = []
    for group in cfg.instance_group:
        kind = _KIND_NAMES.get(group.kind, "CPU")
        settings = type(group)()
        settings.CopyFrom(group)
        settings.name, settings.count = "[Normalized]", 1  # as the reference's InstanceConfigSignature
        base = settings.SerializeToString(deterministic=True)
        for i in range(group.count):
            for device in instance_devices(group):
                out.append((InstanceSpec(f"{group.name}_{i}", kind, device), base + b"@%d" % device))
    return out or [(InstanceSpec(f"{cfg.name}_0", "CPU", 0), b"")]


def requires_reload(old: Any, new: Any) -> bool:
    """Whether ``new`` differs from ``old`` in more than ``instance_group`` and ``version_policy``."""
    a, b = type(old)(), type(new)()
    a.CopyFrom(old)
    b.CopyFrom(new)
    for cfg in (a, b):
        cfg.ClearField("instance_group")
        cfg.ClearField("version_policy")
    return bool(a != b)


def plan(
    members: list[Member], wanted: list[tuple[InstanceSpec, bytes]]
) -> tuple[list[Member], list[tuple[InstanceSpec, bytes]], list[Member]]:
    """The reference's ``PrepareInstances``: the members kept (in their new order), the instances to
    create, the members to remove."""
    serving: dict[bytes, list[Member]] = {}
    for m in members:
        serving.setdefault(m.signature, []).append(m)
    kept: list[Member] = []
    fresh: list[tuple[InstanceSpec, bytes]] = []
    for spec, signature in wanted:
        same = serving.get(signature)
        if same:
            kept.append(same.pop())
        else:
            fresh.append((spec, signature))
    return kept, fresh, [m for left in serving.values() for m in left]


def create_instances(
    bmodel: BackendModel,
    specs: list[InstanceSpec],
    cfg: ModelConfig,
    model_dir: Path,
    loop: asyncio.AbstractEventLoop,
    as_process: bool = False,
    limiter: RateLimiter | None = None,
    limits: list[Any] | None = None,
) -> tuple[list[tuple[str, BackendInstance]], Gate | None]:
    """New instances of a loaded version (in this thread), warmed up, and their rate limiter slots
    (``limiter``; ``limits``: each one's group's ``rate_limiter``); none are left on a failure.
    ``as_process``: made as ``execution_mode: auto`` moves them (the others moved)."""
    promotion = bmodel.promotion() if as_process else None
    make = promotion if promotion is not None else bmodel.create_instance
    made: list[tuple[str, BackendInstance]] = []
    gate: Gate | None = None
    try:
        for spec in specs:
            made.append((spec.name, make(spec)))
        gate = admit(
            limiter,
            [(s.name, s.device_id, lim) for s, lim in zip(specs, limits or [None] * len(specs), strict=True)],
        )
        warm_up(cfg, model_dir, made, loop, gate)
    except BaseException:
        for _, inst in made:
            inst.unload()
        if gate is not None:
            gate.close()
        raise
    return made, gate


async def update_instances(
    model: Model,
    cfg: ModelConfig,
    loop: asyncio.AbstractEventLoop,
    timeout_s: float,
    limiter: RateLimiter | None = None,
) -> None:
    """Make ``model``'s instances those of ``cfg`` in place (see the module docstring); the removed
    ones are unloaded when this returns. Raises the creation's error (or the rate limiter's refusal),
    the instances unchanged."""
    scheduler: Resizable = model.scheduler  # type: ignore[assignment]
    bmodel = model.backend_model
    assert bmodel is not None and scheduler is not None
    wanted = wanted_instances(cfg)
    kept, fresh, removed = plan(model.members, wanted)
    created: list[tuple[str, BackendInstance]] = []
    gate: Gate | None = None
    if fresh:
        # each new instance's group's rate_limiter (wanted and group_limits list them in one order)
        limits = {id(spec): lim for (spec, _), lim in zip(wanted, group_limits(cfg), strict=True)}
        created, gate = await asyncio.to_thread(
            create_instances,
            bmodel,
            [spec for spec, _ in fresh],
            cfg,
            model.model_dir,
            loop,
            scheduler.promoted,
            limiter,
            [limits[id(spec)] for spec, _ in fresh],
        )
    indices = scheduler.add_instances(created, gate) if created else []
    model.members = kept + [Member(spec, sig, i) for (spec, sig), i in zip(fresh, indices, strict=True)]
    model.set_config(cfg)
    log.info(
        "'%s' version %d: instances updated in place (%d kept, %d created, %d removed)",
        model.name,
        model.version,
        len(kept),
        len(created),
        len(removed),
    )
    if removed:
        await scheduler.remove_instances([m.index for m in removed], timeout_s)
