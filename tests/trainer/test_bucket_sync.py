"""A backup directory kept in a bucket (`shared/bucket_sync.py`) on the real servers
(versitygw for S3, fake-gcs-server for GCS): the start's check (exit 78's one line), the
chief's claim and every process's pull of the step it names, pushes in the background and
at once, a half-written step never pulled, a zombie's push refused, a store down skipped."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kerasjob_contract import Env
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_dev import objectstores
from kerasjob_dev.trainer_procs import free_ports
from kerasjob_trainer.shared import bucket_sync
from kerasjob_trainer.shared.bucket_steps import Committed
from kerasjob_trainer.shared.bucket_sync import BucketConfig, BucketSync

pytestmark = [pytest.mark.slow]


def _env(stores: objectstores.Stores, scheme: str, prefix: str) -> dict[str, str]:
    endpoint = stores.s3_endpoint if scheme == "s3" else stores.gcs_endpoint
    return {
        **{k: v for k, v in stores.env.items() if k.startswith("AWS_")},
        Env.CHECKPOINT_LOCATION.value: f"{scheme}://{stores.bucket}/jobs/{prefix}",
        Env.CHECKPOINT_ENDPOINT.value: endpoint,
        Env.CHECKPOINT_PATH_STYLE.value: "true",
    }


def _sync(env: dict[str, str], backup_dir: Path) -> BucketSync:
    made = BucketSync.from_env(env, str(backup_dir))
    assert made is not None
    return made


def _backup(sync: BucketSync, step: int) -> None:
    """What BackupAndRestore leaves in <backup>/chief after a save at `step`."""
    chief = Path(sync.chief_dir)
    for old in chief.glob("ckpt-*"):
        old.unlink()
    chief.mkdir(parents=True, exist_ok=True)
    (chief / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n')
    (chief / f"ckpt-{step}.index").write_bytes(f"index {step}".encode())
    (chief / f"ckpt-{step}.data-00000-of-00001").write_bytes(bytes([step % 256]) * 1000)


def _files(sync: BucketSync) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(sync.chief_dir).iterdir())}


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_claim_pull_push_and_keep(scheme: str, stores: objectstores.Stores, tmp_path: Path) -> None:
    env = _env(stores, scheme, f"round-trip-{scheme}")
    bucket_sync.check(BucketConfig.from_env(env), env)  # type: ignore[arg-type]
    chief = _sync(env, tmp_path / "chief" / "backup")
    assert chief.claim() is None and chief.generation == 1
    (Path(chief.chief_dir)).mkdir(parents=True)
    (Path(chief.chief_dir) / "stale").write_text("from an older container")
    assert chief.pull(None) == 0 and _files(chief) == {}  # a fresh start: emptied

    for step in (10, 20):  # a periodic backup, pushed in the background
        _backup(chief, step)
        chief.push_later(step)
        assert chief.wait(30)
    _backup(chief, 30)
    assert chief.push_now(30)  # the agreed SIGTERM save
    want = _files(chief)
    assert [c.step for c in chief.steps.committed()] == [20, 30]  # the last K=2 kept

    # The next incarnation: the chief claims generation 2, naming step 30; a worker with an
    # empty directory of its own pulls exactly that step's files.
    chief2 = _sync(env, tmp_path / "chief2" / "backup")
    assert chief2.claim() == Committed(30, 1, tuple(sorted(want)))
    worker = _sync(env, tmp_path / "worker" / "backup")
    chosen = worker.chosen()
    assert chosen is not None and chosen.step == 30
    assert worker.pull(chosen) == sum(len(v) for v in want.values())
    assert _files(worker) == want
    assert not list((tmp_path / "chief").glob(".bucket-staging/*"))  # staging removed


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_half_written_step_is_never_pulled_and_a_zombie_cannot_commit(
    scheme: str, stores: objectstores.Stores, tmp_path: Path
) -> None:
    env = _env(stores, scheme, f"zombie-{scheme}")
    old = _sync(env, tmp_path / "old" / "backup")
    old.claim()
    _backup(old, 10)
    assert old.push_now(10)
    # The old chief dies while pushing step 20: a part is there, the marker never came.
    old.steps.write_part(20, 1, "ckpt-20.index", b"half")

    new = _sync(env, tmp_path / "new" / "backup")
    restored = new.claim()
    assert restored is not None and restored.step == 10 and new.generation == 2
    # The old chief lives on (a zombie) and pushes step 30: refused, nothing restorable
    # changes, the group's next backup commits.
    _backup(old, 30)
    assert not old.push_now(30)
    _backup(new, 20)
    assert new.push_now(20)
    worker = _sync(env, tmp_path / "worker" / "backup")
    latest = new.steps.latest()
    assert latest is not None and (latest.step, latest.generation) == (20, 2)
    assert (20, 1) not in {(c.step, c.generation) for c in new.steps.committed()}
    chosen = worker.chosen()  # the step the newest fence (generation 2's claim) names
    assert chosen is not None and (chosen.step, chosen.generation) == (10, 1)


def test_two_saves_of_one_step_commit_one_coherent_set_of_files(
    stores: objectstores.Stores, tmp_path: Path
) -> None:
    """A periodic backup and the SIGTERM save at the same step (files ckpt-1.* and ckpt-2.*,
    `checkpoint` naming the newer): the step's parts are those of one of them."""
    env = _env(stores, "s3", "same-step")
    sync = _sync(env, tmp_path / "backup")
    sync.claim()
    chief = Path(sync.chief_dir)
    for save in (1, 2):
        chief.mkdir(parents=True, exist_ok=True)
        for old in chief.iterdir():
            old.unlink()
        (chief / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{save}"\n')
        (chief / f"ckpt-{save}.index").write_bytes(b"index")
        if save == 1:
            sync.push_later(20)
        else:
            assert sync.push_now(20)  # waits for the one in flight; the step is there
    assert sync.wait(30)
    (committed,) = sync.steps.committed()
    pointed = sync.steps.read_part(committed, "checkpoint").decode().split('"')[1]
    assert set(committed.parts) == {"checkpoint", f"{pointed}.index"}, committed


def test_a_push_to_a_store_that_is_down_is_skipped_in_one_line(
    stores: objectstores.Stores, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = _env(stores, "s3", "down")
    sync = _sync(env, tmp_path / "backup")
    sync.claim()
    (dead,) = free_ports(1)
    config = BucketConfig.from_env(
        {**env, Env.CHECKPOINT_ENDPOINT.value: f"http://127.0.0.1:{dead}"}
    )
    assert config is not None
    down = BucketSync(config, sync.backup_dir, config.open(1.0, env))
    down.generation = sync.generation
    _backup(down, 10)
    began = time.monotonic()
    down.push_later(10)
    assert down.wait(30)
    assert not down.push_now(10)
    took = time.monotonic() - began
    lines = [line for line in capsys.readouterr().out.splitlines() if "not committed" in line]
    print(lines[0], f"({took:.1f}s for both)")
    assert len(lines) == 2 and lines[0].startswith("kerasjob: backup of step 10")
    assert "cannot be reached" in lines[0]
    assert sync.steps.latest() is None


@pytest.mark.parametrize("scheme", ["s3", "gs"])
@pytest.mark.parametrize("fault", ["unreachable", "no bucket", "bad key"])
def test_the_start_check_names_the_store_and_the_cause(
    scheme: str, fault: str, stores: objectstores.Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    if scheme == "gs" and fault == "bad key":
        pytest.skip("fake-gcs-server checks no credentials")
    monkeypatch.setattr(bucket_sync, "CHECK_PATIENCE_S", 1.0)
    env = _env(stores, scheme, "check")
    if fault == "unreachable":
        env[Env.CHECKPOINT_ENDPOINT.value] = f"http://127.0.0.1:{free_ports(1)[0]}"
    elif fault == "no bucket":
        env[Env.CHECKPOINT_LOCATION.value] = f"{scheme}://no-such-bucket/jobs"
    else:
        env["AWS_SECRET_ACCESS_KEY"] = "wrong"
    config = BucketConfig.from_env(env)
    assert config is not None
    began = time.monotonic()
    with pytest.raises(ConfigError) as raised:
        bucket_sync.check(config, env)
    reason = str(raised.value)
    print(f"{scheme} {fault}: {time.monotonic() - began:.1f}s: {reason}")
    assert "\n" not in reason and reason.startswith(f"checkpoint location {scheme}://")
    assert {
        "unreachable": "cannot be reached",
        "no bucket": "does not exist",
        "bad key": "credentials",
    }[fault] in reason
    assert time.monotonic() - began < 20


def test_a_bad_location_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="KERASJOB_CHECKPOINT_LOCATION"):
        BucketConfig.from_env({Env.CHECKPOINT_LOCATION.value: "file:///tmp/x"})
    assert BucketConfig.from_env({}) is None


def test_a_fence_that_names_only_a_step_is_followed_too(
    stores: objectstores.Stores, tmp_path: Path
) -> None:
    """A fence written without the restoring generation (`BucketSteps.fence(g, step)`):
    the others pull the newest committed copy of that step, never a fresh start."""
    env = _env(stores, "s3", "step-only-fence")
    chief = _sync(env, tmp_path / "chief" / "backup")
    chief.claim()
    _backup(chief, 10)
    assert chief.push_now(10)
    chief.steps.fence(2, 10)
    worker = _sync(env, tmp_path / "worker" / "backup")
    chosen = worker.chosen()
    assert chosen is not None and (chosen.step, chosen.generation) == (10, 1)
