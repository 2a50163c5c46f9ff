"""An OpenID Connect provider for the single sign-on tests: a real HTTP server speaking the
authorization code flow (with PKCE) as providers do: discovery, JWKS, a login form, a token
endpoint issuing RS256-signed ID tokens, and userinfo.

    python tests/oidc_provider.py STATE.json PORT

STATE.json is read at every request, so a test changes a person's groups between logins, or
makes the next ID token name another audience (`id_token.aud`) or come from a clock that is off
(`id_token.clock_offset_s`, e.g. -3600: expired an hour ago):

    {"clients": {"berth": {"secret": "…", "redirect_uris": ["http://…/login/sso/callback/"]}},
     "people": {"ada": {"password": "…", "sub": "a-1", "email": "ada@example.com",
                        "groups": ["ml-ops"]}},
     "id_token": {"aud": null, "clock_offset_s": 0}}
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KID = "berth-tests-1"
CODES: dict[str, dict] = {}  # one-time codes → what the token endpoint answers for them
TOKENS: dict[str, dict] = {}  # access tokens → the person's claims
LOCK = threading.Lock()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def number(value: int) -> str:
    return b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def signed(claims: dict) -> str:
    head = b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": KID}).encode())
    body = b64(json.dumps(claims).encode())
    signature = KEY.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{head}.{body}.{b64(signature)}"


class Provider(BaseHTTPRequestHandler):
    state_file: Path
    issuer: str

    def log_message(self, *args: object) -> None:
        pass

    def state(self) -> dict:
        return json.loads(self.state_file.read_text())

    def reply(self, status: int, body: object, kind: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        fields = parse_qs(self.rfile.read(length).decode())
        return {name: values[0] for name, values in fields.items()}

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        if url.path == "/.well-known/openid-configuration":
            self.reply(200, {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "userinfo_endpoint": f"{self.issuer}/userinfo",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
            })  # fmt: skip
        elif url.path == "/jwks":
            public = KEY.public_key().public_numbers()
            key = {"kty": "RSA", "kid": KID, "use": "sig", "alg": "RS256",
                   "n": number(public.n), "e": number(public.e)}  # fmt: skip
            self.reply(200, {"keys": [key]})
        elif url.path == "/authorize":
            self.authorize_form(query)
        elif url.path == "/userinfo":
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            with LOCK:
                claims = TOKENS.get(token)
            self.reply(200, claims) if claims else self.reply(401, {"error": "invalid_token"})
        else:
            self.reply(404, {"error": "not_found"})

    def known_client(self, query: dict[str, str]) -> str:
        """What is wrong with the request's client and redirect, if anything."""
        client = self.state()["clients"].get(query.get("client_id", ""))
        if client is None:
            return f"unknown client {query.get('client_id')!r}"
        if query.get("redirect_uri") not in client["redirect_uris"]:
            return f"redirect_uri {query.get('redirect_uri')!r} is not registered"
        return ""

    def authorize_form(self, query: dict[str, str]) -> None:
        wrong = self.known_client(query)
        if wrong:
            self.reply(400, f"<p>{html.escape(wrong)}</p>", "text/html")
            return
        hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                         for k, v in query.items())  # fmt: skip
        page = f"""<!doctype html><title>Test provider</title><form method="post" action="/authorize">
            {hidden}<label>User <input name="login" id="login"></label>
            <label>Password <input name="secret" id="secret" type="password"></label>
            <button type="submit" id="sign-in">Sign in</button></form>"""
        self.reply(200, page, "text/html")

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path == "/authorize":
            self.authorized(self.form())
        elif path == "/token":
            self.token(self.form())
        else:
            self.reply(404, {"error": "not_found"})

    def authorized(self, fields: dict[str, str]) -> None:
        person = self.state()["people"].get(fields.get("login", ""))
        if self.known_client(fields) or not person or person["password"] != fields.get("secret"):
            self.reply(401, "<p>Wrong user or password.</p>", "text/html")
            return
        code = secrets.token_urlsafe(16)
        with LOCK:
            CODES[code] = {"person": fields["login"], **fields}
        target = f"{fields['redirect_uri']}?{urlencode({'code': code, 'state': fields['state']})}"
        self.send_response(302)
        self.send_header("Location", target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def token(self, fields: dict[str, str]) -> None:
        state = self.state()
        with LOCK:
            asked = CODES.pop(fields.get("code", ""), None)
        client = state["clients"].get(fields.get("client_id", ""))
        if asked is None or client is None or client["secret"] != fields.get("client_secret"):
            self.reply(400, {"error": "invalid_grant"})
            return
        verifier = fields.get("code_verifier", "")
        if b64(hashlib.sha256(verifier.encode()).digest()) != asked.get("code_challenge"):
            self.reply(400, {"error": "invalid_grant", "error_description": "PKCE failed"})
            return
        person = state["people"][asked["person"]]
        odd = state.get("id_token", {})
        now = int(time.time()) + int(odd.get("clock_offset_s") or 0)
        claims = {"iss": self.issuer, "sub": person["sub"], "aud": odd.get("aud") or asked["client_id"],
                  "iat": now, "exp": now + 300, "nonce": asked.get("nonce")}  # fmt: skip
        access = secrets.token_urlsafe(24)
        with LOCK:
            TOKENS[access] = {"sub": person["sub"], "preferred_username": asked["person"],
                              "email": person["email"], "groups": person["groups"]}  # fmt: skip
        self.reply(200, {"access_token": access, "token_type": "Bearer", "expires_in": 300,
                         "id_token": signed(claims)})  # fmt: skip


def main() -> None:
    state_file, port = Path(sys.argv[1]), int(sys.argv[2])
    Provider.state_file = state_file
    Provider.issuer = f"http://127.0.0.1:{port}"
    server = ThreadingHTTPServer(("127.0.0.1", port), Provider)
    print(f"listening on {Provider.issuer}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
