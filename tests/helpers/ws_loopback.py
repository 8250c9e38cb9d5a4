"""ws_client (feeds/transport/ws_client.py) against a websocket server on loopback whose frames the
test writes itself, byte for byte (cut anywhere, trickled, hostile)."""
import asyncio
import base64
import hashlib

from feeds.transport import ws_client


async def _upgrade(reader, writer):
    """Answer the client's upgrade request (RFC 6455 4.2.2)."""
    req = await reader.readuntil(b"\r\n\r\n")
    key = [ln.split(b":", 1)[1].strip() for ln in req.split(b"\r\n") if ln.lower().startswith(b"sec-websocket-key")][0]
    accept = base64.b64encode(hashlib.sha1(key + ws_client.GUID).digest())
    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")


def read_through_client(send, timeout=30):
    """(the lines the client made, why its connection ended, bytes left in its buffer) once the
    server, after the handshake, ran `await send(reader, writer)` and the connection ended."""
    got = []

    async def serve(reader, writer):
        await _upgrade(reader, writer)
        await send(reader, writer)

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        done = asyncio.get_running_loop().create_future()
        conn = await ws_client.connect(f"ws://127.0.0.1:{port}/x", lambda lines, n: got.append(bytes(lines)),
                                       lambda reason: done.done() or done.set_result(reason))
        reason = await asyncio.wait_for(done, timeout)
        left = len(conn.inbuf)
        conn.abort()
        server.close()
        return reason, left

    reason, left = asyncio.run(main())
    return b"".join(got).split(b"\n")[:-1], reason, left
