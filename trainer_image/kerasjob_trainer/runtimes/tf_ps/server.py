"""A ps or worker task of a parameter-server job: a TensorFlow server that the chief's
ClusterCoordinator uses, until training is done.

It watches the chief and the ps (not the other workers): when one of them is gone, the
group restarts from the chief's last backup (exit 43; the container's supervisor starts it
again in place), since a new chief or ps starts from that backup. When the chief's
`done` is on the group's board (`stop`), it exits 0. SIGTERM: see `stop`.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import NoReturn

from kerasjob_contract import ExitCode
from kerasjob_trainer.runtimes.tf_ps import stop
from kerasjob_trainer.runtimes.tf_ps.board import Board, board_for
from kerasjob_trainer.runtimes.tf_ps.context import PsContext
from kerasjob_trainer.shared import faults, leader, startup
from kerasjob_trainer.shared.faults import hard_exit, say

DONE_POLL_SECONDS = 0.5


def serve(ctx: PsContext) -> NoReturn:
    """Start the server, then wait: for the chief's done (0), a lost chief or ps (43)."""
    import tensorflow as tf

    startup.mark("tensorflow")
    me = ctx.identity
    board = board_for(ctx.checkpoint_dir, os.environ)
    leader.before_the_group_forms(own=me.own_address, leader=None)
    signal.signal(signal.SIGTERM, lambda signum, frame: _on_sigterm(ctx, board))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(me.cluster), task_type=me.role, task_id=me.index, rpc_layer="grpc"
    )
    tf.distribute.Server(
        resolver.cluster_spec(), job_name=me.role, task_index=me.index, protocol="grpc", start=True
    )
    startup.mark("cluster")
    say(f"{me.role}:{me.index} serving for the chief at {me.own_address}")

    def done() -> bool:
        return stop.finished(board)

    peers = faults.PeerMonitor(me.addresses("chief", "ps"))
    peers.quiet_when(done)
    threading.Thread(target=_arm_when_up, args=(peers, me.cluster["chief"][0]), daemon=True).start()
    while not done():
        time.sleep(DONE_POLL_SECONDS)
    hard_exit(ExitCode.SUCCESS, f"done: the chief finished training; {me.name} exiting 0")


def _arm_when_up(peers: faults.PeerMonitor, chief: str) -> None:
    """Watch the chief and the ps once the chief is up (a restarting chief is no loss).
    Serving a chief is this task's work: its `startup` line then tells the container's
    supervisor that the incarnation was productive (in-place restarts are bounded by
    incarnations in a row without one)."""
    host, _, port = chief.rpartition(":")
    while not faults.listening(host, int(port), 0.5):
        time.sleep(0.2)
    peers.arm()
    startup.mark("first_step")
    say(startup.line())


def _on_sigterm(ctx: PsContext, board: Board) -> None:
    me = ctx.identity
    if me.role != "ps":
        hard_exit(
            ExitCode.PREEMPTED_SAVED, f"{me.name}: SIGTERM; a worker holds no state; exiting 42"
        )
    since = stop.request(board, me.name)
    step = stop.wait_saved(board, since)
    if step is None:
        hard_exit(
            ExitCode.PEER_LOST,
            f"{me.name}: SIGTERM; the chief did not save in {stop.SAVE_WAIT_SECONDS:.0f}s "
            f"(the last periodic backup stands); exiting {int(ExitCode.PEER_LOST)}",
        )
    hard_exit(
        ExitCode.PREEMPTED_SAVED,
        f"preempted: state saved at step {step}; exiting {int(ExitCode.PREEMPTED_SAVED)}",
    )
