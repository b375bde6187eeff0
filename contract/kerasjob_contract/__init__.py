"""The contract between the operator and the trainer.

The one place where both sides learn what a trainer's exit code means, which variables the
operator sets, which container is the trainer, which ports and metric names the chief
serves, and how the trainer's log lines read; the trainer configuration's schema and
defaults are in `kerasjob_contract.trainer_config`. Its own distribution (kerasjob-contract),
imported by the operator (kerasjob) and the trainer (kerasjob-trainer), and by nothing else
than the standard library: neither image carries the other side's code or dependencies.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class ExitCode(enum.IntEnum):
    """What a trainer process's exit status tells the operator."""

    SUCCESS = 0
    """Training finished; the chief wrote the final model."""

    FAILURE = 1
    """An error in the program. Counts against the job's backoffLimit."""

    PREEMPTED_SAVED = 42
    """SIGTERM received; the state at the current step was saved. A disruption: restart,
    never counted against backoffLimit. 42 is what tf_keras's own preemption handler uses.
    Under MultiWorkerMirroredStrategy a SIGTERM to ONE worker makes EVERY worker save at one
    agreed step and exit 42 (see trainer_image/README.md)."""

    PEER_LOST = 43
    """A peer worker vanished (UnavailableError, its server port closed, collective/heartbeat
    timeout, stalled steps). This worker exited at once (well under 2 s) so the whole group
    can restart from the last backup. Also used for SIGTERM when save-before-preemption is
    unavailable (unpinned TensorFlow): the last periodic backup is then the state. A
    disruption."""

    INVALID_CONFIG = 78
    """The configuration cannot work (unknown model, missing data, malformed TF_CONFIG, batch
    size 0, a mesh the devices or the layout cannot take, a checkpoint directory that cannot be
    written ...). Detected before the backup was touched. Permanent: retrying cannot help.
    78 is EX_CONFIG from sysexits.h. The trainer says why in one line (LOG_INVALID_CONFIG),
    which its container also leaves in the termination message for the operator."""


#: Exit codes that say "not the job's fault": restart without using the retry budget.
DISRUPTION_EXIT_CODES: frozenset[int] = frozenset({ExitCode.PREEMPTED_SAVED, ExitCode.PEER_LOST})

#: Exit codes that say "retrying cannot help": fail the job at once.
PERMANENT_EXIT_CODES: frozenset[int] = frozenset({ExitCode.INVALID_CONFIG})


