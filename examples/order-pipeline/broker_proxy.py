"""A TCP proxy between idem's processes and RabbitMQ, so that the fault script can take the
broker away from them: one listening port per route (the relay's, the deliverer's), each
forwarding to the broker.

- `cut()` closes every connection and refuses new ones until `restore()`: what a broker restart
  or a network partition looks like to a client.
- `stall(route)` stops passing the broker's bytes to that route's client (its publishes still go
  through): the relay's messages reach the queue, their confirmations never reach the relay.
  `sent(route)` counts the bytes its client sent, to see that it published meanwhile.
"""

from __future__ import annotations

import socket
import threading
import time


class _Route:
    def __init__(self, name: str) -> None:
        self.name = name
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: set[tuple[socket.socket, socket.socket]] = set()
        self.stalled = False
        self.sent = 0  # bytes from the client to the broker
        self.accepted = 0


class BrokerProxy:
    def __init__(self, host: str, port: int, routes: list[str]) -> None:
        self.target = (host, port)
        self.lock = threading.Lock()
        self.refusing = False
        self.closed = False
        self.routes = {name: _Route(name) for name in routes}
        for route in self.routes.values():
            threading.Thread(target=self._accept, args=(route,), daemon=True,
                             name=f"proxy-{route.name}").start()

    def port(self, route: str) -> int:
        return self.routes[route].port

    def sent(self, route: str) -> int:
        with self.lock:
            return self.routes[route].sent

    def cut(self) -> int:
        """Closes every connection and refuses new ones; returns how many were closed."""
        with self.lock:
            self.refusing = True
            connections = [c for route in self.routes.values() for c in route.connections]
            for route in self.routes.values():
                route.connections.clear()
        for pair in connections:
            _close(pair)
        return len(connections)

    def restore(self) -> None:
        with self.lock:
            self.refusing = False

    def stall(self, route: str) -> None:
        with self.lock:
            self.routes[route].stalled = True

    def unstall(self, route: str) -> None:
        with self.lock:
            self.routes[route].stalled = False

    def close(self) -> None:
        self.closed = True
        self.cut()
        for route in self.routes.values():
            route.listener.close()

    def _accept(self, route: _Route) -> None:
        while not self.closed:
            try:
                client, _ = route.listener.accept()
            except OSError:
                return
            with self.lock:
                refusing = self.refusing
            if refusing:
                _close((client,))
                continue
            try:
                broker = socket.create_connection(self.target, timeout=5)
                broker.settimeout(None)
            except OSError:
                _close((client,))
                continue
            for sock in (client, broker):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = (client, broker)
            with self.lock:
                route.connections.add(pair)
                route.accepted += 1
            threading.Thread(target=self._pump, args=(route, pair, client, broker, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(route, pair, broker, client, False),
                             daemon=True).start()

    def _pump(self, route: _Route, pair: tuple, source: socket.socket,
              destination: socket.socket, upstream: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if upstream:
                    with self.lock:
                        route.sent += len(data)
                else:
                    while route.stalled and pair in route.connections:
                        time.sleep(0.01)
                    if pair not in route.connections:
                        break
                destination.sendall(data)
        except OSError:
            pass
        finally:
            with self.lock:
                route.connections.discard(pair)
            _close(pair)


def _close(sockets: tuple) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass
