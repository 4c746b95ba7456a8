"""The fake internet's servers, run by the CLI end-to-end tests inside a network namespace they made.

One process serves everything the configuration (a JSON file, argv[1]) names: a DNS server
answering A queries for the fake names, HTTP and HTTPS servers (static files for a dumb-HTTP git
repository, `/bytes/N` for throughput, else a line naming the server and the Host it was asked
for), UDP listeners and TCP banner servers. Every query, request, datagram and connection is
appended to one log file, so a test can prove something never arrived. It prints `ready` once
every socket is bound. Standard library only.
"""

import http.server
import json
import os
import socket
import socketserver
import ssl
import struct
import sys
import threading

CONFIG = json.load(open(sys.argv[1]))
LOG_LOCK = threading.Lock()
LOG = open(CONFIG["log"], "a", buffering=1)


def log(*parts):
    with LOG_LOCK:
        LOG.write(" ".join(str(p) for p in parts) + "\n")


# ---- DNS -------------------------------------------------------------------------------------

QTYPES = {1: "A", 16: "TXT", 28: "AAAA", 5: "CNAME", 15: "MX", 33: "SRV", 255: "ANY"}
QUERIES = {}


def parse_question(msg):
    labels, i = [], 12
    while msg[i] != 0:
        n = msg[i]
        labels.append(msg[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, qclass = struct.unpack("!HH", msg[i + 1 : i + 5])
    return ".".join(labels).lower(), qtype, msg[12 : i + 5]


def answer(msg):
    name, qtype, question = parse_question(msg)
    log("dns", name, QTYPES.get(qtype, qtype))
    records = CONFIG["dns"]["records"]
    rebind = CONFIG["dns"].get("rebind", {})
    addrs = None
    if name in rebind:
        # First answer public, every later one the second address: a rebinding name.
        seen = QUERIES.get(name, 0)
        QUERIES[name] = seen + 1
        addrs = [rebind[name][min(seen, 1)]] if qtype == 1 else []
    elif name in records:
        addrs = records[name] if qtype == 1 else []
    (ident,) = struct.unpack("!H", msg[:2])
    rcode = 3 if addrs is None else 0
    body = b""
    for a in addrs or []:
        body += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 0, 4) + socket.inet_aton(a)
    header = struct.pack("!HHHHHH", ident, 0x8180 | rcode, 1, len(addrs or []), 0, 0)
    return header + question + body


def serve_dns(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 53))

    def loop():
        while True:
            msg, peer = s.recvfrom(4096)
            try:
                s.sendto(answer(msg), peer)
            except Exception as e:  # a malformed query gets no answer
                log("dns-error", repr(e))

    return loop


# ---- HTTP(S) ---------------------------------------------------------------------------------

CHUNK = b"x" * 65536


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle and the client's delayed
    # ACK add 40 ms to every small response, drowning what the benchmark measures.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_GET(self):
        local = self.connection.getsockname()
        host = self.headers.get("Host", "")
        log("http", "%s:%d" % local[:2], host, self.path)
        path = self.path.split("?", 1)[0]
        if path.startswith("/bytes/"):
            n = int(path[len("/bytes/") :])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            while n > 0:
                piece = CHUNK[: min(n, len(CHUNK))]
                self.wfile.write(piece)
                n -= len(piece)
            return
        file = os.path.realpath(os.path.join(CONFIG["root"], path.lstrip("/")))
        if path != "/" and file.startswith(CONFIG["root"] + "/") and os.path.isfile(file):
            data = open(file, "rb").read()
        elif path == "/":
            data = ("hello from %s:%d for %s\n" % (local[0], local[1], host)).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    tls = None

    def server_bind(self):
        # HTTPServer's own would look the address up in DNS (getfqdn): ours, not serving yet.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def finish_request(self, request, client_address):
        # The handshake runs on the connection's own thread: a slow client never blocks accept.
        if self.tls is not None:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                log("tls-error", "%s:%d" % self.server_address[:2], repr(e))
                return
        self.RequestHandlerClass(request, client_address, self)


def serve_http(addr, port, tls):
    srv = Server((addr, port), Handler)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(CONFIG["cert"], CONFIG["key"])
        srv.tls = ctx
    return srv.serve_forever


# ---- UDP and TCP -----------------------------------------------------------------------------


def serve_udp(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))

    def loop():
        while True:
            data, peer = s.recvfrom(65536)
            log("udp", "%s:%d" % (addr, port), peer[0], data[:64].hex())

    return loop


def serve_tcp(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)

    def loop():
        while True:
            c, peer = s.accept()
            log("tcp", "%s:%d" % (addr, port), peer[0])
            try:
                c.sendall(b"banner %s:%d\n" % (addr.encode(), port))
            finally:
                c.close()

    return loop


loops = [serve_dns(CONFIG["dns"]["addr"])]
loops += [serve_http(s["addr"], s["port"], False) for s in CONFIG.get("http", [])]
loops += [serve_http(s["addr"], s["port"], True) for s in CONFIG.get("https", [])]
loops += [serve_udp(s["addr"], s["port"]) for s in CONFIG.get("udp", [])]
loops += [serve_tcp(s["addr"], s["port"]) for s in CONFIG.get("tcp", [])]
for loop in loops:
    threading.Thread(target=loop, daemon=True).start()
print("ready", flush=True)
# Until the test kills us or closes our stdin.
sys.stdin.read()
