"""Whether a server answers: one TCP connection, bounded in time (name lookup included)."""

import socket
import threading
from urllib.parse import urlparse


def reachable(base_url: str, timeout: float) -> bool:
    """Whether a TCP connection to `base_url`'s host opens within `timeout` seconds, name lookup included (a
    socket's timeout does not bound the lookup, so the probe runs in a thread that is given up on)."""
    url = urlparse(base_url)
    opened = []

    def connect() -> None:
        try:
            with socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout):
                opened.append(True)
        except (OSError, ValueError):
            pass

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(opened)
