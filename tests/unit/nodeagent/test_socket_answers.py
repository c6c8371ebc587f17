"""Which sockets a starting agent may delete as stale: only those nobody listens on. A busy
agent's socket (its backlog full) is alive; deleting it would deregister that agent in kubelet."""

from __future__ import annotations

import socket
from pathlib import Path

from operators.nodeagent.plugin.coexistence import socket_answers


def test_a_socket_nobody_listens_on_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "gone.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))  # bound, never listening: what a killed process leaves behind
    assert path.exists()
    assert not socket_answers(path)
    assert not socket_answers(tmp_path / "missing.sock")


def test_a_listener_that_accepts_nothing_still_answers(tmp_path: Path) -> None:
    path = tmp_path / "busy.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(0)
        pending = []
        try:
            # Fill the backlog: a non-blocking connect to it then fails with EAGAIN.
            while True:
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.setblocking(False)
                pending.append(client)
                try:
                    client.connect(str(path))
                except BlockingIOError:
                    break
                assert len(pending) < 64, "the backlog never filled"
            assert socket_answers(path)
        finally:
            for client in pending:
                client.close()