class Env(str, enum.Enum):
    """Environment variables the operator sets in every trainer container."""

    TF_CONFIG = "TF_CONFIG"
    """JSON: {"cluster": {role: [host:port, ...]}, "task": {"type": role, "index": i}}."""

    JOB_NAME = "KERASJOB_NAME"
    NAMESPACE = "KERASJOB_NAMESPACE"
    ROLE = "KERASJOB_ROLE"
    """worker | chief | evaluator"""

    INDEX = "KERASJOB_INDEX"
    CHECKPOINT_DIR = "KERASJOB_CHECKPOINT_DIR"
    """A directory on the shared volume; BackupAndRestore state lives in <dir>/backup."""

    CHECKPOINT_LOCATION = "KERASJOB_CHECKPOINT_LOCATION"
    """With spec.checkpoint.location: this job's own place in the bucket,
    `s3://BUCKET/PREFIX/<namespace>/<name>/<uid>` (or gs://); backups are committed there
    (`kerasjob_trainer.shared.bucket_steps`) and CHECKPOINT_DIR is a Pod-local emptyDir."""

    CHECKPOINT_ENDPOINT = "KERASJOB_CHECKPOINT_ENDPOINT"
    """An S3-compatible store's (or a GCS emulator's) URL; unset: the cloud's own."""

    CHECKPOINT_REGION = "KERASJOB_CHECKPOINT_REGION"
    CHECKPOINT_PATH_STYLE = "KERASJOB_CHECKPOINT_PATH_STYLE"
    """"true": S3 path-style addressing (http://endpoint/bucket/key)."""

    OUTPUT_DIR = "KERASJOB_OUTPUT_DIR"
    """Where the chief writes the final model, TensorBoard logs and progress.json.
    Defaults to <CHECKPOINT_DIR>/output."""

    RESTART_ATTEMPT = "KERASJOB_RESTART_ATTEMPT"
    """How many times the job has restarted (disruptions + failures) so far."""

    TRAINER_CONFIG = "KERASJOB_TRAINER_CONFIG"
    """JSON of the KerasJob's spec.trainer plus "saveFreq" from spec.checkpoint, camelCase:
    {"model", "dataset": {"source", "path"?}, "epochs", "stepsPerEpoch",
     "batchSizePerReplica", "saveFreq", ...}."""

    METRICS_PORT = "KERASJOB_METRICS_PORT"
    """Port on which the chief serves progress in Prometheus text format at /metrics."""

    IN_PLACE_RESTARTS = "KERASJOB_IN_PLACE_RESTARTS"
    """Not set by the operator (a template's env may): how many in-place restarts in a row
    without a training step the container's supervisor makes after a disruption exit (42,
    43) before it exits with that code itself; default IN_PLACE_RESTARTS_DEFAULT, 0: none."""

    TERMINATION_LOG = "KERASJOB_TERMINATION_LOG"
    """Not set by the operator: the file of the container's termination message when it is
    not TERMINATION_LOG (a template that sets the container's terminationMessagePath sets
    this to the same path; the tests point it at a file of their own)."""

    INCARNATION = "KERASJOB_INCARNATION"
    """Set by the supervisor in the trainer process it starts: this incarnation's number in
    the Pod's log directory (1, 2, ...; see LOGS_SUBDIR)."""

    # The identity of a Keras 3 / JAX process (spec.trainer.backend: jax), instead of
    # TF_CONFIG. Keras reads the KERAS_DISTRIBUTION_* ones in keras.distribution.initialize()
    # and JAX the JAX_* ones in jax.distributed.initialize(); both say the same thing.
    KERAS_BACKEND = "KERAS_BACKEND"
    """"jax" for backend jax (Keras 3 picks its backend from it at import)."""

    KERAS_JOB_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
    """host:port of the coordinator: process 0 (worker 0) through the headless Service, on
    spec.port. Keras passes the first address to jax.distributed.initialize."""

    KERAS_NUM_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
    """How many training processes (workers) the job has now."""

    KERAS_PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"
    """This process's id, 0 .. num_processes - 1: the worker's index."""

    JAX_COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
    JAX_NUM_PROCESSES = "JAX_NUM_PROCESSES"
    JAX_PROCESS_ID = "JAX_PROCESS_ID"


class Backend(str, enum.Enum):
    """spec.trainer.backend (kerasjob_contract.trainer_config.BACKENDS)."""

    TENSORFLOW = "tensorflow"
    JAX = "jax"


#: The identity variables of a backend-jax process (none of TF_CONFIG).
JAX_IDENTITY_ENV: tuple[Env, ...] = (
    Env.KERAS_BACKEND,
    Env.KERAS_JOB_ADDRESSES,
    Env.KERAS_NUM_PROCESSES,
    Env.KERAS_PROCESS_ID,
    Env.JAX_COORDINATOR_ADDRESS,
    Env.JAX_NUM_PROCESSES,
    Env.JAX_PROCESS_ID,
)

#: The name of the trainer container in every trainer Pod (a template may add sidecars).
TRAINER_CONTAINER = "trainer"

DEFAULT_METRICS_PORT = 9464
DEFAULT_TF_PORT = 2222

