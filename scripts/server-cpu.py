#!/usr/bin/env python3
"""Server CPU per command form, per server: what each form of the lock's commands costs the node.

    scripts/server-cpu.py [--instructions] /usr/bin/redis-server "$(scripts/ensure-valkey.sh 9.1)"

For each server binary it starts one server on a free loopback port (no persistence), and for
each form sends N of it pipelined (batches of 100 commands) over one RESP2 connection, reading
`used_cpu_sys + used_cpu_user` from `INFO cpu` before and after: microseconds of server CPU per
form (one command, or the several of a `MULTI`), whatever the client's speed. Keys are set up
unmeasured where a form needs them. Forms a server does not have are reported as `-`. Never
touches a server it did not start; stops each by its pid and removes its directory.

With `--instructions` each server runs under `valgrind --tool=callgrind` instead, and the table
reports the server's user-space instructions per form (counted from zero around the form's
commands) and their ratio to `SET k t NX PX`: repeatable on a busy machine, where the CPU times
scatter by a factor of two, but blind to the kernel's share (the socket reads and writes, one
per batch of 100 commands).
"""

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

N = 100_000
# Under callgrind a server runs some 50 times slower: fewer commands per form, still exact.
N_INSTRUCTIONS = 20_000
BATCH = 100
TTL = "10000"

def engine_script(name):
    """The Lua source of one of the engine's scripts, read from redlock-core (written once):
    a string literal, or a `concat!` of literals and the file's own `macro_rules!` pieces."""
    path = os.path.join(os.path.dirname(__file__), "..", "redlock-core", "src", "command.rs")
    text = open(path, encoding="utf-8").read()
    start = text.index(f"pub const {name}: &str = ") + len(f"pub const {name}: &str = ")
    return rust_str(text, text[start:])


def rust_str(text, expr):
    """The value of the string expression at the start of `expr`: `"…"`, `concat!(…)` or
    `name!()`, a macro of `text` whose body is one of these."""
    expr = expr.lstrip()
    if expr.startswith('"'):
        end = expr.index('"', 1)
        while expr[end - 1] == "\\" and expr[end - 2] != "\\":
            end = expr.index('"', end + 1)
        return expr[1:end].replace("\\\n", "").replace('\\"', '"').replace("\\\\", "\\")
    if expr.startswith("concat!("):
        out, rest = [], expr[len("concat!("):]
        while not rest.lstrip().startswith(")"):
            rest = rest.lstrip()
            piece = rust_str(text, rest)
            out.append(piece)
            rest = rest[piece_len(rest):].lstrip().lstrip(",")
        return "".join(out)
    macro = expr[: expr.index("!()")]
    body = text.index(f"macro_rules! {macro} {{")
    body = text.index("() => {", body) + len("() => {")
    return rust_str(text, text[body:])


def piece_len(expr):
    """How long the string expression at the start of `expr` is, in characters."""
    if expr.startswith('"'):
        end = expr.index('"', 1)
        while expr[end - 1] == "\\" and expr[end - 2] != "\\":
            end = expr.index('"', end + 1)
        return end + 1
    if expr.startswith("concat!("):
        depth, i = 0, 0
        while True:
            c = expr[i]
            if c == '"':
                i += piece_len(expr[i:])
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    return expr.index("!()") + 3


RELEASE = engine_script("RELEASE_SCRIPT")
EXTEND = engine_script("EXTEND_SCRIPT")
CHECKED = engine_script("ACQUIRE_CHECKED_SCRIPT")


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(1 << 16)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            return Exception(rest.decode())
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(1 << 16)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise ValueError(line)

    def call(self, *args):
        self.sock.sendall(encode(*args))
        return self.reply()

    def pipeline(self, commands):
        errors = 0
        for i in range(0, len(commands), BATCH):
            chunk = commands[i:i + BATCH]
            self.sock.sendall(b"".join(encode(*c) for c in chunk))
            for _ in chunk:
                if isinstance(self.reply(), Exception):
                    errors += 1
        return errors

    def cpu(self):
        info = self.call("INFO", "cpu").decode()
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        return float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def forms(sha, n):
    """(name, setup commands, measured commands) per form, `n` of each."""
    keys = [f"k{i}" for i in range(n)]
    setup = [("SET", k, "t", "PX", TTL) for k in keys]
    yield "SET k t NX PX", [], [("SET", k, "t", "NX", "PX", TTL) for k in keys]
    yield "checked acquire script, trusted node", [("SET", "redlock:epoch", "0")], [
        ("EVALSHA", sha["checked"], 3, k, "redlock:epoch", "redlock:epoch:id", "t", TTL, "60000", "0")
        for k in keys]
    yield "checked acquire script, old epoch", [("SET", "redlock:epoch", "1")], [
        ("EVALSHA", sha["checked"], 3, k, "redlock:epoch", "redlock:epoch:id", "t", TTL, "60000", "0")
        for k in keys]
    yield "GET redlock:epoch", [], [("GET", "redlock:epoch")] * n
    stamps = [("SET", "redlock:epoch", "0"), ("SET", "redlock:epoch:id", "a" * 40 + ":" + "b" * 40 + ":0:0")]
    yield "MULTI, SET k t NX PX, EXEC (the transaction alone: any atomic seal's floor)", [], [
        [("MULTI",), ("SET", k, "t", "NX", "PX", TTL), ("EXEC",)] for k in keys]
    marker = "redlock:epoch:m:16045690984833335023"
    yield "sealed SET: MULTI, SET k t NX PX, EXISTS marker, EXEC", stamps + [("SET", marker, "1")], [
        [("MULTI",), ("SET", k, "t", "NX", "PX", TTL), ("EXISTS", marker), ("EXEC",)] for k in keys]
    yield "sealed SET with the stamps (markers off): MULTI, SET k t NX PX, MGET epoch id, EXEC", stamps, [
        [("MULTI",), ("SET", k, "t", "NX", "PX", TTL), ("MGET", "redlock:epoch", "redlock:epoch:id"),
         ("EXEC",)] for k in keys]
    yield "sealed SET on an evicting node: … INFO stats …", stamps, [
        [("MULTI",), ("SET", k, "t", "NX", "PX", TTL), ("MGET", "redlock:epoch", "redlock:epoch:id"),
         ("INFO", "stats"), ("EXEC",)] for k in keys]
    yield "release script with PUBLISH", setup, [
        ("EVALSHA", sha["release"], 1, k, "t", "1") for k in keys]
    yield "release script without PUBLISH", setup, [
        ("EVALSHA", sha["release"], 1, k, "t", "0") for k in keys]
    yield "DELIFEQ k t", setup, [("DELIFEQ", k, "t") for k in keys]
    yield "PUBLISH redlock:released:k 1 (no subscriber)", [], [
        ("PUBLISH", f"redlock:released:{k}", "1") for k in keys]
    yield "extend script", setup, [("EVALSHA", sha["extend"], 1, k, "t", "20000") for k in keys]
    yield "SET k t IFEQ t PX ttl", setup, [
        ("SET", k, "t", "IFEQ", "t", "PX", "20000") for k in keys]
    yield "MSETEX 2 k1 t k2 t NX PX ttl (per lock of 2 keys)", [], [
        ("MSETEX", 2, f"a{i}", "t", f"b{i}", "t", "NX", "PX", TTL) for i in range(n)]


