"""Headless Chromium driven over the DevTools protocol, with the standard library only.

The dashboard keeps an event stream open, so Chromium's ``--dump-dom --virtual-time-budget``
never sees the page settle (virtual time waits for every open request). Instead the test
starts Chromium with ``--remote-debugging-port=0``, opens the page, and reads the live DOM
(``Runtime.evaluate``) at two moments and takes a screenshot (``Page.captureScreenshot``),
over a WebSocket written here: the handshake, masked client frames and the three length forms
of RFC 6455 are all that the DevTools endpoint needs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class WebSocket:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        match = re.fullmatch(r"ws://([^/:]+):(\d+)(/.*)", url)
        assert match, url
        host, port, path = match.group(1), int(match.group(2)), match.group(3)
        self._sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        self._sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                           .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self._sock.recv(4096)
            assert chunk, "the DevTools endpoint closed the connection during the handshake"
            head += chunk
        head, self._buffer = head.split(b"\r\n\r\n", 1)
        assert head.split(b"\r\n")[0].split()[1] == b"101", head

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("the DevTools endpoint closed the connection")
            self._buffer += chunk
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def send(self, text: str) -> None:
        payload = text.encode()
        mask = secrets.token_bytes(4)
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._sock.sendall(header + mask + masked)

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            message += payload
            if first & 0x80:  # FIN: the last fragment of the message
                return message.decode()

    def close(self) -> None:
        self._sock.close()


class Browser:
    """One headless Chromium with one page; ``evaluate`` runs JavaScript in it."""

    def __init__(self, profile: Path, *, width: int = 1400, height: int = 1000) -> None:
        binary = chromium_binary()
        assert binary, "no Chromium: apt-get install chromium"
        self._process = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = self._process.stderr.readline()
            if not line and self._process.poll() is not None:
                raise RuntimeError(f"Chromium ended with {self._process.returncode} before listening")
            match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if match:
                port = int(match.group(1))
        assert port, "Chromium did not print its DevTools address"
        # Chromium keeps writing to stderr (dbus notes); drain it so it never blocks on a full pipe.
        self._drain = subprocess.Popen(["cat"], stdin=self._process.stderr, stdout=subprocess.DEVNULL)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as response:
            targets = json.load(response)
        page = next(t for t in targets if t["type"] == "page")
        self._ws = WebSocket(page["webSocketDebuggerUrl"])
        self._next_id = 0

    def call(self, method: str, **params: object) -> dict:
        self._next_id += 1
        self._ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.receive())
            if message.get("id") == self._next_id:
                assert "error" not in message, message
                return message["result"]

    def open(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 30.0, interval: float = 0.2):
        """Evaluate ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not true after {timeout} s: {expression}")
            time.sleep(interval)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self._ws.close()
        finally:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._drain.wait(timeout=10)


def keep_artefact(path: Path) -> Path:
    """Copy ``path`` to the directory ``CLINK_TEST_ARTEFACTS`` names, when it is set."""
    folder = os.environ.get("CLINK_TEST_ARTEFACTS")
    if not folder:
        return path
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(path, Path(folder) / path.name))
