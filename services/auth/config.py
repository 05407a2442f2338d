"""Auth service settings (environment variables with the ENGRAM_ prefix)."""

from kit.config import CommonSettings


class AuthSettings(CommonSettings):
    auth_schema: str = "auth"
