"""Who may subscribe to an engine's signals (app/zpub.py publishes them on a CURVE server).

The server's public key is no secret (NAME.zmq-key.pub is 0644 and the log prints it), so it
cannot say who reads: the publisher's zmq context runs a ZAP handler (Gate) that lets a
subscriber's CURVE handshake complete only with a client public key the engine's owner allows:

- this user's own subscribers' key (OWN_KEY in the state directory: made on first use, 0600;
  `engine signals --follow` of the same user uses it, found through the engine's runtime file);
- the keys listed in --pub-clients FILE ([control] pub_clients): one z85 public key a line
  (40 characters, then after a space anything: a comment); blank lines and lines of comment
  starting with `#` are skipped (a key may start with `#` too: z85 has it); the file is
  this user's or root's, not a link, and nobody else can write it. Read at start.

Any other client, even one holding the server's key, gets no handshake and so no signal; it is
counted and said in the log (a line at most every 10 s). libzmq asks the handler once per
connection, never per message.
"""
import os
import stat
import threading

from engine.outputs import write_whole

from .private_file import open_private

OWN_KEY = "zmq-client.key"     # this user's own subscribers' keypair, in its state directory (+ .pub: its public key)
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # (where libzmq asks, in the socket's own context)
MAX_CLIENTS_BYTES = 1 << 20


def check_public_key(key, where):
    """key (z85, str or bytes) if it is a CURVE public key; ValueError naming `where` if not."""
    from zmq.utils import z85
    if isinstance(key, str):
        key = key.encode("ascii", "replace")
    try:
        if len(key) != 40 or len(z85.decode(key)) != 32:
            raise ValueError
    except (ValueError, KeyError):
        raise ValueError(f"{where}: not a zmq CURVE public key (40 z85 characters)") from None
    return key


def _read_private(path, what, fix):
    """The bytes of a file of this user nobody else can read or write, or None if there is none."""
    fd = open_private(path, what, f"; it must be this user's, mode 0600: {fix}")
    if fd is None:
        return None
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def keypair(path, pub_path, what, fix, create=True):
    """(public, secret) CURVE keys (z85 bytes) kept in `path` (JSON, 0600): read, or made when there
    is none and `create` (None then if not). The public key is also written to pub_path (0644: it
    is no secret). RuntimeError naming the file and `fix` when it is not a keypair of ours."""
    import json

    import zmq
    raw = _read_private(path, what, fix)
    keys = None
    if raw is not None:
        try:
            d = json.loads(raw)
            keys = d["public"].encode("ascii"), d["secret"].encode("ascii")
            if zmq.curve_public(keys[1]) != keys[0]:
                keys = None
        except (ValueError, KeyError, TypeError, AttributeError, zmq.ZMQError):
            keys = None
        if keys is None:
            raise RuntimeError(f"{what} {path} is not a keypair this engine wrote: {fix}")
    if keys is None:
        if not create:
            return None
        keys = zmq.curve_keypair()
        write_whole(path, json.dumps({"public": keys[0].decode(), "secret": keys[1].decode()}).encode(), 0o600)
    try:
        with open(pub_path, "rb") as f:
            same = f.read().strip() == keys[0]
    except OSError:
        same = False
    if not same:
        write_whole(pub_path, keys[0] + b"\n", 0o644)
    return keys


def own_key_paths(directory=None):
    """(keypair file, public key file) of this user's own subscribers."""
    if directory is None:
        from engine.dirs import state_dir
        directory = state_dir()
    path = os.path.join(directory, OWN_KEY)
    return path, path + ".pub"


def own_client_keys(directory=None, path=None):
    """(public, secret) of this user's own subscribers: from `path` (a keypair file an engine of
    this user names in its runtime file), else the state directory's (made the first time)."""
    if path is not None:
        keys = keypair(path, path + ".pub", "zmq client key file", "the engine that named it makes it again "
                       "at its next start", create=False)
        if keys is None:
            raise RuntimeError(f"zmq client key file {path}: No such file or directory")
        return keys
    return keypair(*own_key_paths(directory), "zmq client key file",
                   "delete it and a new one is made (an engine that lists its public key in --pub-clients then "
                   "needs the new one)")


