"""One JSON object per line over a Unix socket: the client sends a command, the server answers."""

import json
import os
import socket

MAX_LINE = 1 << 20


def socket_path(session: str) -> str:
    return os.path.join(os.environ.get("RDB_DIR", "/tmp"), f"rdb-{session}.sock")


def send(conn: socket.socket, obj: dict) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")


def receive(conn: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_LINE:
            raise ValueError("message too long")
    if not data:
        raise ConnectionError("the other side closed the connection")
    return json.loads(data)