class Instructions:
    """Counts a callgrind-run server's instructions: zeroed before a form, dumped after."""

    def __init__(self, pid, out):
        self.pid, self.out = pid, out

    def _control(self, flag):
        subprocess.run(["callgrind_control", flag, str(self.pid)], check=True,
                       stdout=subprocess.DEVNULL)

    def start(self):
        self._control("-z")

    def stop(self):
        for old in glob.glob(self.out + ".*"):
            os.remove(old)
        self._control("-d")
        for _ in range(200):
            dumps = glob.glob(self.out + ".*")
            if dumps:
                for line in open(dumps[0], encoding="utf-8"):
                    if line.startswith("totals:"):
                        return int(line.split()[1])
            time.sleep(0.05)
        raise RuntimeError(f"callgrind wrote no dump for pid {self.pid}")


def measure(binary, instructions):
    if not shutil.which(binary):
        raise SystemExit(f"server-cpu.py: no server binary {binary!r} (give paths to redis-server "
                         "or valkey-server)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="server-cpu-")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", workdir]
    out = os.path.join(workdir, "callgrind.out")
    if instructions:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + command
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counter = Instructions(server.pid, out) if instructions else None
    try:
        for _ in range(400):
            try:
                conn = Conn(port)
                conn.call("PING")
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"{binary} did not answer on port {port}")
        version = conn.call("INFO", "server").decode()
        fields = dict(line.split(":", 1) for line in version.splitlines() if ":" in line)
        name = (f"Valkey {fields['valkey_version']}" if "valkey_version" in fields
                else f"Redis {fields.get('redis_version', '?')}")
        sha = {n: conn.call("SCRIPT", "LOAD", s).decode()
               for n, s in (("release", RELEASE), ("extend", EXTEND), ("checked", CHECKED))}
        results = []
        n = N_INSTRUCTIONS if instructions else N
        for form, setup, measured in forms(sha, n):
            conn.call("FLUSHALL")
            conn.pipeline(setup)
            # A form of several commands (a list) is sent as they are, and costs per form.
            commands = [c for m in measured for c in (m if isinstance(m, list) else [m])]
            if counter:
                counter.start()
                errors = conn.pipeline(commands)
                cost = counter.stop() / len(measured)
            else:
                before = conn.cpu()
                errors = conn.pipeline(commands)
                cost = (conn.cpu() - before) * 1e6 / len(measured)
            results.append((form, None if errors == len(commands) else cost))
        return name, results
    finally:
        server.terminate()
        server.wait()
        # The server's directory (its callgrind dumps, under --instructions) goes with it.
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    args = sys.argv[1:]
    instructions = "--instructions" in args
    binaries = [a for a in args if a != "--instructions"] or ["redis-server"]
    columns = [measure(b, instructions) for b in binaries]
    unit = "instructions (× `SET k t NX PX`)" if instructions else "µs server CPU"
    print("| form | " + " | ".join(f"{unit}, {name}" for name, _ in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for i, (form, _) in enumerate(columns[0][1]):
        cells = []
        for _, results in columns:
            cost, base = results[i][1], results[0][1]
            if cost is None:
                cells.append("–")
            elif instructions:
                cells.append(f"{cost:,.0f} ({cost / base:.2f}×)")
            else:
                cells.append(f"{cost:.2f}")
        print(f"| {form} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