def read_clients(path):
    """--pub-clients FILE: the client public keys it lists (a frozenset of z85 bytes); ValueError
    naming the file (and the line) when it is refused or wrong; none without a file."""
    if not path:
        return frozenset()
    flag = "--pub-clients"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise ValueError(f"{flag} {path}: {e.strerror} (a link is never followed)") from None
    try:
        st, me = os.fstat(fd), os.geteuid()
        why = ("not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"owned by uid {st.st_uid}, not this user (uid {me}) nor root" if st.st_uid not in (me, 0) else
               f"mode {st.st_mode & 0o777:04o}: {'others' if st.st_mode & 0o002 else 'its group'} can write it "
               "(chmod go-w)" if st.st_mode & 0o022 else None)
        if why:
            raise ValueError(f"{flag} {path} is refused: {why}: it decides who reads the signals")
        raw = os.read(fd, MAX_CLIENTS_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_CLIENTS_BYTES:
        raise ValueError(f"{flag} {path}: larger than {MAX_CLIENTS_BYTES >> 20} MiB: not a list of keys")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as e:
        raise ValueError(f"{flag} {path}: not text (byte {e.start} is {raw[e.start]:#04x})") from None
    keys = set()
    for i, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        where = f"{flag} {path} line {i}: {words[0][:48]!r}"
        try:
            keys.add(check_public_key(words[0], where))
        except ValueError:
            if not words[0].startswith("#"):  # (z85 has '#' too: a key may start with one)
                raise
    return frozenset(keys)


def allowed_clients(path, directory=None):
    """The client keys a publisher admits: this user's own subscribers' and --pub-clients'."""
    return frozenset({own_client_keys(directory)[0]}) | read_clients(path)


class Gate:
    """The ZAP handler of one zmq context (bound before its CURVE server, so no handshake is ever
    made without it): a client key in `allowed` completes its handshake, any other is refused
    (400: the client sees EVENT_HANDSHAKE_FAILED_AUTH), counted in `refused` and said through
    say(). Its own thread, asleep in poll until libzmq asks."""

    def __init__(self, ctx, allowed, say):
        import zmq
        self.zmq, self.allowed, self.say, self.refused = zmq, frozenset(allowed), say, 0
        self.sock = ctx.socket(zmq.REP)
        self.sock.linger = 0
        self.sock.bind(ZAP_ENDPOINT)  # (one handler per context: a second publisher has its own context)
        wake = f"inproc://engine-zap-stop-{id(self)}"
        self._stop_r, self._stop_w = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
        for s in (self._stop_r, self._stop_w):
            s.linger = 0
        self._stop_r.bind(wake)
        self._stop_w.connect(wake)
        self.thread = threading.Thread(target=self._run, name="engine-zmq-auth", daemon=True)
        self.thread.start()

    def _run(self):
        zmq = self.zmq
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self._stop_r, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if self._stop_r in ready:
                    return
                if self.sock in ready:
                    request = self.sock.recv_multipart()
                    try:
                        reply = self.answer(request)
                    except Exception:  # noqa: BLE001 - a REP socket must answer: refused
                        reply = [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"internal error", b"", b""]
                    self.sock.send_multipart(reply)
        finally:
            self.sock.close(0)
            self._stop_r.close(0)

    def answer(self, request):
        """A ZAP reply (RFC 27) to a ZAP request: version, id, domain, address, identity,
        mechanism, credentials (CURVE: the client's 32-byte public key)."""
        from zmq.utils import z85
        if len(request) < 6:
            return [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"malformed request", b"", b""]
        version, rid, _domain, address, _identity, mechanism = request[:6]
        key = z85.encode(request[6]) if mechanism == b"CURVE" and len(request) > 6 and len(request[6]) == 32 else None
        if key is not None and key in self.allowed:
            return [version, rid, b"200", b"OK", b"", b""]
        self.refused += 1
        self.say(f"zmq subscriber {address.decode('ascii', 'replace')} refused: its client key "
                 f"{key.decode() if key else '(none: ' + mechanism.decode('ascii', 'replace') + ')'} is not allowed "
                 f"(this user's own subscribers' and --pub-clients' are; {self.refused} refused so far)")
        return [version, rid, b"400", b"client key not allowed", b"", b""]

    def close(self):
        """Stop the handler; True once its thread and sockets are gone."""
        try:
            self._stop_w.send(b"", self.zmq.NOBLOCK)
        except self.zmq.ZMQError:
            pass
        self.thread.join(1.0)
        self._stop_w.close(0)
        return not self.thread.is_alive()
