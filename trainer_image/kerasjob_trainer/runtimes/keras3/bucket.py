"""Keras 3 backups in a bucket (KERASJOB_CHECKPOINT_LOCATION=gs://...): Orbax writes every
process's shards straight to the job's own location; no shared volume at all.

Layout under the location (`<location>/`):

    fences/<generation>.json              `bucket_steps`' fences: one per incarnation,
                                          created (create-only) by its process 0, naming
                                          the step it restores and that step's generation
    backup/orbax/g<generation>/<step>/    one Orbax CheckpointManager per incarnation; a
                                          step is whole once Orbax wrote its
                                          commit_success.txt (after every process's part)
    coordinator.json                      process 0's address (`rendezvous.ObjectBoard`)

- **Commit.** On `gs://` Orbax does not rename: it writes each process's `ocdbt.process_N/`
  and, once all are done, `commit_success.txt` in the step. A step without it is never
  restored (a half-written step is ignored) and is removed at the next start.
- **Generations and zombies** (the lightest correct way we found): each incarnation writes
  into a directory of its own generation, claimed with a create-only fence before anything
  is written, so a process of an older incarnation that lives on (a partitioned Pod, a slow
  exit) can never overwrite a newer incarnation's files. A commit it still makes is void:
  step s of generation g counts only if every newer generation restored at s or later
  (`bucket_steps`' rule: a newer one that restored below s never saw that step and trains
  past it itself). No check sits before Orbax's own finalize (it has no hook for one); the
  rule is applied where it matters, when a restart chooses what to restore, and `clean`
  removes void steps.
- **What is restored** is chosen once, by process 0 when it claims the generation (the
  newest step that counts), and named in the fence; every process restores that one.
- **Kept:** Orbax keeps the last KEEP steps of its own generation; a start removes older
  generations' steps but the newest KEEP that count.
- **s3://** is refused (exit 78): Orbax 0.12.8 cannot write it (orbax #2739), and below it
  TensorStore's s3 kvstore would need a path layer of ours for every file Orbax writes
  through etils (metadata, commit files): not done.
- **gs:// needs gcsfs**: Orbax reaches gs:// files through etils' epath, which uses
  fsspec's gcsfs where TensorFlow is absent (the Keras 3 image); TensorFlow's own GCS
  client, which epath would prefer, knows no emulator, so epath is told not to use it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Mapping, MutableMapping
from typing import Any

from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.shared import bucket_sync, rendezvous
from kerasjob_trainer.shared.bucket_steps import BucketSteps, Committed, Fenced
from kerasjob_trainer.shared.bucket_sync import BucketConfig
from kerasjob_trainer.shared.faults import say
from kerasjob_trainer.shared.objectstore import ObjectStore

ORBAX_PREFIX = "backup/orbax"
COMMIT_FILE = "commit_success.txt"
KEEP = 2
CLAIM_TRIES = 5
#: How long a rendezvous read or touch keeps retrying (the group forms in about a second).
RENDEZVOUS_PATIENCE_S = 3.0
#: The key in JAX's coordination service under which process 0 tells the generation.
GENERATION_KEY = "kerasjob/bucket-generation"
GENERATION_WAIT_MS = 120_000
S3_REFUSAL = "Keras 3 backups need gs:// or a volume: Orbax cannot write s3:// (orbax #2739)"


def config_from(env: Mapping[str, str]) -> BucketConfig | None:
    """The job's bucket (None: a volume job); ConfigError when the location is malformed."""
    return BucketConfig.from_env(env)


def check_start(config: BucketConfig, env: Mapping[str, str] | None = None) -> None:
    """Before anything trains: ConfigError (exit 78, one line naming the store and the
    cause) for s3://, an image without gcsfs, a store that does not answer or no bucket."""
    if config.location.scheme != "gs":
        raise ConfigError(f"checkpoint location {config.location}: {S3_REFUSAL}")
    if importlib.util.find_spec("gcsfs") is None:
        raise ConfigError(
            f"checkpoint location {config.location}: Keras 3 backups in gs:// need gcsfs "
            "in the trainer image (Orbax reaches gs:// files through it)"
        )
    bucket_sync.check(config, env)


def orbax_env(config: BucketConfig, env: MutableMapping[str, str]) -> None:
    """What Orbax and TensorStore read to reach the job's store: etils through gcsfs, and
    an emulator's endpoint (no Google credentials there) for gcsfs and TensorStore. Set
    before Orbax (gcsfs) is imported."""
    env["EPATH_USE_TF"] = "false"
    if config.endpoint:
        # gcsfs's extended file system asks GCS's control API (gRPC, not at an emulator's
        # endpoint) for each bucket's layout, warning on every path: its plain one here.
        env.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        env.setdefault("STORAGE_EMULATOR_HOST", config.endpoint)
        env.setdefault("TENSORSTORE_GCS_HTTP_URL", config.endpoint)
        env.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "kerasjob-emulator")


def board(config: BucketConfig) -> rendezvous.ObjectBoard:
    """Where process 0 publishes its address: `<location>/coordinator.json`."""
    store = config.open(RENDEZVOUS_PATIENCE_S)
    key = config.location.key(rendezvous.FILE)
    return rendezvous.ObjectBoard(store, key, f"{config.location}/{rendezvous.FILE}")


