"""Credentials kept out of what others read: claim conditions, Events, logs, error messages.

A ``Redactor`` knows the secrets of one configuration (the user and password of a URL, its query
values, header values) and replaces every occurrence of them in a text with ``***``; the URL
itself is shown with those parts replaced. Every message built from a configured URL, a
library's error about it, or a server's answer goes through the same redactor before it leaves.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

MASK = "***"
# Shorter pieces (a one-letter user name) would turn every message into asterisks; the URL's own
# structure still hides them where it is shown.
MIN_SECRET = 3


def redact_url(url: str) -> str:
    """``url`` with its user, password and query values replaced by ``***``; the scheme, host,
    port and path stay, so the message still says where."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # not a URL at all (a bad port, a broken IPv6 address): nothing of it is shown
        return MASK
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{MASK}@{netloc}"
    query = "&".join(f"{quote(k, safe='')}={MASK}" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that must not be shown anywhere: the userinfo and password (as written
    and decoded, and as the Basic credentials a client sends), query values."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return [url]
    found = [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
    if user is not None or password is not None:
        userinfo = parts.netloc.rpartition("@")[0]
        # Not the user name alone: it is no secret, and a common word ("attach", "admin") would
        # be masked in every message. Where the URL is shown, its whole userinfo is masked.
        found += [userinfo, unquote(userinfo), password or "", unquote(password or "")]
        basic = f"{unquote(user or '')}:{unquote(password or '')}"
        found.append(base64.b64encode(basic.encode()).decode())
    return found


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """Every header value, and each word after the first (``Bearer TOKEN``: the token alone)."""
    found = []
    for value in headers.values():
        found.append(value)
        found += value.split()[1:]
    return found


@dataclass(frozen=True)
class Redactor:
    """Replaces the known secrets in any text; ``url`` is the configured URL as it may be shown."""

    url: str = ""
    secrets: tuple[str, ...] = ()
    raw_url: str = ""

    @classmethod
    def of(cls, url: str = "", headers: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> Redactor:
        found = {s for s in (*url_secrets(url), *header_secrets(headers or {}), *extra) if len(s) >= MIN_SECRET}
        # Longest first: a password that contains another secret is replaced whole.
        return cls(redact_url(url) if url else "", tuple(sorted(found, key=len, reverse=True)), url)

    def __call__(self, text: object) -> str:
        text = str(text)
        if self.raw_url and self.raw_url != self.url:
            text = text.replace(self.raw_url, self.url)
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text
