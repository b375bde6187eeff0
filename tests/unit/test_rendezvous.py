"""The coordinator's address through the shared volume (shared/rendezvous.py)."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kerasjob_trainer.shared import faults, rendezvous

#: A loopback address that is not 127.0.0.1: published as an own address (127.0.0.1 and
#: ::1 never are), reachable on Linux.
OWN = "127.0.0.2"


@pytest.fixture
def server() -> Iterator[int]:
    """A TCP listener on OWN; yields its port."""
    s = socket.socket()
    s.bind((OWN, 0))
    s.listen(8)
    try:
        yield int(s.getsockname()[1])
    finally:
        s.close()


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_process_0_publishes_its_own_address_atomically(tmp_path: Path) -> None:
    published = rendezvous.publish(str(tmp_path), 1234, mine={"10.0.0.9", "fd00::9"})
    assert published is not None
    published.done()
    assert json.loads((tmp_path / rendezvous.FILE).read_text()) == {"address": "10.0.0.9:1234"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [rendezvous.FILE]  # no temp file


def test_an_ipv6_address_is_bracketed() -> None:
    assert rendezvous.host_port("fd00::9", 1234) == "[fd00::9]:1234"


def test_nothing_is_published_without_an_own_address(tmp_path: Path) -> None:
    assert rendezvous.publish(str(tmp_path), 1234, mine={"127.0.0.1", "::1"}) is None
    assert not (tmp_path / rendezvous.FILE).exists()


def test_nothing_is_published_where_the_directory_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert rendezvous.publish(str(blocker / "ckpt"), 1234, mine={"10.0.0.9"}) is None


def test_the_file_is_touched_while_the_group_forms_and_not_after(tmp_path: Path) -> None:
    published = rendezvous.publish(str(tmp_path), 1234, mine={"10.0.0.9"})
    assert published is not None
    path = tmp_path / rendezvous.FILE
    _age(path, 60)
    deadline = time.monotonic() + 5 * rendezvous.TOUCH_SECONDS
    while time.time() - path.stat().st_mtime > 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rendezvous.read_fresh(str(tmp_path)) == "10.0.0.9:1234"
    published.done()
    published._thread.join(5)
    assert not published._thread.is_alive()
    _age(path, 60)
    time.sleep(2 * rendezvous.TOUCH_SECONDS)
    assert rendezvous.read_fresh(str(tmp_path)) is None  # a predecessor's: not touched now


def test_a_stale_or_broken_file_gives_no_address(tmp_path: Path) -> None:
    path = tmp_path / rendezvous.FILE
    assert rendezvous.read_fresh(str(tmp_path)) is None  # none
    path.write_text(json.dumps({"address": "10.0.0.9:1234"}))
    assert rendezvous.read_fresh(str(tmp_path)) == "10.0.0.9:1234"
    _age(path, rendezvous.FRESH_SECONDS + 1)
    assert rendezvous.read_fresh(str(tmp_path)) is None
    for broken in ("{", "[]", '{"address": "no-port"}', '{"where": 1}'):
        path.write_text(broken)
        assert rendezvous.read_fresh(str(tmp_path)) is None, broken


def test_the_others_take_the_fresh_published_address_that_accepts(
    tmp_path: Path, server: int
) -> None:
    published = rendezvous.publish(str(tmp_path), server, mine={OWN})
    assert published is not None
    try:
        # The name does not even resolve: the published address is all it takes.
        got = rendezvous.find_leader(str(tmp_path), f"no-such-name.invalid:{server}")
    finally:
        published.done()
    assert got == f"{OWN}:{server}"


def test_a_published_address_that_refuses_is_not_taken(tmp_path: Path, server: int) -> None:
    """The predecessor's address (its Pod gone) in a file still fresh: never taken; the
    successor's, once it publishes, is."""
    path = tmp_path / rendezvous.FILE
    path.write_text(json.dumps({"address": "127.0.0.3:1"}))
    reads: list[str | None] = []

    def read(directory: str) -> str | None:
        reads.append(rendezvous.read_fresh(directory))
        if len(reads) == 5:  # the successor publishes
            path.write_text(json.dumps({"address": f"{OWN}:{server}"}))
        return reads[-1]

    got = rendezvous.find_leader(str(tmp_path), "worker-0.job:1234", read=read, deadline=10)
    assert got == f"{OWN}:{server}"
    assert reads[:5] == ["127.0.0.3:1"] * 5


def test_with_no_fresh_file_the_name_is_taken_once_it_accepts(tmp_path: Path, server: int) -> None:
    path = tmp_path / rendezvous.FILE
    path.write_text(json.dumps({"address": "127.0.0.3:1"}))
    _age(path, rendezvous.FRESH_SECONDS + 1)  # a group formed long ago
    assert rendezvous.find_leader(str(tmp_path), f"{OWN}:{server}", deadline=5) == (
        f"{OWN}:{server}"
    )


def test_while_the_file_is_fresh_the_name_is_not_tried(tmp_path: Path) -> None:
    """The name may still resolve to the predecessor's address: a connect that times out."""
    probed: list[str] = []
    now = [0.0]

    def probe(host: str, port: int, timeout: float) -> str | None:
        probed.append(host)
        return "timed out"

    rendezvous.find_leader(
        str(tmp_path),
        "worker-0.job:1234",
        deadline=1,
        probe=probe,
        read=lambda directory: "10.0.0.9:1234",
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert set(probed) == {"10.0.0.9"}


def test_the_wait_ends_with_the_name_after_the_deadline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = [0.0]
    got = rendezvous.find_leader(
        str(tmp_path),
        "worker-0.job:1234",
        deadline=3,
        probe=lambda host, port, timeout: "timed out",
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert got == "worker-0.job:1234"
    assert "did not accept a connection in 3.0" in capsys.readouterr().out


def test_the_published_address_wins_over_the_name_and_a_late_one_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = [0.0]
    reads = iter([None] * 15 + ["10.0.0.9:1234"])
    got = rendezvous.find_leader(
        str(tmp_path),
        "worker-0.job:1234",
        probe=lambda host, port, timeout: None if host == "10.0.0.9" else "refused",
        read=lambda directory: next(reads),
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert got == "10.0.0.9:1234"
    assert "the coordinator published at 10.0.0.9:1234 accepted after 1.5s" in (
        capsys.readouterr().out
    )


def test_a_connect_says_what_happened(server: int) -> None:
    assert faults.connect_error(OWN, server, 1.0) is None
    closed = socket.socket()
    closed.bind((OWN, 0))
    port = int(closed.getsockname()[1])
    closed.close()  # bound once, nothing listens there now
    assert faults.connect_error(OWN, port, 1.0) == "refused"


def test_a_late_accept_says_which_connects_failed_before(
    tmp_path: Path, server: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A predecessor's dead address first (refused here), then the successor's."""
    path = tmp_path / rendezvous.FILE
    closed = socket.socket()
    closed.bind((OWN, 0))
    dead = f"{OWN}:{closed.getsockname()[1]}"
    closed.close()
    path.write_text(json.dumps({"address": dead}))
    now = [0.0]
    reads = 0

    def read(directory: str) -> str | None:
        nonlocal reads
        reads += 1
        if reads == 12:
            path.write_text(json.dumps({"address": f"{OWN}:{server}"}))
        return rendezvous.read_fresh(directory)

    rendezvous.find_leader(
        str(tmp_path),
        "worker-0.job:1234",
        read=read,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert f"(failed connects before: {dead} refused x11)" in capsys.readouterr().out
