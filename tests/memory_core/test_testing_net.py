"""``memory_core.testing.net.free_port``: ports outside the kernel's ephemeral range."""

from __future__ import annotations

import errno
import socket

import pytest

from memory_core.testing import net


def test_free_ports_are_below_the_ephemeral_range_bindable_and_never_repeated():
    first, _ = net.ephemeral_ports()
    ports = [net.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(net.LOWEST_PORT <= p <= min(net.HIGHEST_PORT, first - 1) for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free: a service can bind it


def test_a_port_in_use_is_never_handed_out(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        picks = iter([taken, taken])
        real = net._random.randint
        monkeypatch.setattr(net._random, "randint", lambda a, b: next(picks, None) or real(a, b))
        monkeypatch.setattr(net, "LOWEST_PORT", min(taken, 20000))
        monkeypatch.setattr(net, "HIGHEST_PORT", max(taken, 29999))
        monkeypatch.setattr(net, "ephemeral_ports", lambda: (65000, 65535))
        assert net.free_port() != taken


def test_the_ephemeral_range_is_read_from_the_kernel_or_defaults(tmp_path):
    path = tmp_path / "range"
    path.write_text("40000\t50000\n")
    assert net.ephemeral_ports(str(path)) == (40000, 50000)
    assert net.ephemeral_ports(str(tmp_path / "missing")) == (32768, 60999)


def test_without_room_below_the_range_the_kernel_picks(monkeypatch):
    monkeypatch.setattr(net, "ephemeral_ports", lambda: (net.LOWEST_PORT + 10, 60999))
    port = net.free_port()
    assert 0 < port < 65536


class _Refusing:
    """A ``socket`` module stand-in whose sockets refuse every bind with ``error``."""

    def __init__(self, error: int):
        self.error = error

    def socket(self):
        error = self.error

        class Refused:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def bind(self, address):
                raise OSError(error, "refused")

        return Refused()


def test_no_free_port_raises(monkeypatch):
    monkeypatch.setattr(net, "ephemeral_ports", lambda: (32768, 60999))  # room for the random picks
    monkeypatch.setattr(net, "socket", _Refusing(errno.EADDRINUSE))
    with pytest.raises(OSError, match="no free port"):
        net.free_port(attempts=5)


def test_a_bind_refused_for_another_reason_is_raised_not_retried(monkeypatch):
    monkeypatch.setattr(net, "ephemeral_ports", lambda: (32768, 60999))
    monkeypatch.setattr(net, "socket", _Refusing(errno.EACCES))
    with pytest.raises(OSError) as raised:
        net.free_port(attempts=5)
    assert raised.value.errno == errno.EACCES
