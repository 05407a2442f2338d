"""The browser pages of the authorization server: sign in, consent and (when enabled) sign up.

Small server-rendered forms. CSRF: a double-submit cookie (``engram_csrf``, HttpOnly,
SameSite=Lax) whose value each form repeats, compared in constant time, plus an Origin check.
Sign-in failures are counted per (username, address), per address and per account (whatever the
address), with exponential back-off. ``/logout`` (POST, CSRF-checked) ends the sign-in session
server-side.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.provider import construct_redirect_uri
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from contracts.auth import USERNAME_PATTERN
from contracts.envelope import utcnow
from services.auth.adapters.oauth_store import OAuthStore
from services.auth.domain import keys, passwords
from services.auth.domain import oauth as rules
from services.auth.oauth.logsafe import LogSafeFilter

log = logging.getLogger("engram.auth.pages")
log.addFilter(LogSafeFilter())
SESSION_COOKIE = "engram_session"
CSRF_COOKIE = "engram_csrf"
REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{40,60}$")
USERNAME = re.compile(USERNAME_PATTERN)
SCOPE_TEXT = {
    "memory:read": "Read your memories, projects and profile",
    "memory:write": "Save, update and forget memories",
    "memory:maintenance": "Run maintenance on your memories",
    "keys:manage": "Create, list and revoke your own API keys",
}
NO_STORE = {
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
    # not no-referrer: under it a browser posts the page's own forms with `Origin: null`, which the
    # CSRF check (domain.oauth.origin_ok) must refuse; same-origin sends our origin to ourselves only
    "Referrer-Policy": "same-origin",
}

STYLE = """
body{font-family:system-ui,sans-serif;background:#f5f5f7;margin:0;display:flex;justify-content:center}
main{background:#fff;margin:8vh 1rem;padding:2rem;border-radius:12px;max-width:26rem;width:100%;
box-shadow:0 2px 12px rgba(0,0,0,.08)}
h1{font-size:1.3rem;margin-top:0}label{display:block;margin:.8rem 0 .2rem;font-size:.9rem}
input[type=text],input[type=password]{width:100%;padding:.55rem;box-sizing:border-box;border:1px solid #ccc;
border-radius:6px}button{margin-top:1.2rem;padding:.6rem 1.2rem;border:0;border-radius:6px;font-size:1rem;
cursor:pointer;background:#2d5bd7;color:#fff}button.secondary{background:#e4e4e8;color:#222;margin-left:.5rem}
.error{color:#b00020}.muted{color:#666;font-size:.85rem}ul{padding-left:1.2rem}code{word-break:break-all}
"""


def _page(title: str, body: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    doc = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} · Engram</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{STYLE}</style></head>'
        f"<body><main>{body}</main></body></html>"
    )
    return HTMLResponse(doc, status_code=status, headers={**NO_STORE, **(headers or {})})


def too_many_requests_page(retry_after: str, headers: dict[str, str]) -> HTMLResponse:
    return _page("Too many requests", f"<h1>Too many requests</h1><p>Try again in {html.escape(retry_after)} seconds.</p>",
                 status=429, headers=headers)


def _hidden(**fields: str) -> str:
    return "".join(f'<input type="hidden" name="{k}" value="{html.escape(v)}">' for k, v in fields.items())


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


class Pages:
    def __init__(self, store: OAuthStore, *, issuer: str, allow_signup: bool) -> None:
        self.store = store
        self.issuer = issuer.rstrip("/")
        self.allow_signup = allow_signup
        self.secure = urlsplit(self.issuer).scheme == "https"

    # helpers -------------------------------------------------------------------------------
    def _csrf(self, request: Request) -> tuple[str, bool]:
        """The browser's CSRF value, and whether it is new (to be set as a cookie)."""
        current = request.cookies.get(CSRF_COOKIE, "")
        if len(current) >= 32 and len(current) <= 100:
            return current, False
        return rules.new_secret(), True

    def _cookie(self, response: Response, name: str, value: str, max_age: int | None = None) -> None:
        response.set_cookie(name, value, max_age=max_age, httponly=True, secure=self.secure, samesite="lax", path="/")

    def _respond(self, response: Response, csrf: str, new: bool) -> Response:
        if new:
            self._cookie(response, CSRF_COOKIE, csrf)
        return response

    def _form_checks(self, request: Request, form: Any) -> bool:
        return rules.origin_ok(request.headers.get("origin"), self.issuer) and rules.csrf_ok(
            _field(form, "csrf"), request.cookies.get(CSRF_COOKIE)
        )

    async def session_user(self, request: Request) -> str | None:
        """The user signed in with this browser (its session cookie), if any."""
        return await self._session_user(request)

    async def _session_user(self, request: Request) -> str | None:
        sid = request.cookies.get(SESSION_COOKIE)
        if not sid or len(sid) > 100:
            return None
        return await self.store.session_user(rules.hash_secret(sid))

    async def _start_session(self, response: Response, user_id: str) -> None:
        sid = rules.new_secret()
        await self.store.create_session(rules.hash_secret(sid), user_id, utcnow() + rules.SESSION_TTL)
        self._cookie(response, SESSION_COOKIE, sid, max_age=int(rules.SESSION_TTL.total_seconds()))

    def _request_id(self, source: Any) -> str | None:
        value = source.get("request")
        return value if isinstance(value, str) and REQUEST_ID.match(value) else None

    def _expired(self) -> HTMLResponse:
        return _page(
            "Link expired",
            "<h1>This sign-in link has expired</h1><p>Go back to your application and connect again.</p>",
            status=400,
        )

    def _after_login(self, request_id: str | None) -> Response:
        if request_id:
            return RedirectResponse(f"{self.issuer}/consent?request={request_id}", status_code=303, headers=NO_STORE)
        return _page("Signed in", "<h1>Signed in</h1><p>You can close this window.</p>")

    # sign in -------------------------------------------------------------------------------
    def _login_form(self, request_id: str | None, csrf: str, error: str = "", username: str = "",
                    status: int = 200) -> HTMLResponse:
        signup = (
            f'<p class="muted">No account? <a href="{self.issuer}/signup?request={html.escape(request_id or "")}">'
            "Create one</a>.</p>"
            if self.allow_signup else ""
        )
        body = (
            "<h1>Sign in to Engram</h1>"
            + (f'<p class="error" role="alert">{html.escape(error)}</p>' if error else "")
            + f'<form method="post" action="{self.issuer}/login">'
            + _hidden(csrf=csrf, request=request_id or "")
            + '<label for="username">Username</label>'
            + f'<input id="username" name="username" type="text" autocomplete="username" required '
            f'value="{html.escape(username)}" autofocus>'
            + '<label for="password">Password</label>'
            + '<input id="password" name="password" type="password" autocomplete="current-password" required>'
            + '<button type="submit">Sign in</button></form>'
            + signup
        )
        return _page("Sign in", body, status=status)

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            request_id = self._request_id(request.query_params)
            if request_id and await self.store.get_request(request_id) is None:
                return self._expired()
            if request_id and await self._session_user(request):
                return self._after_login(request_id)
            csrf, new = self._csrf(request)
            return self._respond(self._login_form(request_id, csrf), csrf, new)

        form = await request.form()
        request_id = self._request_id(form)
        csrf, new = self._csrf(request)
        if not self._form_checks(request, form):
            log.warning("sign-in refused: CSRF check failed")
            return self._respond(self._login_form(request_id, csrf, "Your session expired; please try again.",
                                                  status=403), csrf, new)
        username, password = _field(form, "username").strip(), _field(form, "password")
        address = rules.client_address(request.client.host if request.client else None)
        if not USERNAME.match(username) or not password:
            return self._respond(self._login_form(request_id, csrf, "Wrong username or password.", status=401),
                                 csrf, new)
        counters = rules.sign_in_counters(username, address)
        locked = await self.store.locked_until(tuple(key for key, _ in counters))
        if locked is not None:
            wait = max(1, int((locked - datetime.now(UTC)).total_seconds()))
            log.warning("sign-in throttled for a user from %s (%ss left)", address, wait)
            response = self._login_form(request_id, csrf, f"Too many failed attempts. Try again in {wait} seconds.",
                                        username, status=429)
            response.headers["Retry-After"] = str(wait)
            return self._respond(response, csrf, new)
        user = await self.store.login_user(username)
        ok = await asyncio.to_thread(passwords.verify_password, password, user.password_hash if user else None)
        if not ok or user is None or user.disabled:
            await self._count_failure(counters)
            log.warning("sign-in failed from %s", address)
            return self._respond(self._login_form(request_id, csrf, "Wrong username or password.", username,
                                                  status=401), csrf, new)
        await self.store.clear_failures(counters[0][0])  # the account's counter runs out with its window
        if user.password_hash and passwords.needs_rehash(user.password_hash):
            await self.store.set_password_hash(user.user_id, await asyncio.to_thread(passwords.hash_password, password))
        log.info("user %s signed in from %s", user.user_id, address)
        response = self._after_login(request_id)
        await self._start_session(response, user.user_id)
        return self._respond(response, csrf, new)

    async def _count_failure(self, counters: list[tuple[str, int]]) -> None:
        for key, free in counters:
            failures = await self.store.record_failure(key, rules.FAILURE_WINDOW)
            wait = rules.lockout_after(failures, free)
            if wait:
                await self.store.lock(key, utcnow() + wait)

    def authorization_error(self, error: str, description: str) -> HTMLResponse:
        """What the browser sees instead of being sent to an unvetted client's redirect URI with an
        error (RFC 9700 §4.11.2: no open redirect through an attacker-registered client)."""
        body = (
            "<h1>This sign-in request cannot be completed</h1>"
            f"<p>The application's request was refused: <code>{html.escape(error)}</code></p>"
            + (f'<p class="muted">{html.escape(description)}</p>' if description else "")
            + "<p>Go back to your application and connect again. If this keeps happening, tell the "
            "application's developer.</p>"
        )
        return _page("Request refused", body, status=400)

    # sign out -------------------------------------------------------------------------------
    def _logout_form(self, csrf: str, request_id: str | None = None, label: str = "Sign out") -> str:
        return (f'<form method="post" action="{self.issuer}/logout">' + _hidden(csrf=csrf, request=request_id or "")
                + f'<button type="submit" class="secondary">{html.escape(label)}</button></form>')

    async def logout(self, request: Request) -> Response:
        """GET: a page with the sign-out button. POST (CSRF and Origin checked): the session is
        deleted server-side and its cookie cleared; with ``request`` the browser goes back to the
        sign-in page of that pending authorization ("Not you?" on the consent page)."""
        csrf, new = self._csrf(request)
        if request.method == "GET":
            if await self._session_user(request) is None:
                return self._respond(_page("Signed out", "<h1>You are not signed in</h1>"), csrf, new)
            body = "<h1>Sign out of Engram</h1><p>This ends your sign-in on this browser.</p>" + self._logout_form(csrf)
            return self._respond(_page("Sign out", body), csrf, new)
        form = await request.form()
        if not self._form_checks(request, form):
            log.warning("sign-out refused: CSRF check failed")
            return self._respond(_page("Try again", "<h1>Your session expired</h1><p>Go back and try again.</p>",
                                       status=403), csrf, new)
        sid = request.cookies.get(SESSION_COOKIE)
        if sid and len(sid) <= 100 and await self.store.end_session(rules.hash_secret(sid)):
            log.info("a sign-in session ended (sign-out)")
        request_id = self._request_id(form)
        if request_id:
            response: Response = RedirectResponse(f"{self.issuer}/login?request={request_id}", status_code=303,
                                                  headers=NO_STORE)
        else:
            response = _page("Signed out", "<h1>Signed out</h1><p>You can close this window.</p>")
        response.delete_cookie(SESSION_COOKIE, path="/", secure=self.secure, httponly=True, samesite="lax")
        return self._respond(response, csrf, new)

    # sign up (ENGRAM_ALLOW_SIGNUP=true) ----------------------------------------------------
    def _signup_form(self, request_id: str | None, csrf: str, error: str = "", username: str = "",
                     status: int = 200) -> HTMLResponse:
        body = (
            "<h1>Create an Engram account</h1>"
            + (f'<p class="error" role="alert">{html.escape(error)}</p>' if error else "")
            + f'<form method="post" action="{self.issuer}/signup">'
            + _hidden(csrf=csrf, request=request_id or "")
            + '<label for="username">Username</label>'
            + f'<input id="username" name="username" type="text" autocomplete="username" required '
            f'value="{html.escape(username)}">'
            + f'<label for="password">Password (at least {passwords.MIN_PASSWORD_CHARS} characters)</label>'
            + '<input id="password" name="password" type="password" autocomplete="new-password" required>'
            + '<label for="password2">Password again</label>'
            + '<input id="password2" name="password2" type="password" autocomplete="new-password" required>'
            + '<button type="submit">Create account</button></form>'
        )
        return _page("Sign up", body, status=status)

    async def signup(self, request: Request) -> Response:
        if not self.allow_signup:
            return _page("Not found", "<h1>Sign-up is disabled</h1><p>Ask your administrator for an account.</p>",
                         status=404)
        csrf, new = self._csrf(request)
        if request.method == "GET":
            return self._respond(self._signup_form(self._request_id(request.query_params), csrf), csrf, new)
        form = await request.form()
        request_id = self._request_id(form)
        if not self._form_checks(request, form):
            return self._respond(self._signup_form(request_id, csrf, "Your session expired; please try again.",
                                                   status=403), csrf, new)
        username, password = _field(form, "username").strip(), _field(form, "password")
        if not USERNAME.match(username):
            error = "Usernames are 1-128 letters, digits and _ . @ + - (starting with a letter or digit)."
            return self._respond(self._signup_form(request_id, csrf, error, status=400), csrf, new)
        if password != _field(form, "password2"):
            return self._respond(self._signup_form(request_id, csrf, "The passwords differ.", username, 400),
                                 csrf, new)
        try:
            password_hash = await asyncio.to_thread(passwords.hash_password, password)
        except passwords.WeakPassword as exc:
            return self._respond(self._signup_form(request_id, csrf, str(exc).capitalize() + ".", username, 400),
                                 csrf, new)
        user_id = keys.new_user_id()
        created = await self.store.create_login(user_id=user_id, username=username, password_hash=password_hash,
                                                display_name=None, existing=False)
        if created is None:
            return self._respond(self._signup_form(request_id, csrf, "That username is taken.", status=409),
                                 csrf, new)
        log.info("user %s signed up", user_id)
        response = self._after_login(request_id)
        await self._start_session(response, user_id)
        return self._respond(response, csrf, new)

    # consent -------------------------------------------------------------------------------
    async def consent(self, request: Request) -> Response:
        source = request.query_params if request.method == "GET" else await request.form()
        request_id = self._request_id(source)
        if request_id is None:
            return self._expired()
        user_id = await self._session_user(request)
        if user_id is None:
            return RedirectResponse(f"{self.issuer}/login?request={request_id}", status_code=303, headers=NO_STORE)
        csrf, new = self._csrf(request)
        if request.method == "GET":
            pending = await self.store.get_request(request_id)
            if pending is None:
                return self._expired()
            user = await self.store.get_user(user_id)
            return self._respond(self._consent_form(pending, request_id, csrf, user.username if user else user_id),
                                 csrf, new)

        if not self._form_checks(request, source):
            log.warning("consent refused: CSRF check failed")
            return self._respond(_page("Try again", "<h1>Your session expired</h1><p>Go back and try again.</p>",
                                       status=403), csrf, new)
        pending = await self.store.complete_request(request_id)
        if pending is None:
            return self._expired()
        params: dict[str, str | None] = {"state": pending["state"], "iss": self.issuer}
        if _field(source, "decision") != "approve":
            log.info("user %s denied client %s", user_id, pending["client_id"])
            location = construct_redirect_uri(pending["redirect_uri"], error="access_denied",
                                              error_description="the user denied the request", **params)
            return RedirectResponse(location, status_code=303, headers=NO_STORE)
        code = rules.new_code()
        await self.store.create_code(code_hash=rules.hash_secret(code), request=pending, user_id=user_id,
                                     expires_at=utcnow() + rules.CODE_TTL)
        log.info("user %s approved client %s (%s)", user_id, pending["client_id"], " ".join(pending["scopes"]))
        location = construct_redirect_uri(pending["redirect_uri"], code=code, **params)
        return RedirectResponse(location, status_code=303, headers=NO_STORE)

    def _consent_form(self, pending: Any, request_id: str, csrf: str, who: str) -> HTMLResponse:
        metadata = json.loads(pending["metadata"]) if isinstance(pending["metadata"], str) else pending["metadata"]
        client_name = metadata.get("client_name") or "An unnamed application"
        redirect = urlsplit(pending["redirect_uri"])
        destination = f"{redirect.scheme}://{redirect.netloc}" if redirect.netloc else f"{redirect.scheme}:"
        scopes = "".join(
            f"<li><strong>{html.escape(SCOPE_TEXT.get(s, s))}</strong> <span class=muted>({html.escape(s)})</span></li>"
            for s in pending["scopes"]
        )
        body = (
            f"<h1>Allow {html.escape(client_name)} to use your memory?</h1>"
            f"<p>Signed in as <strong>{html.escape(who)}</strong>.</p>"
            f"<p>{html.escape(client_name)} asks to:</p><ul>{scopes}</ul>"
            f'<p class="muted">Access to <code>{html.escape(pending["resource"])}</code>. You will be sent back to '
            f"<code>{html.escape(destination)}</code>. This application registered itself; only allow it if you "
            "started this connection.</p>"
            f'<form method="post" action="{self.issuer}/consent">'
            + _hidden(csrf=csrf, request=request_id)
            + '<button type="submit" name="decision" value="approve">Allow</button>'
            + '<button type="submit" name="decision" value="deny" class="secondary">Deny</button></form>'
            + f'<p class="muted">Not {html.escape(who)}?</p>' + self._logout_form(csrf, request_id, "Sign out")
        )
        return _page("Allow access", body)
