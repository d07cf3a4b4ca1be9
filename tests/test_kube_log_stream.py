"""`LogStream.close()` from another thread ends a blocked `read` with one of the outcomes its
readers handle (b"", OSError, HTTPException, ValueError: launch/pod_logs.py `_read`), never
an AttributeError escaping http.client: closing the response under a blocked chunked read
leaves http.client's `_close_conn` calling `close()` on the `fp` the other thread just set to
None (CPython 3.11 Lib/http/client.py, `_read_next_chunk_size` -> `_close_conn`). Seen on the
agent bed: every `launch` that ended with pod logs open printed one thread traceback per pod
(tests/test_kube_launch_mindie.py). Real sockets and http.client on loopback; the server
answers as the API server's log endpoint does (a chunked body held open while the container
is quiet)."""

from __future__ import annotations

import http.client
import socket
import threading

from ascend_node.kube.client import LogStream


def test_close_from_another_thread_ends_a_blocked_read_cleanly() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    release = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"6\r\nhello\n\r\n")
        release.wait(30)  # a quiet container: the stream stays open
        conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    conn = http.client.HTTPConnection("127.0.0.1", srv.getsockname()[1], timeout=30)
    try:
        conn.request("GET", "/api/v1/namespaces/ns/pods/p/log?follow=true")
        stream = LogStream(conn, conn.getresponse())
        assert stream.read() == b"hello\n"
        got: list[object] = []
        blocked = threading.Event()

        def reader() -> None:
            blocked.set()
            try:
                got.append(stream.read())
            except (OSError, http.client.HTTPException, ValueError) as exc:
                got.append(exc)  # what launch/pod_logs.py's reader handles
            except BaseException as exc:  # the bug: anything else escaping
                got.append(("escaped", exc))

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        blocked.wait(10)
        thread.join(0.5)  # let it block in the chunk-size read
        stream.close()
        thread.join(10)
        assert not thread.is_alive(), "close() did not end the blocked read"
        assert len(got) == 1 and not isinstance(got[0], tuple), got
        assert stream.closed
    finally:
        release.set()
        conn.close()
        srv.close()
