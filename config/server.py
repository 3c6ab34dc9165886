"""The product's Daphne: `python -m config.server [Daphne's options] config.asgi:application`.

Daphne, with three differences, all about what a client can make the server do before the
application has a say:

- **Bodies are kept only up to the limit.** Daphne (through Twisted) receives a request's whole
  body, on disk past 100 KB, before it calls the application, and then hands all of it to the
  application's queue in memory at once: 150 MB bodies raised the process's peak memory by about
  300 MB (measured; the answer stream joins the body into one more copy) before anything could refuse
  them. Here a request keeps at most REQUEST_MAX_BYTES + 1 bytes of its body; the rest is read from
  the network and dropped as it arrives, and `config.edge.BodyLimit` answers 413 once it is whole.
- **No `Server` header.** Daphne names itself in every response (and WebSocket handshake) unless
  given another name; here the default is none (`--server-name` still sets one).
- **Bodies are parsed once, by Django.** Twisted would parse a multipart body (an upload) itself, in
  memory, before Daphne passed it on.

Every command line that serves the product runs this module (deploy/compose.yaml, deploy/Dockerfile,
scripts/run-embedded, the tests' and benchmarks' servers).
"""

from __future__ import annotations

import daphne.server
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest

from config.edge import body_limit


class BoundedRequest(WebRequest):
    """A request that stores at most its route's body limit + 1 bytes of its body: enough for the
    application to see that it is over the limit, never more."""

    kept = 0
    limit: int | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Twisted would parse a multipart body (a file upload) itself, whole in memory, before Daphne
        # hands the same bytes to Django, which parses them again; and answer a malformed one with a
        # bare 400 of its own. Django alone reads bodies.
        self._parsePOSTFormSubmission = False

    def gotLength(self, length) -> None:
        # Called once the headers are in, before any of the body: the route decides the limit (uploads
        # may be larger). The request line's path is still only the channel's at this point.
        path = self.channel._path.split(b"?", 1)[0].decode("latin-1")
        self.limit = body_limit(path)
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        limit = self.limit
        if limit is not None:
            data = data[: max(limit + 1 - self.kept, 0)]
            if not data:
                return  # past the limit: read, not kept
        self.kept += len(data)
        super().handleContentChunk(data)


class BoundedHTTPFactory(HTTPFactory):
    def buildProtocol(self, addr):
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol


class Server(daphne.server.Server):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def run(self) -> None:
        # Daphne's run() builds its HTTP factory from the name in its module; this one bounds bodies.
        daphne.server.HTTPFactory = BoundedHTTPFactory
        super().run()


class ProductCommandLine(CommandLineInterface):
    server_class = Server

    def __init__(self) -> None:
        super().__init__()
        self.parser.set_defaults(server_name="")  # no Server header unless asked for


if __name__ == "__main__":
    ProductCommandLine.entrypoint()
