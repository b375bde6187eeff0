"""merge.deep_merge: the strategic-merge-like rules user templates are applied with."""

from __future__ import annotations

from kerasjob.manifests.merge import deep_merge, merge_list


def test_maps_merge_recursively_and_scalars_replace() -> None:
    base = {"a": {"b": 1, "c": 2}, "d": "x"}
    assert deep_merge(base, {"a": {"c": 3, "e": 4}, "d": "y"}) == {
        "a": {"b": 1, "c": 3, "e": 4},
        "d": "y",
    }


def test_none_deletes_a_key() -> None:
    assert deep_merge({"a": 1, "b": {"c": 2, "d": 3}}, {"a": None, "b": {"d": None}}) == {
        "b": {"c": 2}
    }


def test_none_in_new_subtrees_is_dropped() -> None:
    assert deep_merge({}, {"a": {"b": None, "c": [{"d": None, "e": 1}]}}) == {
        "a": {"c": [{"e": 1}]}
    }


def test_inputs_are_not_modified() -> None:
    base = {"spec": {"containers": [{"name": "t", "env": [{"name": "A", "value": "1"}]}]}}
    over = {"spec": {"containers": [{"name": "t", "env": [{"name": "A", "value": "2"}]}]}}
    snapshot = repr((base, over))
    merged = deep_merge(base, over)
    merged["spec"]["containers"][0]["env"][0]["value"] = "3"
    assert repr((base, over)) == snapshot


def test_containers_merge_by_name_and_keep_order() -> None:
    base = {"containers": [{"name": "trainer", "image": "a", "command": ["x"]}]}
    over = {"containers": [{"name": "sidecar", "image": "s"}, {"name": "trainer", "image": "b"}]}
    assert deep_merge(base, over)["containers"] == [
        {"name": "trainer", "image": "b", "command": ["x"]},
        {"name": "sidecar", "image": "s"},
    ]


def test_env_merges_by_name() -> None:
    base = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    over = {"env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}
    assert deep_merge(base, over)["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]


def test_volumes_by_name_mounts_by_mount_path_ports_by_container_port() -> None:
    base = {
        "volumes": [{"name": "v", "emptyDir": {}}],
        "volumeMounts": [{"name": "v", "mountPath": "/a"}],
        "ports": [{"name": "tf", "containerPort": 2222}],
    }
    over = {
        "volumes": [{"name": "data", "hostPath": {"path": "/d"}}],
        # the same volume mounted twice is legitimate: mountPath is the key
        "volumeMounts": [{"name": "v", "mountPath": "/b", "subPath": "x"}],
        "ports": [{"containerPort": 2222, "hostPort": 2222}, {"containerPort": 6006}],
    }
    merged = deep_merge(base, over)
    assert [v["name"] for v in merged["volumes"]] == ["v", "data"]
    assert merged["volumeMounts"] == [
        {"name": "v", "mountPath": "/a"},
        {"name": "v", "mountPath": "/b", "subPath": "x"},
    ]
    assert merged["ports"] == [
        {"name": "tf", "containerPort": 2222, "hostPort": 2222},
        {"containerPort": 6006},
    ]


def test_other_lists_are_replaced() -> None:
    base = {"command": ["python", "-m", "x"], "tolerations": [{"key": "a"}], "args": ["1"]}
    over = {"command": ["bash"], "tolerations": [{"key": "b"}]}
    assert deep_merge(base, over) == {
        "command": ["bash"],
        "tolerations": [{"key": "b"}],
        "args": ["1"],
    }


def test_type_change_replaces() -> None:
    assert deep_merge({"a": {"b": 1}}, {"a": "flat"}) == {"a": "flat"}
    assert deep_merge({"a": [1]}, {"a": {"b": 1}}) == {"a": {"b": 1}}


def test_merge_list_appends_items_without_key() -> None:
    assert merge_list([{"name": "a"}], [{"value": 1}, "x"], "name") == [
        {"name": "a"},
        {"value": 1},
        "x",
    ]


def test_merge_list_duplicate_new_keys_merge_together() -> None:
    assert merge_list([], [{"name": "a", "x": 1}, {"name": "a", "y": 2}], "name") == [
        {"name": "a", "x": 1, "y": 2}
    ]
