"""An emulated Hugging Face hub: a real HTTP server on 127.0.0.1 that huggingface_hub talks to.

It answers what huggingface_hub 1.x calls, with the headers its source reads
(hf_api.model_info and list_repo_tree, file_download.get_hf_file_metadata and http_get,
utils/_http.hf_raise_for_status):

- GET /api/models/{repo} and /api/models/{repo}/revision/{rev}: model info (sha, gated,
  siblings, cardData, safetensors);
- GET /api/models/{repo}/tree/{rev}: the file list with sizes and LFS pointers;
- HEAD and GET /{repo}/resolve/{rev}/{path}: the file, with ETag, X-Repo-Commit,
  Content-Length, Accept-Ranges and Range (206 + Content-Range);
- errors as the hub gives them: 404 with X-Error-Code RepoNotFound, RevisionNotFound or
  EntryNotFound; a gated repository's files answer 401 (no token) or 403 (a token without
  access) with X-Error-Code GatedRepo; an unknown token answers 401 "Invalid credentials in
  Authorization header". Model info and file lists of gated repositories are public, as on
  the hub.

Tests can slow files down (`rate`) and make the server drop the connection half-way through
a file once (`drop_once`). The request log records whether a token was sent, never the token.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")
CHUNK = 64 * 1024


def git_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


@dataclass
class Commit:
    files: dict[str, bytes]
    sha: str = ""

    def __post_init__(self) -> None:
        if not self.sha:
            digest = hashlib.sha1()
            for path in sorted(self.files):
                digest.update(path.encode() + sha256(self.files[path]).encode())
            self.sha = digest.hexdigest()

    def etag(self, path: str) -> str:
        content = self.files[path]
        return sha256(content) if path.endswith(LFS_SUFFIXES) else git_oid(content)


@dataclass
class Repo:
    repo_id: str
    commits: list[Commit]
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag → commit sha
    gated: bool = False
    allowed_tokens: set[str] = field(default_factory=set)
    card: dict[str, Any] = field(default_factory=dict)
    pipeline_tag: str = "text-generation"
    safetensors_total: int | None = None

    def __post_init__(self) -> None:
        self.refs.setdefault("main", self.commits[-1].sha)

    def resolve(self, revision: str) -> Commit | None:
        sha = self.refs.get(revision, revision)
        return next((c for c in self.commits if c.sha == sha), None)


class HubError(Exception):
    def __init__(self, status: int, code: str, message: str, commit: str = "") -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.commit = status, code, message, commit


class EmulatedHub:
    """The repositories, the knobs the tests turn, and the server that serves them."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.known_tokens: set[str] = set()
        self.rate: int | None = None  # bytes per second per file download; None: full speed
        self.drop_once: set[tuple[str, str]] = set()  # (repo, path): cut half-way, once
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def add(self, repo: Repo) -> Repo:
        self.repos[repo.repo_id] = repo
        self.known_tokens |= repo.allowed_tokens
        return repo

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> EmulatedHub:
        handler = type("Handler", (HubHandler,), {"hub": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def log(self, method: str, path: str, headers: Any) -> None:
        with self.lock:
            self.requests.append(
                {
                    "method": method,
                    "path": path,
                    "range": headers.get("Range", ""),
                    "with_token": bool(headers.get("Authorization")),
                }
            )

    def take_drop(self, repo_id: str, path: str) -> bool:
        with self.lock:
            if (repo_id, path) in self.drop_once:
                self.drop_once.discard((repo_id, path))
                return True
            return False

    # --- answers -----------------------------------------------------------------------------

    def repo(self, repo_id: str) -> Repo:
        found = self.repos.get(repo_id)
        if found is None:
            raise HubError(404, "RepoNotFound", "Repository not found")
        return found

    def commit(self, repo: Repo, revision: str) -> Commit:
        found = repo.resolve(revision)
        if found is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return found

    def check_token(self, headers: Any) -> str:
        token = (headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if token and token not in self.known_tokens:
            raise HubError(401, "", "Invalid credentials in Authorization header")
        return token

    def check_gate(self, repo: Repo, token: str) -> None:
        if not repo.gated or token in repo.allowed_tokens:
            return
        if not token:
            raise HubError(
                401,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted. You must have access to it "
                "and be authenticated to access it. Please log in.",
            )
        raise HubError(
            403,
            "GatedRepo",
            f"Access to model {repo.repo_id} is restricted and you are not in the authorized "
            f"list. Visit https://huggingface.co/{repo.repo_id} to ask for access.",
        )

    def model_info(self, repo: Repo, commit: Commit) -> dict[str, Any]:
        info: dict[str, Any] = {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "sha": commit.sha,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "pipeline_tag": repo.pipeline_tag,
            "tags": [f"license:{repo.card['license']}"] if "license" in repo.card else [],
            "cardData": repo.card,
            "siblings": [{"rfilename": path} for path in sorted(commit.files)],
            "lastModified": "2025-01-01T00:00:00.000Z",
        }
        if repo.safetensors_total:
            total = repo.safetensors_total
            info["safetensors"] = {"parameters": {"BF16": total}, "total": total}
        return info

    def tree(self, commit: Commit) -> list[dict[str, Any]]:
        entries = []
        for path in sorted(commit.files):
            content = commit.files[path]
            entry: dict[str, Any] = {
                "type": "file",
                "oid": git_oid(content),
                "size": len(content),
                "path": path,
            }
            if path.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"oid": sha256(content), "size": len(content), "pointerSize": 134}
            entries.append(entry)
        return entries


class HubHandler(BaseHTTPRequestHandler):
    hub: EmulatedHub
    protocol_version = "HTTP/1.1"  # httpx keeps connections open; every answer has a length

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test's own request log is enough

    def do_GET(self) -> None:
        self.answer(with_body=True)

    def do_HEAD(self) -> None:
        self.answer(with_body=False)

    def answer(self, with_body: bool) -> None:
        path = urlsplit(self.path).path
        self.hub.log(self.command, path, self.headers)
        try:
            self.route(path, with_body)
        except HubError as error:
            self.send_error_answer(error)

    def route(self, path: str, with_body: bool) -> None:
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            self.api(parts[2:], with_body)
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo_id = f"{parts[0]}/{parts[1]}"
            self.resolve(repo_id, unquote(parts[3]), unquote("/".join(parts[4:])), with_body)
        else:
            raise HubError(404, "", "Not found")

    def api(self, parts: list[str], with_body: bool) -> None:
        self.hub.check_token(self.headers)
        repo = self.hub.repo(f"{parts[0]}/{parts[1]}")
        rest = parts[2:]
        if not rest:
            self.send_json(self.hub.model_info(repo, self.hub.commit(repo, "main")), with_body)
        elif rest[0] == "revision" and len(rest) >= 2:
            commit = self.hub.commit(repo, unquote("/".join(rest[1:])))
            self.send_json(self.hub.model_info(repo, commit), with_body)
        elif rest[0] == "tree" and len(rest) >= 2:
            self.send_json(self.hub.tree(self.hub.commit(repo, unquote(rest[1]))), with_body)
        else:
            raise HubError(404, "", "Not found")

    def resolve(self, repo_id: str, revision: str, path: str, with_body: bool) -> None:
        token = self.hub.check_token(self.headers)
        repo = self.hub.repo(repo_id)
        self.hub.check_gate(repo, token)
        commit = self.hub.commit(repo, revision)
        if path not in commit.files:
            raise HubError(404, "EntryNotFound", f"{path} does not exist", commit.sha)
        self.send_file(repo_id, commit, path, with_body)

    def byte_range(self, size: int) -> tuple[int, int] | None:
        wanted = self.headers.get("Range", "")
        if not wanted.startswith("bytes="):
            return None
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        return int(first or 0), min(int(last) if last else size - 1, size - 1)

    def send_file(self, repo_id: str, commit: Commit, path: str, with_body: bool) -> None:
        content = commit.files[path]
        span = self.byte_range(len(content))
        start, end = span if span else (0, len(content) - 1)
        self.send_response(206 if span else 200)
        if span:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(content)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", f'"{commit.etag(path)}"')
        self.send_header("X-Repo-Commit", commit.sha)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if with_body:
            self.stream(
                content[start : end + 1], cut=not span and self.hub.take_drop(repo_id, path)
            )

    def stream(self, body: bytes, cut: bool) -> None:
        """Write the body at the hub's rate; `cut` drops the connection half-way through."""
        limit = len(body) // 2 if cut else len(body)
        for offset in range(0, limit, CHUNK):
            self.wfile.write(body[offset : min(offset + CHUNK, limit)])
            if self.hub.rate:
                time.sleep(CHUNK / self.hub.rate)
        if cut:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

    def send_json(self, data: Any, with_body: bool) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def send_error_answer(self, error: HubError) -> None:
        body = json.dumps({"error": error.message}).encode()
        self.send_response(error.status)
        if error.code:
            self.send_header("X-Error-Code", error.code)
        self.send_header("X-Error-Message", error.message)
        if error.commit:
            self.send_header("X-Repo-Commit", error.commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
