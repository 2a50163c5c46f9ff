"""Encryption of stored credentials (kubeconfigs, tokens) with the BERTH_CREDENTIALS_KEY."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def fernet() -> Fernet:
    key = settings.CREDENTIALS_KEY or settings.SECRET_KEY
    try:
        return Fernet(key)
    except ValueError:
        # Any passphrase works: derive a proper 32-byte key from it.
        derived = hashlib.sha256(key.encode()).digest()
        return Fernet(base64.urlsafe_b64encode(derived))


def encrypt(plain: str) -> str:
    return fernet().encrypt(plain.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ImproperlyConfigured(
            "A stored credential cannot be decrypted: BERTH_CREDENTIALS_KEY is not the key "
            "it was saved with."
        ) from None
