"""Following a collection of the API server (the job object, its pods) with its watch, as
controllers and ``kubectl get -w`` do, instead of reading it again every few seconds.

Each :class:`Follower` runs in a thread of its own: it lists the collection (the current
objects and the list's ``resourceVersion``), then watches from that version with the
client's ``kubernetes.watch.Watch``; every object it sees goes to one queue that ``wait``
reads. A watch ends by design (``timeout_seconds``: the server closes it, and the next one
goes on from the last version seen); a 410 Gone (the version is older than the server's
history: an expired watch, a restarted API server) means listing again; a dropped
connection or a 5xx is asked again from the last version, with back-off, through the same
:class:`~tenter.launch.backends.kubernetes.cluster.Retrying` as every other call. An error that is
not transient, or an outage past the retry window, is put on the queue for ``wait`` to raise.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenter.launch.backends.kubernetes.cluster import Retrying

WATCH_S = 60
"""How long one watch request lasts (the server's ``timeoutSeconds``) before it is renewed
from the last version seen: a dead connection the kernel does not notice is noticed then."""
READ_TIMEOUT_S = WATCH_S + 30
"""The client's read timeout on a watch: a server that stopped sending altogether."""
GONE = 410

ListCall = Callable[..., Any]
"""A list call of the client (``list_namespaced_pod`` with its selector bound...): with
``watch=True`` it streams events."""


@dataclass(frozen=True)
class Seen:
    """An object of a followed collection, as listed or as a watch event told it."""

    collection: str
    event: str
    """LISTED (from a list), ADDED, MODIFIED or DELETED."""
    obj: dict[str, Any]


class Follower:
    def __init__(
        self,
        collection: str,
        list_call: ListCall,
        retrying: Retrying,
        seen: queue.Queue[Seen | BaseException],
        say: Callable[[str], None],
    ) -> None:
        self.collection, self._list, self._retrying = collection, list_call, retrying
        self._seen, self._say = seen, say
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{collection}", daemon=True)
        self.version: str | None = None
        """The resourceVersion the next watch starts from (None: list first)."""

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current event; a watch blocked in a read ends with its request
        (the thread is a daemon: it never holds the process)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.version is None:
                    self._retrying.call(f"listing the {self.collection}", self._list_all)
                self._retrying.call(f"watching the {self.collection}", self._watch_once)
        except BaseException as e:  # for wait to raise in its own thread
            if not self._stop.is_set():
                self._seen.put(e)

    def list(self) -> list[dict[str, Any]]:
        """The collection's objects now (and the version a watch goes on from)."""
        response = self._list(_preload_content=False)
        body = json.loads(response.data)
        self.version = body["metadata"]["resourceVersion"]
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    def _list_all(self) -> None:
        for obj in self.list():
            self._seen.put(Seen(self.collection, "LISTED", obj))

    def _watch_once(self) -> None:
        from kubernetes import client, watch

        def call(**kwargs: Any) -> Any:
            return self._list(**kwargs)

        # Through a function without the client's docstring: Watch then yields the objects as
        # the server sent them (dicts), instead of deserializing each into the client's models.
        self._watch = watch.Watch()
        try:
            for event in self._watch.stream(
                call,
                resource_version=self.version,
                timeout_seconds=WATCH_S,
                _request_timeout=READ_TIMEOUT_S,
            ):
                obj = event["raw_object"]
                self.version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    self._seen.put(Seen(self.collection, event["type"], obj))
                if self._stop.is_set():
                    break
        except Exception as e:
            if self._stop.is_set():
                return  # the end of a watch that is no longer wanted
            if not isinstance(e, client.ApiException) or e.status != GONE:
                raise
            self._say(f"the watch of the {self.collection} expired ({GONE} Gone): listing again")
            self.version = None
