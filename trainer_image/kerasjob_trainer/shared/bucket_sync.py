"""A backup directory kept in a bucket (`KERASJOB_CHECKPOINT_LOCATION`): what lets a
framework that backs up to local files (tf_keras's BackupAndRestore) run without a shared
volume. Its directory is Pod-local; the bucket holds the committed steps
(`bucket_steps`: generations fenced, a marker after every part, the last K kept).

- **Claim** (the chief, once per incarnation, before the group forms): the next generation
  is fenced (create-only) naming the step it restores, the newest committed one; from then
  on no zombie of an older incarnation can commit a step it would not restore.
- **Pull** (every process, before `fit`): the local `<backup>/chief` is replaced by the files
  of the step the newest fence names (the chief's choice: every process restores the same
  step), or emptied when it names none (a fresh start). A half-written step is never pulled.
- **Push** (the chief, after each backup): the directory's files are linked into a staging
  directory at once (they are immutable from then on) and a background thread writes them
  as the parts of that step, then the marker, then cleans. A push that fails (the store
  down) is logged in one line and skipped: training goes on, the next backup tries again.
  The agreed SIGTERM save is pushed last, synchronously (`push_now`); if that fails, the last
  committed step stays the one a restart restores.

    sync = BucketSync.from_env(os.environ, backup_dir)   # None without a location
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import shutil
import threading
from collections.abc import Mapping

from kerasjob_contract import Env
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.shared.bucket_steps import MARKER, BucketSteps, Committed, Fenced
from kerasjob_trainer.shared.faults import say
from kerasjob_trainer.shared.objectstore import Location, ObjectStore, open_store

#: The read-manager's directory of BackupAndRestore (tf_keras's `WorkerTrainingState`).
CHIEF_SUBDIR = "chief"
#: How long one request keeps retrying before it gives up (connect: 5 s of it at most):
#: the SIGTERM save's push must end within the Pod's grace period (60 s) either way.
PATIENCE_S = 15.0
#: At start, before any process trains: an unreachable store is a configuration error soon.
CHECK_PATIENCE_S = 10.0
#: The committed steps kept in the bucket.
KEEP = 2
#: How many times the chief tries the next generation number when another start took it.
CLAIM_TRIES = 5


@dataclasses.dataclass(frozen=True)
class BucketConfig:
    """The job's bucket location and how to reach it (the operator's env)."""

    location: Location
    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BucketConfig | None:
        """None without KERASJOB_CHECKPOINT_LOCATION (a volume job); ConfigError if bad."""
        url = env.get(Env.CHECKPOINT_LOCATION.value, "").strip()
        if not url:
            return None
        try:
            location = Location.parse(url)
        except ValueError as e:
            raise ConfigError(f"{Env.CHECKPOINT_LOCATION.value}: {e}") from None
        return cls(
            location,
            env.get(Env.CHECKPOINT_ENDPOINT.value) or None,
            env.get(Env.CHECKPOINT_REGION.value) or None,
            env.get(Env.CHECKPOINT_PATH_STYLE.value, "").strip().lower() == "true",
        )

    def open(self, patience_s: float, env: Mapping[str, str] | None = None) -> ObjectStore:
        return open_store(
            self.location,
            endpoint=self.endpoint,
            region=self.region,
            path_style=self.path_style,
            env=env,
            patience_s=patience_s,
        )

    def describe(self) -> str:
        return f"{self.location}" + (f" at {self.endpoint}" if self.endpoint else "")


def check(config: BucketConfig, env: Mapping[str, str] | None = None) -> None:
    """The store answers and the bucket is there and readable with these credentials, or
    ConfigError (exit 78) with one line naming the store and the cause."""
    try:
        store = config.open(CHECK_PATIENCE_S, env)
        store.list(config.location.key("fences") + "/")
    except Exception as e:  # every client's errors: the cause is in the text
        raise ConfigError(f"checkpoint location {config.describe()}: {cause(e)}") from None


def cause(error: BaseException) -> str:
    """One line: what kind of failure `error` is, and its first words (clients are wordy)."""
    text = " ".join(str(error).split())
    kind = next(
        (what for what, pattern in _CAUSES if pattern.search(f"{type(error).__name__} {text}")),
        "the store refused",
    )
    return f"{kind} ({type(error).__name__}: {text[:240]})"


#: What an error's text says, first match wins: listing a prefix finds nothing only when
#: the bucket is missing (S3's NoSuchBucket, GCS's 404 Not Found).
_CAUSES = (
    (
        "the bucket does not exist",
        re.compile(r"NoSuchBucket|bucket does not exist|^NotFound\b|\b404\b", re.I),
    ),
    (
        "the credentials are refused or missing",
        re.compile(
            r"AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|\b40[13]\b|credential"
            r"|Forbidden|Unauthori[sz]ed",
            re.I,
        ),
    ),
    ("the store cannot be reached", re.compile(r"connect|timed out|timeout|dns|unreachable", re.I)),
)


class BucketSync:
    """One process's side of its job's backups in a bucket (see the module doc)."""

    def __init__(self, config: BucketConfig, backup_dir: str, store: ObjectStore) -> None:
        self.config = config
        self.backup_dir = backup_dir
        self.steps = BucketSteps(store, config.location, keep=KEEP)
        # One push at a time: two of one step (a periodic backup and the SIGTERM save at the
        # same step) must not mix their files under one step's keys.
        self._push_lock = threading.Lock()
        self._staged = itertools.count()
        self.generation: int | None = None
        self._pusher: _Pusher | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str], backup_dir: str) -> BucketSync | None:
        config = BucketConfig.from_env(env)
        if config is None:
            return None
        return cls(config, backup_dir, config.open(PATIENCE_S, env))

    @property
    def chief_dir(self) -> str:
        return os.path.join(self.backup_dir, CHIEF_SUBDIR)

    @property
    def _staging_root(self) -> str:
        """Beside the backup directory (the end of a job deletes that one)."""
        return os.path.join(os.path.dirname(self.backup_dir), ".bucket-staging")

    # -- start: claim (the chief), pull (everyone) ----------------------------------------------

    def claim(self) -> Committed | None:
        """The chief, before the group forms: fence this incarnation's generation, naming
        the newest committed step (what every process restores). Returns that step."""
        for _ in range(CLAIM_TRIES):
            latest = self.steps.latest()
            generation = self.steps.next_generation()
            try:
                self.steps.fence(generation, latest.step if latest else 0, _source(latest))
            except Fenced:
                continue  # another start took the number: the next one
            self.generation = generation
            return latest
        raise Fenced(f"no generation of {self.config.location} could be claimed")

    def chosen(self) -> Committed | None:
        """The step the newest generation (this incarnation's chief) restores, or None."""
        source = self.steps.newest_fence()
        step = int(source["restored_step"]) if source else 0
        if step == 0:
            return None
        generation = (source or {}).get("restored_generation")  # None: a fence without it
        found = [
            c
            for c in self.steps.committed()
            if c.step == step and generation in (None, c.generation)
        ]
        if not found:
            raise FileNotFoundError(f"committed step {step} (generation {generation}) is gone")
        return found[-1]

    def pull(self, committed: Committed | None) -> int:
        """Replace the local backup with `committed`'s files (None: no backup, a fresh
        start). Returns the bytes written."""
        shutil.rmtree(self.chief_dir, ignore_errors=True)
        shutil.rmtree(self._staging_root, ignore_errors=True)  # an earlier process's leftovers
        os.makedirs(self.chief_dir, exist_ok=True)
        written = 0
        for name in committed.parts if committed else ():
            data = self.steps.read_part(committed, name)  # type: ignore[arg-type]
            with open(os.path.join(self.chief_dir, name), "wb") as f:
                f.write(data)
            written += len(data)
        return written

    # -- pushes (the chief) -------------------------------------------------------------------

    def push_later(self, step: int) -> None:
        """Commit the backup just written (step `step`) in the background; a push still in
        flight goes on, and only the newest waiting one is kept."""
        if self._pusher is None:
            self._pusher = _Pusher(self)
        self._pusher.submit(step, self._stage(step))

    def wait(self, timeout: float) -> bool:
        """Until the background pushes are done (False: still one after `timeout`)."""
        return self._pusher is None or self._pusher.wait(timeout)

    def push_now(self, step: int) -> bool:
        """Commit the backup just written, here and now (the agreed SIGTERM save)."""
        return self._push(step, self._stage(step))

    def _stage(self, step: int) -> str:
        """Hard links to the backup's files (copies where links fail): what is pushed stays
        as it is while the next backup replaces the directory's files."""
        staged = os.path.join(self._staging_root, f"{step}-{next(self._staged)}")
        shutil.rmtree(staged, ignore_errors=True)
        os.makedirs(staged)
        for name in sorted(os.listdir(self.chief_dir)):
            src = os.path.join(self.chief_dir, name)
            if not os.path.isfile(src):
                continue
            try:
                os.link(src, os.path.join(staged, name))
            except OSError:
                shutil.copy2(src, os.path.join(staged, name))
        return staged

    def _push(self, step: int, staged: str) -> bool:
        """Parts, marker, clean; one `kerasjob:` line and False when it cannot commit
        (training goes on: the next backup tries again)."""
        with self._push_lock:
            try:
                committed = self._commit(step, staged)
            except Exception as e:
                why = e if isinstance(e, Fenced) else cause(e)
                say(f"backup of step {step} not committed to {self.config.location}: {why}")
                return False
            finally:
                shutil.rmtree(staged, ignore_errors=True)
            if committed:
                self._clean(step)
            return True

    def _commit(self, step: int, staged: str) -> bool:
        """Write the staged files and the marker; False: this generation committed this
        step already (the periodic backup at the step SIGTERM's save agreed on)."""
        generation = self.generation
        if generation is None:
            raise Fenced("this process claimed no generation (not the chief?)")
        if self.steps.store.get(self.steps.part_key(step, generation, MARKER)) is not None:
            return False
        names = sorted(os.listdir(staged))
        for name in names:
            with open(os.path.join(staged, name), "rb") as f:
                self.steps.write_part(step, generation, name, f.read())
        self.steps.commit(step, generation, names)
        return True

    def _clean(self, step: int) -> None:
        assert self.generation is not None
        try:
            self.steps.clean(self.generation)
        except Exception as e:  # the next push cleans again
            say(f"backup of step {step} committed; older steps not cleaned: {cause(e)}")


def _source(latest: Committed | None) -> int | None:
    return latest.generation if latest else None


class _Pusher:
    """One background thread pushing the newest staged backup."""

    def __init__(self, sync: BucketSync) -> None:
        self.sync = sync
        self._cv = threading.Condition()
        self._waiting: tuple[int, str] | None = None
        self._busy = False
        threading.Thread(target=self._run, name="kerasjob-bucket-push", daemon=True).start()

    def submit(self, step: int, staged: str) -> None:
        with self._cv:
            if self._waiting is not None:  # superseded before it started
                shutil.rmtree(self._waiting[1], ignore_errors=True)
            self._waiting = (step, staged)
            self._cv.notify_all()

    def wait(self, timeout: float) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: not self._busy and self._waiting is None, timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._waiting is not None)
                assert self._waiting is not None
                job, self._waiting, self._busy = self._waiting, None, True
            try:
                self.sync._push(*job)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


def describe_pull(committed: Committed | None, size: int, config: BucketConfig) -> str:
    """The pull's one line (what a restart restores, from where)."""
    if committed is None:
        return f"no committed backup in {config.location}: a fresh start"
    return (
        f"backup of step {committed.step} pulled from {config.location} (committed by "
        f"generation {committed.generation}: {len(committed.parts)} files, {size} bytes)"
    )
