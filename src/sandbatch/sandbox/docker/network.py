"""A running container cut off from everything but the model proxy on this host.

Docker has no per-port filter a client can set without root on the engine's host, so the
sandbox is moved to a network of its own that has no way out at all, and the one way to
the proxy is a second container, the gate, that sits on that network and on the engine's
default one and forwards a single port to the proxy:

- the network is `internal` (no route off it) and its bridge has no address on the host
  (`com.docker.network.bridge.inhibit_ipv4`): an internal network alone still lets its
  containers reach every service of the host through the bridge's address;
- the sandbox is connected to it, then disconnected from every other network;
- the gate runs a TCP forwarder from its own listening port to the proxy's port on the
  host (`host.docker.internal`), and nothing else; the sandbox can reach no other port
  of the gate, and has no route through it (its default gateway is an address no one holds);
- the gate's forwarder is a few lines of Python run by the `python3` of the gate's image
  (`sandbox.docker.gate_image`, default the sandbox's own image, which the engine already
  holds): no image of a forwarding tool can be assumed to be on an engine that cannot pull.

Both are named after the sandbox and labelled `<prefix>gate-of=<sandbox>`; deleting the
sandbox deletes them (provider.py).
"""

from __future__ import annotations

import asyncio

from ...core.failures import FailureClass
from ..base import Sandbox, SandboxError
from .engine import EngineOwner, NotFound

GATE_LABEL = "gate-of"
MODEL_HOST = "host.docker.internal"  # how the gate reaches this host (host-gateway)
# how long the sandbox waits for the gate's listening port: rounds of tries 0.1 s apart, the
# gate asked between rounds whether it still runs (an image without python3 ends it at once)
GATE_READY_TRIES, GATE_READY_ROUNDS = 20, 15

# a TCP forwarder: argv = listen port, target host, target port, seconds to live (the sandbox's
# TTL: a gate nobody removes stops with it); each direction is closed for writing when the other
# side has nothing more to send (streamed responses keep flowing)
FORWARDER = r"""
import os, socket, sys, threading
port, host, target = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
threading.Timer(float(sys.argv[4]), os._exit, (0,)).start()
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(client):
    try:
        upstream = socket.create_connection((host, target), timeout=30)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return
    back = threading.Thread(target=pipe, args=(upstream, client))
    back.daemon = True
    back.start()
    pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", port))
server.listen(128)
while True:
    client, _ = server.accept()
    worker = threading.Thread(target=serve, args=(client,))
    worker.daemon = True
    worker.start()
"""


RESOLV = "printf 'nameserver 127.0.0.1\\noptions attempts:1\\n' > /etc/resolv.conf"


def network_name(sandbox_id: str) -> str:
    return f"{sandbox_id}-model"


def gate_name(sandbox_id: str) -> str:
    return f"{sandbox_id}-gate"


async def attached_networks(owner: EngineOwner, container: str) -> list[str]:
    data = await owner.inspect(container) or {}
    return sorted(((data.get("NetworkSettings") or {}).get("Networks") or {}))


async def detach_all(owner: EngineOwner, container: str, keep: str | None = None) -> None:
    """Disconnect `container` from every network but `keep`."""
    for net in await attached_networks(owner, container):
        if net != keep:
            await owner.engine.call("disconnect_container_from_network", container, net, force=True)


