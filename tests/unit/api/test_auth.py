"""The pure parts of API authentication: reading the bearer token, comparing it, the settings' rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.api.auth import (
    PLAINTEXT_SERVER,
    ClientSecurity,
    ServerSecurity,
    TokenAuthInterceptor,
    bearer_token,
    token_accepted,
)
from kernelfoundry.config import load_settings


def test_the_bearer_token_is_read_from_the_authorization_metadata() -> None:
    assert bearer_token([("x-other", "1"), ("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("Authorization", b"bearer  abc ")]) == "abc"


@pytest.mark.parametrize(
    "metadata",
    [None, [], [("authorization", "Basic abc")], [("authorization", "Bearer ")], [("x-token", "abc")]],
)
def test_no_bearer_token(metadata: list[tuple[str, str]] | None) -> None:
    assert bearer_token(metadata) is None


def test_only_the_configured_token_is_accepted() -> None:
    assert token_accepted([("authorization", "Bearer abc")], "abc")
    assert not token_accepted([("authorization", "Bearer abd")], "abc")
    assert not token_accepted([("authorization", "Bearer abc")], "")
    assert not token_accepted(None, "abc")


def test_no_settings_mean_plaintext_without_a_token() -> None:
    settings = load_settings(api_token="", api_tls_cert="", api_tls_key="", api_tls_ca="", api_tls=False)
    assert ServerSecurity.from_settings(settings) == PLAINTEXT_SERVER
    assert PLAINTEXT_SERVER.interceptors() == []
    client = ClientSecurity.from_settings(settings)
    assert not client.tls and client.token == ""


def test_a_certificate_needs_its_key(tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    cert.write_text("not read before the pair is checked")
    with pytest.raises(ValueError, match="together"):
        ServerSecurity.from_settings(load_settings(api_tls_cert=str(cert), api_tls_key=""))


def test_a_missing_certificate_file_names_the_setting_and_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "absent.crt"
    with pytest.raises(ValueError, match=r"TLS certificate .*absent\.crt"):
        ServerSecurity.from_settings(load_settings(api_tls_cert=str(missing), api_tls_key=str(missing)))


def test_the_token_is_not_shown_in_the_settings() -> None:
    settings = load_settings(api_token="hunter2-token")
    assert "hunter2-token" not in repr(settings)
    assert ClientSecurity.from_settings(settings).token == "hunter2-token"


def test_an_interceptor_without_a_token_is_refused() -> None:
    with pytest.raises(ValueError):
        TokenAuthInterceptor("")


def test_system_roots_when_tls_is_asked_for_without_a_ca() -> None:
    client = ClientSecurity.from_settings(load_settings(api_tls=True, api_tls_ca=""))
    assert client.tls and client.root_certificates is None
