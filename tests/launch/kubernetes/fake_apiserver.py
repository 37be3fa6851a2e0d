"""A fake Kubernetes API server on loopback for the official client: it answers list, watch
and create requests of the collections it is given, from a script, over real HTTP.

A watch (``?watch=true``) is answered as the API server does: a chunked response, one JSON
event per line (``{"type": "MODIFIED", "object": {...}}``), ended by the server. Each watch
request plays the collection's next :class:`Episode`: its events, then how it ends: ``close``
(the server's timeout: a clean end of the stream), ``drop`` (the connection is cut in the
middle of a chunk) or ``gone`` (an ``ERROR`` event with a 410 Status: the version is too old).
A watch beyond the script stays open, sending nothing, until the server stops.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]


@dataclass
class Episode:
    events: list[tuple[str, Obj]]
    end: Literal["close", "drop", "gone"] = "close"
    after: threading.Event | None = None
    """Start only once this is set (orders one collection's events after another's)."""
    done: threading.Event = field(default_factory=threading.Event)
    """Set once the episode's events are sent."""


@dataclass
class Collection:
    lists: list[tuple[str, list[Obj]]]
    """What the first list requests answer: (resourceVersion, items); later ones answer the
    objects as the last list and the events sent since left them."""
    episodes: list[Episode]
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    """("list" or "watch", the resourceVersion asked from) of each request, in order."""
    objects: dict[str, Obj] = field(default_factory=dict)
    version: str = "0"

    def answer_list(self) -> Obj:
        if self.lists:
            self.version, items = self.lists.pop(0)
            self.objects = {o["metadata"]["name"]: o for o in items}
        meta = {"resourceVersion": self.version}
        return {"kind": "List", "metadata": meta, "items": list(self.objects.values())}

    def sent(self, obj: Obj) -> None:
        self.objects[obj["metadata"]["name"]] = obj
        self.version = obj["metadata"]["resourceVersion"]


GONE = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "too old resource version",
    "reason": "Expired",
    "code": 410,
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(201, body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        collection = self.server.collections.get(url.path)
        if collection is None:
            self._answer(404, json.dumps({"kind": "Status", "code": 404}).encode())
            return
        if query.get("watch") == "true":
            collection.requests.append(("watch", query.get("resourceVersion")))
            self._watch(collection)
            return
        collection.requests.append(("list", query.get("resourceVersion")))
        self._answer(200, json.dumps(collection.answer_list()).encode())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, collection: Collection) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if not collection.episodes:
            self.server.stopping.wait()
            self.close_connection = True
            return
        episode = collection.episodes.pop(0)
        if episode.after is not None:
            episode.after.wait(timeout=30)
        for kind, obj in episode.events:
            collection.sent(obj)
            self._chunk((json.dumps({"type": kind, "object": obj}) + "\n").encode())
        episode.done.set()
        if episode.end == "drop":
            self.wfile.write(b'40\r\n{"type": "MODI')  # a chunk cut short
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if episode.end == "gone":
            self._chunk((json.dumps({"type": "ERROR", "object": GONE}) + "\n").encode())
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    collections: dict[str, Collection]
    stopping: threading.Event


@contextmanager
def fake_apiserver(collections: dict[str, Collection], tmp_path: Path) -> Iterator[Path]:
    """Serve ``collections`` (URL path -> script) on 127.0.0.1; yields a kubeconfig for it."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.collections, server.stopping = collections, threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
        f"clusters: [{{name: fake, cluster: {{server: 'http://127.0.0.1:{server.server_port}'}}}}]\n"
        "users: [{name: fake, user: {token: t}}]\n"
    )
    try:
        yield config
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()
