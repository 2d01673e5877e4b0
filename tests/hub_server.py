"""A loopback fake of the Hugging Face Hub HTTP API, just what ``HfApi.create_repo``,
``create_branch`` and ``upload_folder`` (huggingface_hub 2.4) call, recording every request.

Routes (``{repo}`` is ``owner/name``, ``{rev}`` a revision):

- ``POST /api/repos/create``: JSON ``{"name", "organization", "visibility"}``; 200 ``{"url"}``,
  409 when the repository exists (the client's ``exist_ok`` path);
- ``POST /api/validate-yaml``: 200 ``{"errors": [], "warnings": []}`` (called by the non-Xet
  upload path on a ``README.md``);
- ``POST /api/models/{repo}/branch/{branch}``: 200, 409 when the branch exists;
- ``POST /api/models/{repo}/preupload/{rev}``: every file ``uploadMode: "regular"``, so no
  LFS or Xet upload ever starts;
- ``POST /api/models/{repo}/commit/{rev}``: the NDJSON commit; 200 ``{"commitUrl", "commitOid"}``;
- ``GET /api/models/{repo}[/revision/{rev}]``: repository info (``sha``, ``siblings``).

Anything else is a 404 (recorded, so a test sees unexpected calls). ``fail[route] = (status,
message)`` makes a route (``create``, ``branch``, ``validate``, ``preupload``, ``commit``,
``info``) answer ``{"error": message}`` with that status; ``token`` set makes every request
without ``Authorization: Bearer <token>`` a 401.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

_REPO = r"/api/models/(?P<repo>[^/]+/[^/]+)"
ROUTES = [
    ("POST", "create", re.compile(r"/api/repos/create")),
    ("POST", "validate", re.compile(r"/api/validate-yaml")),
    ("POST", "branch", re.compile(_REPO + r"/branch/(?P<rev>.+)")),
    ("POST", "preupload", re.compile(_REPO + r"/preupload/(?P<rev>.+)")),
    ("POST", "commit", re.compile(_REPO + r"/commit/(?P<rev>.+)")),
    ("GET", "info", re.compile(_REPO + r"(?:/revision/(?P<rev>.+))?")),
]


@dataclass
class Request:
    """One recorded request: ``headers`` with lower-cased names, ``body`` the raw bytes."""

    method: str
    path: str
    query: str
    headers: dict
    body: bytes
    route: str = ""

    def json(self):
        return json.loads(self.body)

    def ndjson(self) -> list:
        return [json.loads(line) for line in self.body.splitlines() if line.strip()]


@dataclass
class Repo:
    """A fake repository: its visibility, branches and files (path -> bytes) on ``main``."""

    private: bool
    branches: set = field(default_factory=lambda: {"main"})
    files: dict = field(default_factory=dict)
    sha: str = "0" * 40


class FakeHub:
    """The fake Hub on 127.0.0.1 (a ThreadingHTTPServer in a daemon thread)."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.requests: list[Request] = []
        self.repos: dict[str, Repo] = {}
        self.commits: list[dict] = []
        self.fail: dict[str, tuple[int, str]] = {}
        self.lock = threading.Lock()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 10  # a stalled client never blocks a server thread for long

            def do_GET(self) -> None:  # noqa: N802
                hub._handle(self)

            do_POST = do_PUT = do_HEAD = do_DELETE = do_GET  # noqa: N815

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def routed(self, route: str) -> list[Request]:
        """The recorded requests that hit ``route``."""
        return [r for r in self.requests if r.route == route]

    # -- request handling -------------------------------------------------------------------------

    @staticmethod
    def _body(h: http.server.BaseHTTPRequestHandler) -> bytes:
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    h.rfile.readline()
                    return out
                out += h.rfile.read(size)
                h.rfile.readline()
        return h.rfile.read(int(h.headers.get("Content-Length") or 0))

    def _handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        req = Request(h.command, unquote(url.path), url.query,
                      {k.lower(): v for k, v in h.headers.items()}, self._body(h))
        match = None
        for method, name, pattern in ROUTES:
            match = pattern.fullmatch(req.path) if method == h.command else None
            if match:
                req.route = name
                break
        with self.lock:
            self.requests.append(req)
            if self.token and req.headers.get("authorization") != f"Bearer {self.token}":
                status, answer = 401, {"error": "Invalid credentials in Authorization header"}
            elif req.route in self.fail:
                status, message = self.fail[req.route]
                answer = {"error": message}
            elif match is None:
                status, answer = 404, {"error": f"fake hub: no route for {h.command} {req.path}"}
            else:
                status, answer = getattr(self, "_" + req.route)(req, match.groupdict())
        self._send(h, status, answer)

    @staticmethod
    def _send(h: http.server.BaseHTTPRequestHandler, status: int, answer: dict) -> None:
        body = json.dumps(answer).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _create(self, req: Request, _: dict) -> tuple[int, dict]:
        payload = req.json()
        repo_id = f"{payload['organization']}/{payload['name']}"
        url = {"url": f"{self.endpoint}/{repo_id}"}
        if repo_id in self.repos:
            return 409, {"error": "You already created this model repo", **url}
        self.repos[repo_id] = Repo(private=payload.get("visibility") == "private")
        return 200, url

    def _validate(self, req: Request, _: dict) -> tuple[int, dict]:
        return 200, {"errors": [], "warnings": []}

    def _branch(self, req: Request, m: dict) -> tuple[int, dict]:
        repo = self.repos.get(m["repo"])
        if repo is None:
            return 404, {"error": "Repository not found"}
        if m["rev"] in repo.branches:
            return 409, {"error": "Reference already exists"}
        repo.branches.add(m["rev"])
        return 200, {}

    def _preupload(self, req: Request, m: dict) -> tuple[int, dict]:
        if m["repo"] not in self.repos:
            return 404, {"error": "Repository not found"}
        files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                 for f in req.json()["files"]]
        return 200, {"files": files, "commitOid": self.repos[m["repo"]].sha}

    def _commit(self, req: Request, m: dict) -> tuple[int, dict]:
        repo = self.repos.get(m["repo"])
        if repo is None:
            return 404, {"error": "Repository not found"}
        if m["rev"] not in repo.branches:
            return 404, {"error": f"Invalid rev id: {m['rev']}"}
        files = {}
        for line in req.ndjson():
            if line["key"] == "file":
                files[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
        repo.files.update(files)
        repo.sha = hashlib.sha1(req.body).hexdigest()
        self.commits.append({"repo_id": m["repo"], "revision": m["rev"], "files": files})
        return 200, {"success": True, "commitOid": repo.sha,
                     "commitUrl": f"{self.endpoint}/{m['repo']}/commit/{repo.sha}"}

    def _info(self, req: Request, m: dict) -> tuple[int, dict]:
        repo = self.repos.get(m["repo"])
        if repo is None:
            return 404, {"error": "Repository not found"}
        return 200, {"id": m["repo"], "modelId": m["repo"], "sha": repo.sha, "private": repo.private,
                     "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
