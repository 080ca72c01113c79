"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol, for tests."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    """Answers POST /v1/chat/completions from a script of actions, then from `default`.

    Actions: ("ok", text) → 200 with a chat completion; ("raw", body) → 200 with that body;
    ("status", code) → that code; ("hang", None) → no answer until the test ends;
    ("rate", None) → "Score: N" for the "[rate N]" marker in the prompt.
    """

    def __init__(self):
        self.script = []
        self.default = ("rate", None)
        self.requests = []  # (path, headers, body)
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
                if action == "status":
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
