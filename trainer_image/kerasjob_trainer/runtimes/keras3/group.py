"""How a Keras 3 process group forms and leaves: JAX's distributed runtime, coordinator first.

Process 0 serves JAX's coordination service. Its address goes through the job's shared
volume, or its bucket when it has none (`shared/rendezvous.py`), not the cluster DNS:
process 0 publishes its own address and reaches its own service through the loopback
interface; the others take the published address when it is fresh and accepts a
connection. Where nothing can be published (no shared volume or bucket, no own address)
both wait as the tf-keras path does (`leader.py`): process 0 for its name to resolve to its
own new address, the others for the name to accept a connection; without those waits a
re-created worker 0 cost gRPC's 30 s re-resolution back-off in 4 of 5 container SIGTERMs
on the real node.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NoReturn

from kerasjob_contract import ExitCode
from kerasjob_trainer.runtimes.keras3.identity import Identity
from kerasjob_trainer.shared import faults, leader, rendezvous
from kerasjob_trainer.shared.faults import say

#: A group formation slower than this is said in the log (most take well under a second).
SLOW_SECONDS = 2.0
#: How long a process that found the configuration invalid waits at JAX's shutdown barrier for
#: its peers before it exits 78 anyway.
INVALID_LEAVE_SECONDS = 30.0


def form(jax: Any, identity: Identity, where: rendezvous.Where, heartbeat_seconds: int) -> None:
    """jax.distributed.initialize for `identity` (a multi-process one); exit 43 when the
    group cannot form (e.g. the coordinator went away meanwhile). `where`: the job's
    shared checkpoint directory, or an object in its bucket, where process 0 publishes its
    address."""
    assert identity.coordinator is not None
    port = int(identity.coordinator.rpartition(":")[2])
    published = None
    if identity.is_chief:
        published = rendezvous.publish(where, port)
        if published is None:
            leader.before_the_group_forms(own=identity.coordinator, leader=None)
        address = identity.coordinator if published is None else f"127.0.0.1:{port}"
    else:
        address = rendezvous.find_leader(where, identity.coordinator)
    started = time.monotonic()
    try:
        jax.distributed.initialize(
            coordinator_address=address,
            num_processes=identity.num_processes,
            process_id=identity.process_id,
            heartbeat_timeout_seconds=heartbeat_seconds,
            # Everything is given: no probing of SLURM, MPI, TPU or Kubernetes environments
            # (on Kubernetes JAX warns in every incarnation that `kubernetes` is missing).
            cluster_detection_method="deactivate",
        )
    except Exception as e:
        faults.exit_for(e, ExitCode.PEER_LOST)
    finally:
        if published is not None:
            published.done()
    took = time.monotonic() - started
    if took >= SLOW_SECONDS:  # the part no wait of ours explains: say it, with the address
        say(f"jax.distributed.initialize with the coordinator at {address} took {took:.2f}s")


def leave(timeout: float | None = None) -> None:
    """Leave JAX's distributed runtime through its shutdown barrier (a process that simply
    left would make the others' clients abort), waiting at most `timeout` seconds (None: as
    long as it takes). A failure is a warning: the peer it waited for is late or gone."""
    import jax

    if not jax.distributed.is_initialized():
        return

    def shutdown() -> None:
        try:
            jax.distributed.shutdown()
        except Exception as e:
            say(f"warning: leaving the JAX runtime: {faults.summary(e)}")

    leaving = threading.Thread(target=shutdown, name="kerasjob-leave", daemon=True)
    leaving.start()
    leaving.join(timeout)


def exit_invalid(message: str) -> NoReturn:
    """Exit 78 for a configuration that every process of the group checks alike, once JAX's
    runtime is up (the mesh against the devices, the layout, the elastic batch): leave
    through JAX's shutdown barrier first (at most INVALID_LEAVE_SECONDS). Process 0 serves
    the coordination service; had it simply exited, a peer still on its way to the same
    check had its runtime abort it (exit 43, a lost peer, instead of 78: CI saw [78, 43])."""
    faults.say_invalid(message)
    leave(INVALID_LEAVE_SECONDS)
    faults.hard_exit(ExitCode.INVALID_CONFIG)