def generation_dir(generation: int) -> str:
    return f"{ORBAX_PREFIX}/g{generation:010d}"


def _steps(store: ObjectStore, config: BucketConfig) -> dict[tuple[int, int], set[str]]:
    """(step, generation) -> the keys below that step's directory (relative to it)."""
    base = config.location.key(ORBAX_PREFIX) + "/"
    found: dict[tuple[int, int], set[str]] = {}
    for key in store.list(base):
        parts = key[len(base) :].split("/", 2)
        if len(parts) != 3 or not parts[0].startswith("g"):
            continue
        try:
            at = (int(parts[1]), int(parts[0][1:]))
        except ValueError:
            continue  # Orbax's own files beside the steps
        found.setdefault(at, set()).add(parts[2])
    return found


def committed(steps: BucketSteps, config: BucketConfig) -> list[Committed]:
    """The steps that count (committed by Orbax, not voided by a newer fence), oldest first."""
    fences = steps.fences()
    found = []
    for (step, generation), names in _steps(steps.store, config).items():
        newer_saw_it = all(step <= r for g, r in fences.items() if g > generation)
        if COMMIT_FILE in names and newer_saw_it:
            found.append(Committed(step, generation))
    return sorted(found)


def latest_step(config: BucketConfig) -> int:
    """The newest step that counts (0: none): a look, claiming nothing."""
    steps = BucketSteps(config.open(bucket_sync.PATIENCE_S), config.location, keep=KEEP)
    found = committed(steps, config)
    return found[-1].step if found else 0


@dataclasses.dataclass(frozen=True)
class Place:
    """This incarnation's side of the job's Keras 3 backups in a bucket."""

    config: BucketConfig
    generation: int
    #: the committed step every process restores (None: a fresh start)
    chosen: Committed | None

    def orbax_dir(self, generation: int | None = None) -> str:
        """The Orbax directory of `generation` (this incarnation's by default)."""
        g = self.generation if generation is None else generation
        return f"{self.config.location}/{generation_dir(g)}"


def claim(steps: BucketSteps, config: BucketConfig) -> tuple[int, Committed | None]:
    """Process 0: fence the next generation, naming the newest step that counts."""
    for _ in range(CLAIM_TRIES):
        found = committed(steps, config)
        latest = found[-1] if found else None
        generation = steps.next_generation()
        try:
            steps.fence(
                generation,
                latest.step if latest else 0,
                latest.generation if latest else None,
            )
        except Fenced:
            continue  # another start took the number: the next one
        return generation, latest
    raise Fenced(f"no generation of {config.location} could be claimed")


def clean(steps: BucketSteps, config: BucketConfig, generation: int, keep: int = KEEP) -> int:
    """Remove older generations' steps but the newest `keep` that count (void and
    half-written ones included); returns how many steps were removed."""
    kept = {(c.step, c.generation) for c in committed(steps, config)[-keep:]}
    removed = 0
    for (step, g), names in sorted(_steps(steps.store, config).items()):
        if g >= generation or (step, g) in kept:
            continue
        base = config.location.key(generation_dir(g), str(step))
        for name in sorted(names, key=lambda n: n != COMMIT_FILE):  # the marker first
            steps.store.delete(f"{base}/{name}")
        removed += 1
    return removed


def _share(generation: int | None, process_id: int, processes: int) -> int:
    """Process 0's generation, told to every process through JAX's coordination service."""
    if processes == 1:
        assert generation is not None
        return generation
    import jax

    client: Any = jax._src.distributed.global_state.client  # Orbax's own way to it
    if process_id == 0:
        client.key_value_set(GENERATION_KEY, str(generation))
        return int(generation or 0)
    return int(client.blocking_key_value_get(GENERATION_KEY, GENERATION_WAIT_MS))


def _chosen(steps: BucketSteps, generation: int) -> Committed | None:
    raw = steps.store.get(steps.location.key("fences", f"{generation:010d}.json"))
    if raw is None:
        raise FileNotFoundError(f"the fence of generation {generation} is gone")
    fence: dict[str, Any] = json.loads(raw)
    if fence.get("restored_generation") is None:
        return None
    return Committed(int(fence["restored_step"]), int(fence["restored_generation"]))


def open_place(
    config: BucketConfig, process_id: int, processes: int, env: MutableMapping[str, str]
) -> Place:
    """Every process, once the group formed: process 0 claims this incarnation's generation
    and cleans; all learn it and the step to restore."""
    orbax_env(config, env)
    steps = BucketSteps(config.open(bucket_sync.PATIENCE_S, env), config.location, keep=KEEP)
    mine = None
    if process_id == 0:
        mine, latest = claim(steps, config)
        removed = clean(steps, config, mine)
        restored = f"step {latest.step} of generation {latest.generation}" if latest else "none"
        say(
            f"backups in {config.describe()}: generation {mine}, restoring {restored}"
            + (f", {removed} old step(s) removed" if removed else "")
        )
    generation = _share(mine, process_id, processes)
    return Place(config, generation, _chosen(steps, generation))