async def restrict(owner: EngineOwner, sandbox: Sandbox, proxy_port: int | None) -> str | None:
    """Restrict `sandbox` (a DockerSandbox of `owner`, the provider) to the model proxy on
    `proxy_port` of this host, or to nothing: the gate's address on the sandbox's network."""
    if proxy_port is None:
        await detach_all(owner, sandbox.id)  # loopback only
        return None
    prefix, engine = owner.prefix, owner.engine
    labels = {f"{prefix}{GATE_LABEL}": sandbox.id, **{f"{prefix}{k}": v for k, v in sandbox.spec.labels.items()}}
    net, gate = network_name(sandbox.id), gate_name(sandbox.id)
    await engine.call("create_network", net, driver="bridge", internal=True, labels=labels,
                      options={"com.docker.network.bridge.inhibit_ipv4": "true"})
    image = owner.options.get("gate_image") or sandbox.spec.image
    host = engine.api.create_host_config(
        network_mode=str(owner.options["network"]), extra_hosts={MODEL_HOST: "host-gateway"},
        init=True, pids_limit=256, mem_limit=128 << 20, memswap_limit=128 << 20)
    await engine.call("create_container", image, name=gate, labels=labels, host_config=host,
                      entrypoint=["python3", "-c", FORWARDER],
                      command=[str(proxy_port), MODEL_HOST, str(proxy_port), str(sandbox.spec.ttl_seconds)])
    await engine.call("connect_container_to_network", gate, net)
    await engine.call("start", gate)
    await engine.call("connect_container_to_network", sandbox.id, net)
    await detach_all(owner, sandbox.id, keep=net)
    await _no_resolver(owner, sandbox.id)
    data = await owner.inspect(gate) or {}
    address = (((data.get("NetworkSettings") or {}).get("Networks") or {}).get(net) or {}).get("IPAddress")
    if not address:
        await _check_running(owner, sandbox, gate, image)
        raise SandboxError(f"the network gate of docker sandbox {sandbox.id} has no address on {net}",
                           FailureClass.SANDBOX_NETWORK)
    await _wait_listening(owner, sandbox, gate, image, address, proxy_port)
    return address


async def _no_resolver(owner: EngineOwner, container: str) -> None:
    """Make every name lookup fail at once: on the new network the engine points the sandbox at
    its own resolver, which never answers for an internal network, so each lookup waited 10 s
    (OpenCode's start-up took 50 s more). A resolver on loopback that no one serves refuses at
    once. As root, whatever user the image runs as."""
    made = await owner.engine.call("exec_create", container, ["sh", "-c", RESOLV], user="0")
    await owner.engine.call("exec_start", made["Id"])
    if (await owner.engine.call("exec_inspect", made["Id"])).get("ExitCode") != 0:
        raise SandboxError(f"docker sandbox {container}: cannot write /etc/resolv.conf", FailureClass.SANDBOX_NETWORK)


async def _check_running(owner: EngineOwner, sandbox: Sandbox, gate: str, image: str) -> None:
    """SandboxError, with what it printed, unless the gate runs (an image without python3 ends it at once)."""
    state = ((await owner.inspect(gate)) or {}).get("State") or {}
    if state.get("Status") == "running":
        return
    logs = (await owner.engine.call("logs", gate, tail=3) or b"").decode("utf-8", "replace")
    raise SandboxError(
        f"the network gate of docker sandbox {sandbox.id} ({image}) is {state.get('Status', 'gone')}, exit "
        f"{state.get('ExitCode')} ({' '.join(logs.split())[-200:] or 'no output'}); it runs python3: set "
        "sandbox.docker.gate_image to an image with python3 on its PATH", FailureClass.SANDBOX_NETWORK)


async def _wait_listening(owner: EngineOwner, sandbox: Sandbox, gate: str, image: str, address: str, port: int) -> None:
    """Until the sandbox connects to the gate (bash's /dev/tcp: no tool of the image needed)."""
    probe = (f"i=0; while [ $i -lt {GATE_READY_TRIES} ]; do (exec 3<>/dev/tcp/{address}/{port}) 2>/dev/null "
             f"&& exit 0; sleep 0.1; i=$((i + 1)); done; exit 1")
    for _ in range(GATE_READY_ROUNDS):
        if (await sandbox.exec(["bash", "-c", probe], timeout=GATE_READY_TRIES * 0.1 + 30, cwd="/")).ok:
            return
        await _check_running(owner, sandbox, gate, image)
    raise SandboxError(f"docker sandbox {sandbox.id} cannot reach its network gate at {address}:{port} after "
                       f"{GATE_READY_TRIES * GATE_READY_ROUNDS * 0.1:.0f} s", FailureClass.SANDBOX_NETWORK)


async def remove_gate(owner: EngineOwner, sandbox_id: str) -> None:
    """The gate of a sandbox, if it has one."""
    try:
        await owner.engine.call("remove_container", gate_name(sandbox_id), v=True, force=True)
    except NotFound:
        pass


async def remove_network(owner: EngineOwner, sandbox_id: str) -> None:
    """The model-only network of a sandbox, if it has one (once neither it nor its gate exists)."""
    for _ in range(3):
        try:
            await owner.engine.call("remove_network", network_name(sandbox_id))
            return
        except NotFound:
            return
        except SandboxError:  # a container still being removed holds it
            await asyncio.sleep(0.2)
