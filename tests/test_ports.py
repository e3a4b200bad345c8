"""nbtools._ports: ports chosen where the kernel never hands one out to an outgoing connection."""

from __future__ import annotations

import socket

import pytest

from nbtools import _ports
from nbtools.errors import ConflictError


def test_ports_are_outside_the_ephemeral_and_ray_worker_ranges_and_never_repeat():
    lo, hi = _ports._ephemeral()
    got = _ports.free_ports(50)
    assert len(set(got)) == 50
    assert not [p for p in got if lo <= p <= hi or p in _ports.RAY_WORKER_PORTS or p < 1024]


def test_a_held_port_is_in_use_and_never_chosen():
    with socket.socket() as held:
        held.bind(("127.0.0.1", _ports.free_port()))
        port = held.getsockname()[1]
        assert _ports.port_in_use(port)
        assert port not in _ports.free_ports(20, exclude=[port + 1])
    assert not _ports.port_in_use(port)


def test_the_ephemeral_range_is_read_from_the_kernel_when_it_says(monkeypatch, tmp_path):
    fake = tmp_path / "range"
    fake.write_text("20000\t40000\n")
    real_path = _ports.Path
    monkeypatch.setattr(_ports, "Path", lambda p: fake if p.endswith("ip_local_port_range") else real_path(p))
    assert _ports._ephemeral() == (20000, 40000)
    assert all(p > 40000 for p in _ports.free_ports(5))


class _SocketOn:
    """A socket whose bind to port 0 always gets ``port``: the OS handing one ephemeral port out again and again."""

    def __init__(self, port):
        self.port = port

    def __call__(self, *a, **k):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def setsockopt(self, *a):
        pass

    def bind(self, addr):
        if addr[1] not in (0, self.port):
            raise OSError("in use")

    def getsockname(self):
        return ("127.0.0.1", self.port)


def test_when_every_chosen_port_is_held_the_fallback_never_repeats_a_configured_or_worker_port(monkeypatch):
    """The head's own five ports must differ from ray.port, ray.dashboard_port and each other, or `ray start`
    refuses the head (seen in CI when each pick came from binding port 0)."""
    monkeypatch.setattr(_ports, "port_in_use", lambda port, host="0.0.0.0": True)
    got = _ports.free_ports(5, exclude={6379, 8265})
    assert len(set(got)) == 5 and not {6379, 8265} & set(got) and not [p for p in got if p in _ports.RAY_WORKER_PORTS]
    monkeypatch.setattr(_ports.socket, "socket", _SocketOn(8265))
    with pytest.raises(ConflictError, match=r"(?s)no free local TCP port.*fix: free some local ports"):
        _ports.free_ports(2, exclude={8265})