#: Prometheus metric names the chief serves and the operator reads into status.progress.
#: Where the chief leaves its last progress when its process ends (the kubelet's default
#: terminationMessagePath): the /metrics samples without comments, at most
#: TERMINATION_MESSAGE_BYTES. The operator reads it from the Pod's status
#: (state.terminated.message), so status.progress ends exactly where training did even when
#: no scrape came between the last steps and the exit.
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_MESSAGE_BYTES = 4096


def termination_log(env: Mapping[str, str]) -> str:
    """The file of the container's termination message: KERASJOB_TERMINATION_LOG, else the
    kubelet's default TERMINATION_LOG."""
    return env.get(Env.TERMINATION_LOG.value) or TERMINATION_LOG


METRIC_EPOCH = "kerasjob_epoch"
METRIC_STEP = "kerasjob_step"
METRIC_LOSS = "kerasjob_loss"
METRIC_SAMPLES_PER_SECOND = "kerasjob_samples_per_second"
METRIC_TRAINING_METRIC = "kerasjob_metric"
"""Labelled by name, e.g. kerasjob_metric{name="accuracy"} 0.93"""

#: Goodput accounting (the chief; see trainer_image/README.md, "Goodput"): counters over
#: the job's life, across restarts.
METRIC_DISRUPTIONS = "kerasjob_disruptions_total"
METRIC_LOST_SECONDS = "kerasjob_lost_seconds_total"
"""Downtime (last productive step -> first resumed step) plus the time of redone steps."""
METRIC_STEPS_REDONE = "kerasjob_steps_redone_total"
METRIC_PRODUCTIVE_SECONDS = "kerasjob_productive_seconds_total"
METRIC_GOODPUT_RATIO = "kerasjob_goodput_ratio"
"""productive / (productive + lost), from the job's first step to its latest."""

PROGRESS_FILE = "progress.json"

#: Files and directories below KERASJOB_CHECKPOINT_DIR / KERASJOB_OUTPUT_DIR.
BACKUP_SUBDIR = "backup"
"""BackupAndRestore state: <CHECKPOINT_DIR>/backup/chief/ckpt-N (deleted after success)."""
DEFAULT_OUTPUT_SUBDIR = "output"
MODEL_FILE = "model.keras"
"""The final model (tf_keras .keras), written by the chief into OUTPUT_DIR."""
EVAL_FILE = "eval.json"
"""Written by the sidecar evaluator into OUTPUT_DIR."""
GOODPUT_SUBDIR = "goodput"
"""<CHECKPOINT_DIR>/goodput: each worker's last step and exit (last-<role><index>.json) and
the chief's ledger of disruptions (ledger.json)."""
LOGS_SUBDIR = "logs"
"""<CHECKPOINT_DIR>/logs/<pod>/<NNNN>.log: each trainer incarnation's output (its stdout and
stderr, as the container printed them), numbered in order across the Pod's in-place restarts
and re-creations (the Pod name stays); at most LOG_KEEP_PER_POD files of at most
LOG_MAX_BYTES each, the oldest pruned (kerasjob_trainer.core.supervisor)."""
LOG_KEEP_PER_POD = 10
LOG_MAX_BYTES = 16 * 1024 * 1024
IN_PLACE_RESTARTS_DEFAULT = 3


def incarnation_log_name(number: int) -> str:
    """The file name of incarnation `number`'s log in <CHECKPOINT_DIR>/logs/<pod>/."""
    return f"{number:04d}.log"


def incarnation_number(file_name: str) -> int | None:
    """The incarnation a log file name stands for; None for another file."""
    stem, dot, ext = file_name.partition(".")
    return int(stem) if dot and ext == "log" and stem.isdigit() else None


