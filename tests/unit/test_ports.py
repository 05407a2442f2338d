"""pick_port / port_is_free: the preferred port when free, another one when something holds it."""

from __future__ import annotations

import socket

import pytest

from deploy.embedded.ports import pick_port, port_is_free

pytestmark = pytest.mark.unit


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_preferred_port_is_returned_when_free() -> None:
    port = _free_port()
    assert port_is_free(port)
    assert pick_port(port) == port


def test_another_port_is_returned_when_a_listener_holds_the_preferred_one() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        taken = int(holder.getsockname()[1])
        assert not port_is_free(taken)
        other = pick_port(taken)
        assert other != taken
        assert port_is_free(other)


def test_a_merely_bound_socket_also_takes_the_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        taken = int(holder.getsockname()[1])
        assert not port_is_free(taken)
        assert pick_port(taken) != taken


def test_a_listener_on_the_wildcard_address_takes_the_loopback_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        taken = int(holder.getsockname()[1])
        assert not port_is_free(taken, "127.0.0.1")
        assert pick_port(taken, "127.0.0.1") != taken


@pytest.mark.parametrize("preferred", [None, 0])
def test_no_preference_asks_the_os(preferred: int | None) -> None:
    port = pick_port(preferred)
    assert 0 < port < 65536
    assert port_is_free(port)


def test_out_of_range_ports_are_not_free() -> None:
    assert not port_is_free(0)
    assert not port_is_free(70000)
    assert pick_port(70000) != 70000
