"""Backup steps in a bucket (`shared/bucket_steps.py`) on real object stores: versitygw (S3)
and fake-gcs-server (GCS), built from their Go modules and started here on loopback.

What must hold on an object store, where nothing is renamed: a second create of one key is
refused (the fence); a step counts only once its marker is written after its parts; a
half-written step is ignored and cleaned once its generation is gone; a zombie of an older
generation can neither commit nor, racing the new fence, have its commit counted; the last
`keep` steps are kept; two starts never claim one generation."""

from __future__ import annotations

import pytest

from kerasjob_dev import objectstores
from kerasjob_trainer.shared.bucket_steps import MARKER, BucketSteps, Committed, Fenced
from kerasjob_trainer.shared.objectstore import Location, ObjectStore, open_store

pytestmark = [pytest.mark.slow]


@pytest.fixture(params=["s3", "gs"])
def store(
    request: pytest.FixtureRequest, stores: objectstores.Stores
) -> tuple[ObjectStore, Location]:
    scheme = request.param
    name = request.node.name.replace("[", "-").rstrip("]")
    location = Location.parse(f"{scheme}://{stores.bucket}/ns/{name}")
    if scheme == "s3":
        made = open_store(location, endpoint=stores.s3_endpoint, path_style=True, env=stores.env)
    else:
        made = open_store(location, endpoint=stores.gcs_endpoint)
    return made, location


def test_a_second_create_of_a_key_is_refused(store: tuple[ObjectStore, Location]) -> None:
    s, at = store
    key = at.key("fences", "x")
    assert s.put(key, b"one", create_only=True)
    assert not s.put(key, b"two", create_only=True)
    assert s.get(key) == b"one"
    s.put(key, b"three")  # an ordinary write overwrites
    assert s.get(key) == b"three"
    assert s.list(at.key("fences") + "/") == [key]
    s.delete(key)
    s.delete(key)  # gone already: fine
    assert s.get(key) is None and s.list(at.key("fences") + "/") == []


def _step(steps: BucketSteps, step: int, generation: int, parts: int = 2) -> None:
    names = [f"process_{i}" for i in range(parts)]
    for name in names:
        steps.write_part(step, generation, name, f"{step}:{generation}:{name}".encode())
    steps.commit(step, generation, names)


def test_a_half_written_step_is_ignored_and_cleaned_once_its_generation_is_gone(
    store: tuple[ObjectStore, Location],
) -> None:
    steps = BucketSteps(*store)
    steps.fence(1, 0)
    _step(steps, 10, 1)
    steps.write_part(20, 1, "process_0", b"half")  # process_1's part and the marker never came
    assert steps.latest() == Committed(10, 1, ("process_0", "process_1"))
    with pytest.raises(Fenced, match="lacks parts"):
        steps.commit(20, 1, ["process_0", "process_1"])
    assert steps.clean(current_generation=1) == []  # generation 1 may still be writing it
    steps.fence(2, 10)
    assert steps.clean(current_generation=2) == [(20, 1)]
    assert steps.latest() == Committed(10, 1, ("process_0", "process_1"))
    assert steps.read_part(steps.latest(), "process_1") == b"10:1:process_1"  # type: ignore[arg-type]


def test_a_zombie_of_an_older_generation_is_fenced(store: tuple[ObjectStore, Location]) -> None:
    s, at = store
    steps = BucketSteps(s, at, keep=5)
    steps.fence(1, 0)
    _step(steps, 10, 1)
    steps.fence(2, 10)  # the group moved on: generation 2 restored step 10
    _step(steps, 20, 2)
    with pytest.raises(Fenced, match="fenced off by generation 2"):
        _step(steps, 30, 1)  # generation 1's zombie goes on writing
    # A zombie whose commit raced the new fence (checked before it, written after): void.
    zombie = BucketSteps(s, at)
    zombie.write_part(15, 1, "process_0", b"zombie")
    s.put(zombie.part_key(15, 1, MARKER), b'{"step": 15, "generation": 1, "parts": ["process_0"]}')
    assert [(c.step, c.generation) for c in steps.committed()] == [(10, 1), (20, 2)]
    assert steps.latest() == Committed(20, 2, ("process_0", "process_1"))
    # Both of the zombie's steps go: the uncommitted one and the void one.
    assert steps.clean(current_generation=2) == [(15, 1), (30, 1)]
    assert not s.list(at.key("steps", f"{15:012d}") + "/")


def test_two_starts_never_claim_one_generation(store: tuple[ObjectStore, Location]) -> None:
    steps = BucketSteps(*store)
    assert steps.next_generation() == 1
    steps.fence(1, 0)
    with pytest.raises(Fenced, match="already claimed"):
        steps.fence(1, 0)
    assert steps.next_generation() == 2 and steps.fences() == {1: 0}


def test_the_last_keep_steps_are_kept(store: tuple[ObjectStore, Location]) -> None:
    steps = BucketSteps(*store, keep=2)
    steps.fence(1, 0)
    for step in (10, 20, 30, 40):
        _step(steps, step, 1)
    assert steps.clean(current_generation=1) == [(10, 1), (20, 1)]
    assert [c.step for c in steps.committed()] == [30, 40]
    with pytest.raises(Fenced, match="committed already"):
        steps.commit(40, 1, ["process_0", "process_1"])


def test_a_location_is_a_bucket_url() -> None:
    at = Location.parse("s3://bucket/a/b/")
    assert (at.scheme, at.bucket, at.prefix, str(at)) == ("s3", "bucket", "a/b", "s3://bucket/a/b")
    assert at.key("steps", "1") == "a/b/steps/1"
    assert Location.parse("gs://b").key("x") == "x"
    for bad in ("bucket/a", "file:///x", "s3://", "azure://c/d"):
        with pytest.raises(ValueError, match="s3://BUCKET"):
            Location.parse(bad)
