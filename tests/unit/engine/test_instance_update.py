"""What an instance_group update keeps, creates and removes (the reference's ``PrepareInstances``),
which config changes it covers (``ConfigChangeRequiresReload``) and which files count as a
version's (``IsModelVersionModified``)."""

from __future__ import annotations

from typing import Any

from inferd.engine.instance_update import plan, requires_reload, wanted_instances
from inferd.engine.model import Member
from inferd.repository.config.parse import parse_config_text
from inferd.repository.scan import version_files


def _config(groups: str, extra: str = "") -> Any:
    cfg = parse_config_text(f'name: "m"\nbackend: "python"\n{extra}\ninstance_group [ {groups} ]\n', "test")
    for i, g in enumerate(cfg.instance_group):
        g.name = g.name or f"m_{i}"
    return cfg


def _members(cfg: Any) -> list[Member]:
    return [Member(spec, sig, i) for i, (spec, sig) in enumerate(wanted_instances(cfg))]


def _names(members: list[Member]) -> list[str]:
    return [m.spec.name for m in members]


def test_three_loaded_with_four_creates_one_and_keeps_the_others_in_reverse() -> None:
    members = _members(_config("{ count: 3 kind: KIND_CPU }"))
    kept, fresh, removed = plan(members, wanted_instances(_config("{ count: 4 kind: KIND_CPU }")))
    assert _names(kept) == ["m_0_2", "m_0_1", "m_0_0"]  # the last of a signature first, as pop_back
    assert [spec.name for spec, _ in fresh] == ["m_0_3"] and removed == []


def test_fewer_removes_the_first_and_more_again_names_by_place() -> None:
    members = _members(_config("{ count: 4 kind: KIND_CPU }"))
    kept, fresh, removed = plan(members, wanted_instances(_config("{ count: 2 kind: KIND_CPU }")))
    assert _names(kept) == ["m_0_3", "m_0_2"] and fresh == [] and _names(removed) == ["m_0_0", "m_0_1"]
    kept, fresh, removed = plan(kept, wanted_instances(_config("{ count: 3 kind: KIND_CPU }")))
    assert [spec.name for spec, _ in fresh] == ["m_0_2"]  # the name a kept one bears too, as the reference


def test_the_same_config_keeps_everything() -> None:
    cfg = _config("{ count: 2 kind: KIND_CPU }")
    kept, fresh, removed = plan(_members(cfg), wanted_instances(cfg))
    assert len(kept) == 2 and fresh == [] and removed == []


def test_a_changed_group_setting_is_another_signature() -> None:
    old = _config("{ count: 2 kind: KIND_CPU }")
    new = _config('{ count: 2 kind: KIND_CPU host_policy: "p" }')
    kept, fresh, removed = plan(_members(old), wanted_instances(new))
    assert kept == [] and len(fresh) == 2 and len(removed) == 2
    renamed = _config('{ name: "other" count: 2 kind: KIND_CPU }')  # the name is not part of it
    kept, fresh, _ = plan(_members(old), wanted_instances(renamed))
    assert len(kept) == 2 and fresh == []


def test_only_instance_group_and_version_policy_changes_are_updates() -> None:
    old = _config("{ count: 1 kind: KIND_CPU }")
    assert not requires_reload(old, _config("{ count: 5 kind: KIND_CPU }"))
    assert not requires_reload(old, _config("{ count: 1 kind: KIND_CPU }", "version_policy { all {} }"))
    assert requires_reload(old, _config("{ count: 1 kind: KIND_CPU }", "max_batch_size: 8"))
    marker = 'parameters { key: "x" value: { string_value: "1" } }'
    assert requires_reload(old, _config("{ count: 1 kind: KIND_CPU }", marker))


def test_a_versions_files_leave_out_the_config_and_the_other_versions() -> None:
    mark = (
        ("1/", -1, -1),
        ("1/model.py", 5, 10),
        ("2/", -1, -1),
        ("2/model.py", 6, 10),
        ("config.pbtxt", 7, 10),
        ("configs/", -1, -1),
        ("configs/a.pbtxt", 8, 10),
        ("labels.txt", 9, 10),
    )
    assert version_files(mark, 1) == (("1/", -1, -1), ("1/model.py", 5, 10), ("labels.txt", 9, 10))
    assert version_files(mark, 2)[1] == ("2/model.py", 6, 10)


def test_a_gpu_group_makes_count_instances_on_each_of_its_gpus_named_as_the_reference() -> None:
    cfg = _config("{ count: 2 kind: KIND_GPU gpus: [ 0, 1 ] }, { count: 1 kind: KIND_CPU }")
    wanted = [(spec.name, spec.kind, spec.device_id) for spec, _ in wanted_instances(cfg)]
    # PrepareInstances: for each c below count, an instance <group>_<c> on each GPU
    assert wanted == [
        ("m_0_0", "GPU", 0),
        ("m_0_0", "GPU", 1),
        ("m_0_1", "GPU", 0),
        ("m_0_1", "GPU", 1),
        ("m_1_0", "CPU", 0),
    ]


def test_moving_a_gpu_group_to_another_gpu_replaces_its_instances() -> None:
    old = _config("{ count: 1 kind: KIND_GPU gpus: [ 0, 1 ] }")
    new = _config("{ count: 1 kind: KIND_GPU gpus: [ 1 ] }")
    kept, fresh, removed = plan(_members(old), wanted_instances(new))
    # the signature is the group's settings (its gpus among them) and the device, as the reference's
    assert kept == [] and [(s.name, s.device_id) for s, _ in fresh] == [("m_0_0", 1)]
    assert [(m.spec.name, m.spec.device_id) for m in removed] == [("m_0_0", 0), ("m_0_0", 1)]
