"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol, for tests."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    """Answers POST /v1/chat/completions from a script of actions, then from `default`.

    Actions: ("ok", text) → 200 with a chat completion; ("raw", body) → 200 with that body;
    ("status", code) → that code; ("hang", None) → no answer until the test ends;
    ("rate", None) → "Score: N" for the "[rate N]" marker in the prompt;
    ("trickle", (seconds, text)) → a 200 chat completion of `text`, status line and headers included,
    one byte every `seconds`; ("trickle_body", (seconds, text)) → the same, headers at once and the
    body a byte at a time; ("huge", (n_bytes, declare_length)) → 200 with an n-byte body written in
    64 KiB blocks, with or without a Content-Length header (without: ends when the connection does).
    Trickles and huge bodies stop when the client goes away (or at close()); `sent` gets the number
    of bytes each one managed to write, in order.
    """

    def __init__(self):
        self.script = []
        self.default = ("rate", None)
        self.requests = []  # (path, headers, body)
        self.sent = []  # bytes written by each "trickle", "trickle_body" or "huge" reply
        self.lock = threading.Lock()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append((self.path, dict(self.headers), body))
                    action, arg = server.script.pop(0) if server.script else server.default
                if action == "hang":
                    server.release.wait(10)
                    return
                if action in ("trickle", "trickle_body"):
                    self._trickle(*arg, headers_too=action == "trickle")
                elif action == "huge":
                    self._huge(*arg)
                elif action == "status":
                    self._send(arg, b'{"error": "nope"}')
                elif action == "raw":
                    self._send(200, arg.encode())
                else:
                    if action == "rate":
                        found = re.search(r"\[rate (\d+)\]", body["messages"][0]["content"])
                        arg = f"Score: {found.group(1)}" if found else "no idea"
                    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": arg}}]}
                    self._send(200, json.dumps(reply).encode())

            def _send(self, code, payload):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _trickle(self, seconds, text, *, headers_too):
                body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]})
                head = (f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode()
                if not headers_too:
                    self.wfile.write(head)
                    self.wfile.flush()
                self._write_slowly((head if headers_too else b"") + body.encode(), seconds)

            def _write_slowly(self, payload, seconds):
                sent = 0
                try:
                    for i in range(len(payload)):
                        if server.release.wait(seconds):
                            break
                        self.wfile.write(payload[i:i + 1])
                        self.wfile.flush()
                        sent += 1
                except OSError:  # the client closed the connection
                    pass
                server.sent.append(sent)

            def _huge(self, n_bytes, declare_length):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if declare_length:
                    self.send_header("Content-Length", str(n_bytes))
                self.end_headers()
                block, sent = b" " * 65536, 0
                try:
                    while sent < n_bytes and not server.release.is_set():
                        self.wfile.write(block[:n_bytes - sent])
                        sent += min(len(block), n_bytes - sent)
                    self.wfile.flush()
                except OSError:  # the client closed the connection
                    pass
                server.sent.append(sent)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