#: Regular expressions for the stdout lines the trainer prints (stable: the demo and the
#: tests parse them). Examples:
#:   kerasjob: resumed at step 275
#:   kerasjob: step 300/600 epoch 1 loss=0.2317 accuracy=0.9344 samples/s=4120
#:   kerasjob: preempted: state saved at step 312; exiting 42
#:   kerasjob: final test_accuracy=0.9312 steps=600
#:   kerasjob: disruption 2 cause=killed:worker1 last_step=45 at=1795373345.120 resumed_step=30
#:       first_step_at=1795373361.480 steps_redone=15 downtime_s=16.36 lost_s=16.52 goodput=0.81
#:   (one line; times are Unix seconds, the chief's clock for first_step_at)
#:   kerasjob: startup started_at=1795373355.020 python_s=0.21 tensorflow_s=3.02 cluster_s=0.61
#:       restore_s=1.35 first_step_s=0.58 total_s=5.77          (one line)
LOG_RESUMED_RE = r"^kerasjob: resumed at step (\d+)"
LOG_STEP_RE = r"^kerasjob: step (\d+)/(\d+)(?: epoch (\d+) loss=(\S+)(?: accuracy=(\S+))?)?"
"""Groups: step, total steps, then (when logged) epoch, loss, accuracy."""
LOG_PREEMPTED_RE = r"^kerasjob: preempted: state saved at step (\d+)"
LOG_FINAL_RE = r"^kerasjob: final (?:test_accuracy=([0-9.]+) )?steps=(\d+)"
LOG_STARTUP_RE = (
    r"^kerasjob: startup started_at=([0-9.]+) python_s=(\S+) tensorflow_s=(\S+) "
    r"cluster_s=(\S+) restore_s=(\S+) first_step_s=(\S+) total_s=([0-9.]+)"
)
"""Once per process, at its first step: when it started (Unix seconds) and the seconds of each
start-up phase (`-`: not reached in this order); see kerasjob_trainer.shared.startup."""
LOG_INCARNATION_RE = r"^kerasjob: incarnation (\d+) of (\S+) started"
"""The supervisor's banner before each trainer process of a container: the incarnation's
number (its log file's, LOGS_SUBDIR) and the Pod; then, after a restart in place, why."""
LOG_DISRUPTION_RE = (
    r"^kerasjob: disruption (\d+) cause=(\S+) last_step=(\d+) at=([0-9.]+) "
    r"resumed_step=(\d+) first_step_at=([0-9.]+) steps_redone=(\d+) "
    r"downtime_s=([0-9.]+) lost_s=([0-9.]+) goodput=([0-9.]+)"
)


#: The one line of every exit 78 (ExitCode.INVALID_CONFIG), on the trainer's stderr:
#:   kerasjob: invalid configuration: mesh batch=1 x model=4 needs 4 devices, but the job has
#:       1 process(es) x 1 device(s)                                         (one line)
#: The container's first process (the trainer's supervisor) adds the same line to the
#: termination message (after what the chief left there, its last metrics); the operator
#: puts its reason in the job's Failed condition and Warning event (`invalid_config_reason`).
LOG_INVALID_CONFIG = "kerasjob: invalid configuration: "
#: The longest reason the termination message carries (the log line keeps all of it).
INVALID_CONFIG_REASON_CHARS = 512


def invalid_config_line(reason: str) -> str:
    """The line of an exit 78 that says `reason` (on one line: line breaks become spaces)."""
    return LOG_INVALID_CONFIG + " ".join(reason.split())


def invalid_config_reason(text: str) -> str | None:
    """The reason of the last line of `text` that holds LOG_INVALID_CONFIG with a reason: the
    rest of that line, stripped, at most INVALID_CONFIG_REASON_CHARS; None without one.
    `text` is a termination message: the chief's /metrics samples with the line after them,
    or the tail of the container's log (terminationMessagePolicy FallbackToLogsOnError)."""
    for line in reversed(text.splitlines()):
        at = line.find(LOG_INVALID_CONFIG)
        if at < 0:
            continue
        reason = line[at + len(LOG_INVALID_CONFIG) :].strip()
        if reason:
            return reason[:INVALID_CONFIG_REASON_CHARS]
    return None
