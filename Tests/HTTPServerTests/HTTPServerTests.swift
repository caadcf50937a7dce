import Foundation
import HTTPServer
import LedgerTestSupport
import Testing

/// The HTTP layer on a real socket: requests and answers, answers given later from other threads,
/// limits, timeouts, shutdown and TLS.
@Suite struct HTTPServerTests {
    static func echo(_ request: HTTPRequest) -> HTTPResponse {
        let object: [String: Any] = [
            "method": request.method, "path": request.path, "query": request.query, "bodyBytes": request.body.count,
            "body": String(decoding: request.body, as: UTF8.self), "test": request.header("X-Test") ?? "",
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return .json(200, String(decoding: data, as: UTF8.self), headers: [("X-Answered", "yes")], note: "echo")
    }

    @Test func answersRequestsWithMethodPathQueryHeadersAndBody() throws {
        let completions = Collected<HTTPServer.Completion>()
        let server = try HTTPServer(configuration: .init(), observer: completions.add, respond: Self.echo)
        defer { server.shutdown() }
        #expect(server.port != 0)
        let client = try HTTPClient(port: server.port)
        let get = try client.get("/v1/things?name=a%20b&n=2", headers: ["X-Test": "hello"])
        #expect(get.status == 200)
        #expect(get.headers["x-answered"] == "yes")
        #expect(get.headers["content-type"] == "application/json")
        #expect(get.json["method"] as? String == "GET")
        #expect(get.json["path"] as? String == "/v1/things")
        #expect(get.json["query"] as? [String: String] == ["name": "a b", "n": "2"])
        #expect(get.json["test"] as? String == "hello")
        let post = try client.post("/submit", "{\"a\":1}\n{\"b\":2}\n")
        #expect(post.json["method"] as? String == "POST")
        #expect(post.json["body"] as? String == "{\"a\":1}\n{\"b\":2}\n")
        let delete = try client.send("DELETE", "/v1/account")
        #expect(delete.json["method"] as? String == "DELETE")
        // The observer sees each request once its answer is sent.
        let deadline = Date().addingTimeInterval(60)
        while completions.list.count < 3 && Date() < deadline { usleep(5_000) }
        #expect(completions.list.map(\.status) == [200, 200, 200])
        #expect(completions.list.map(\.note) == ["echo", "echo", "echo"])
        #expect(completions.list.map(\.path) == ["/v1/things", "/submit", "/v1/account"])
    }

    @Test func answersGivenLaterFromOtherThreadsDoNotHoldServerThreads() throws {
        // No request is answered until all 32 have reached the handler: with 2 server threads, that
        // happens only if waiting for an answer holds no thread.
        let waiting = Waiting()
        let server = try HTTPServer(configuration: .init(threads: 2)) { request, responder in
            waiting.add(request, responder, answerAllAt: 32)
        }
        defer { server.shutdown() }
        let client = try HTTPClient(port: server.port, connections: 32)
        let statuses = concurrently(32) { index in (try? client.post("/slow", "\(index)"))?.status ?? -1 }
        #expect(statuses == Array(repeating: 200, count: 32))
    }

    /// Keeps responders until `count` have arrived, then answers them all from another thread.
    final class Waiting: @unchecked Sendable {
        private let lock = NSLock()
        private var held: [(HTTPRequest, HTTPResponder)] = []

        func add(_ request: HTTPRequest, _ responder: HTTPResponder, answerAllAt count: Int) {
            let all: [(HTTPRequest, HTTPResponder)]? = lock.withLock {
                held.append((request, responder))
                return held.count == count ? held : nil
            }
            guard let all else { return }
            DispatchQueue.global().async { for (request, responder) in all { responder.respond(HTTPServerTests.echo(request)) } }
        }
    }

    @Test func aBodyOverTheLimitIsRefused413WhetherAnnouncedOrChunked() throws {
        let server = try HTTPServer(configuration: .init(maximumBodyBytes: 1_000), respond: Self.echo)
        defer { server.shutdown() }
        // Announced: refused on the headers, before the body is read.
        let announced = try RawConnection(port: server.port)
        announced.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n")
        let first = announced.readUntilClosed(timeout: 30)
        #expect(first.text.hasPrefix("HTTP/1.1 413"), "\(first.text)")
        #expect(first.text.contains("payload-too-large"))
        #expect(first.closed)
        // Chunked: read up to the end and refused.
        let chunked = try RawConnection(port: server.port)
        let chunk = String(repeating: "a", count: 600)
        chunked.send("POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n\(chunk)\r\n258\r\n\(chunk)\r\n0\r\n\r\n")
        let second = chunked.readUntilClosed(timeout: 30)
        #expect(second.text.hasPrefix("HTTP/1.1 413"), "\(second.text)")
        // At the limit: accepted.
        let client = try HTTPClient(port: server.port)
        #expect(try client.post("/x", String(repeating: "b", count: 1_000)).json["bodyBytes"] as? Int == 1_000)
    }

    @Test func eachRequestMayHaveItsOwnBodyLimitDecidedFromItsHeaders() throws {
        let server = try HTTPServer(
            configuration: .init(
                maximumBodyBytes: 100, bodyLimit: { request in request.header("X-Trusted") == "yes" ? 10_000 : 100 }), respond: Self.echo)
        defer { server.shutdown() }
        let client = try HTTPClient(port: server.port)
        let body = String(repeating: "c", count: 5_000)
        #expect(try client.post("/x", body, headers: ["X-Trusted": "yes"]).json["bodyBytes"] as? Int == 5_000)
        let refused = try RawConnection(port: server.port)
        refused.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n")
        let answer = refused.readUntilClosed(timeout: 30)
        #expect(answer.text.hasPrefix("HTTP/1.1 413") && answer.text.contains("longer than 100 bytes"), "\(answer.text)")
    }

    @Test func oversizedHeadersAreRefused() throws {
        let server = try HTTPServer(configuration: .init(connectionMemoryBytes: 16 << 10), respond: Self.echo)
        defer { server.shutdown() }
        let connection = try RawConnection(port: server.port)
        connection.send("GET /x HTTP/1.1\r\nHost: t\r\nX-Big: \(String(repeating: "h", count: 40_000))\r\n\r\n")
        let answer = connection.readUntilClosed(timeout: 30)
        #expect(answer.text.hasPrefix("HTTP/1.1 431") || answer.text.hasPrefix("HTTP/1.1 413"), "\(answer.text.prefix(80))")
    }

    @Test func stalledAndTricklingBodiesAreDisconnectedWithoutHoldingTheServer() throws {
        let completions = Collected<HTTPServer.Completion>()
        let server = try HTTPServer(
            configuration: .init(threads: 1, idleTimeoutSeconds: 1, bodyTimeoutSeconds: 1), observer: completions.add, respond: Self.echo)
        defer { server.shutdown() }
        // Stalled: half a body, then nothing. Closed after the idle timeout, with no answer.
        let stalled = try RawConnection(port: server.port)
        stalled.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
        // Trickling: a byte every 150 ms for 30 s, never idle, but far slower than the body timeout allows.
        let trickling = try RawConnection(port: server.port)
        trickling.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n")
        let trickle = Thread {
            for _ in 0..<200 where trickling.send("x") { usleep(150_000) }
        }
        trickle.start()
        // Meanwhile, the single server thread still answers others at once.
        let client = try HTTPClient(port: server.port)
        #expect(try client.get("/fast").status == 200)
        let stalledEnd = stalled.readUntilClosed(timeout: 20)
        #expect(stalledEnd.closed && stalledEnd.text.isEmpty)
        let trickleEnd = trickling.readUntilClosed(timeout: 20)
        #expect(trickleEnd.closed && trickleEnd.text.isEmpty, "the trickling body was not cut off")
        let deadline = Date().addingTimeInterval(60)
        while completions.list.filter({ $0.status == nil }).count < 2 && Date() < deadline { usleep(5_000) }
        #expect(completions.list.filter { $0.status == nil }.count == 2)
    }

    @Test func slowHeadersAreCutOffAtTheHeaderDeadlineAndConnectionsOverTheLimitAreRefused() throws {
        // One server thread accepts connections in order, so the limit is reached exactly at the fourth.
        let refusals = Collected<HTTPServer.ConnectionRefusal>()
        let server = try HTTPServer(
            configuration: .init(
                threads: 1, maximumConnections: 4, maximumConnectionsPerAddress: 0, idleTimeoutSeconds: 30, headerTimeoutSeconds: 1,
                onConnectionRefused: { refusals.add($0) }),
            respond: Self.echo)
        defer { server.shutdown() }
        // Four connections trickle header bytes, one every 150 ms for 30 s: never idle.
        let slow = try (0..<4).map { _ in try RawConnection(port: server.port) }
        for connection in slow { connection.send("GET /x HTTP/1.1\r\nHost: t\r\nX-Slow: ") }
        for connection in slow { Thread { for _ in 0..<200 where connection.send("a") { usleep(150_000) } }.start() }
        // A fifth is over the limit: closed as it is accepted, not left waiting in the listen backlog.
        let fifth = try RawConnection(port: server.port)
        let refused = fifth.readUntilClosed(timeout: 10)
        #expect(refused.closed && refused.text.isEmpty, "a connection over the limit was not closed at once")
        // The trickling connections are cut off by the header deadline (not the 30-second idle
        // timeout, which their bytes keep resetting), without an answer.
        for connection in slow {
            let end = connection.readUntilClosed(timeout: 20)
            #expect(end.closed && end.text.isEmpty, "a trickling header was not cut off")
        }
        // Each closure was reported with its reason (for the service's metrics).
        #expect(refusals.list.filter { $0 == .headerDeadline }.count == 4)
        #expect(refusals.list.filter { $0 == .connectionLimit }.count == 1)
        // Their slots are free again once the server has finished closing them (its loop does that
        // shortly after the clients see the close): a normal request is answered.
        let answer = try RawConnection.answer(to: "GET /after HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", port: server.port, within: 10)
        #expect(answer.hasPrefix("HTTP/1.1 200") && answer.contains(#""path":"\/after""#), "\(answer)")
    }

    @Test func aKeepAliveConnectionMayIdleButTheHeadersOfItsNextRequestHaveTheDeadline() throws {
        let server = try HTTPServer(configuration: .init(idleTimeoutSeconds: 30, headerTimeoutSeconds: 1), respond: Self.echo)
        defer { server.shutdown() }
        let connection = try RawConnection(port: server.port)
        connection.send("GET /first HTTP/1.1\r\nHost: t\r\n\r\n")
        // Idle between requests for three times the header deadline: still open (the idle timeout applies).
        let first = connection.readUntilClosed(timeout: 3)
        #expect(first.text.hasPrefix("HTTP/1.1 200") && !first.closed, "\(first)")
        connection.send("GET /second HTTP/1.1\r\nHost: t\r\n\r\n")
        let second = connection.readUntilClosed(timeout: 3)
        #expect(second.text.hasPrefix("HTTP/1.1 200") && second.text.contains("second") && !second.closed, "\(second)")
        // The next request's headers trickle in: cut off once they have taken longer than the deadline.
        connection.send("GET /third HTTP/1.1\r\n")
        Thread { for _ in 0..<200 where connection.send("X-Slow: a\r\n") { usleep(150_000) } }.start()
        let third = connection.readUntilClosed(timeout: 20)
        #expect(third.closed && third.text.isEmpty, "a keep-alive connection's trickling headers were not cut off")
    }

    @Test func connectionsFromOneAddressOverItsLimitAreRefused() throws {
        let server = try HTTPServer(configuration: .init(maximumConnectionsPerAddress: 2), respond: Self.echo)
        defer { server.shutdown() }
        let open = try (0..<2).map { _ in try RawConnection(port: server.port) }
        for connection in open { connection.send("GET /open HTTP/1.1\r\nHost: t\r\n") }  // held open, headers unfinished
        let third = try RawConnection(port: server.port)
        let refused = third.readUntilClosed(timeout: 10)
        #expect(refused.closed && refused.text.isEmpty, "a third connection from one address was not closed at once")
        // Once one has closed, another is served (libmicrohttpd may count the closed one a moment
        // after the client sees it close: tried until then).
        open[0].send("Connection: close\r\n\r\n")
        #expect(open[0].readUntilClosed(timeout: 20).text.hasPrefix("HTTP/1.1 200"))
        let served = waitUntil {
            guard let next = try? RawConnection(port: server.port) else { return false }
            next.send("GET /next HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            return next.readUntilClosed(timeout: 20).text.hasPrefix("HTTP/1.1 200")
        }
        #expect(served)
    }

    @Test(arguments: [
        // Two lengths: the first would end the body early and run the rest as a request of its own.
        ("Content-Length: 2\r\nContent-Length: 37", "400", "more than one Content-Length"),
        ("Content-Length: 37\r\nContent-Length: 37", "400", "more than one Content-Length"),
        ("Transfer-Encoding: gzip, chunked", "501", "unsupported-transfer-encoding"),
        ("Transfer-Encoding: identity\r\nContent-Length: 37", "501", "unsupported-transfer-encoding"),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", "501", "unsupported-transfer-encoding"),
        ("Transfer-Encoding: chunked\r\nContent-Length: 37", "400", "both Content-Length and Transfer-Encoding"),
    ])
    func aBodyOfAmbiguousLengthIsRefusedAndTheConnectionClosed(framing: String, status: String, reason: String) throws {
        let handled = Collected<String>()
        let server = try HTTPServer(configuration: .init()) { request in
            handled.add(request.path)
            return Self.echo(request)
        }
        defer { server.shutdown() }
        let connection = try RawConnection(port: server.port)
        // 37 bytes of body: `{}` and a whole second request.
        connection.send("POST /first HTTP/1.1\r\nHost: t\r\n\(framing)\r\n\r\n{}GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n")
        let answer = connection.readUntilClosed(timeout: 10)
        #expect(answer.closed, "the connection was left open")
        #expect(answer.text.hasPrefix("HTTP/1.1 \(status)") && answer.text.contains(reason), "\(answer.text)")
        #expect(answer.text.lowercased().contains("connection: close"), "\(answer.text)")
        #expect(answer.text.components(separatedBy: "HTTP/1.1 ").count == 2, "more than one answer: \(answer.text)")
        #expect(handled.list.isEmpty, "handled: \(handled.list)")
    }

    @Test func shutdownAnswersRequestsInFlightThenRefusesConnections() throws {
        // The handler holds every answer until the test releases them: once all 8 requests have
        // reached it and the server has stopped accepting connections (shutdown has begun).
        let held = Collected<(HTTPRequest, HTTPResponder)>()  // answered only when the test says
        let server = try HTTPServer(configuration: .init()) { request, responder in held.add((request, responder)) }
        let client = try HTTPClient(port: server.port, connections: 8)
        let statuses = Collected<Int>()
        let answered = DispatchSemaphore(value: 0)
        Thread {
            for status in concurrently(8, { index in (try? client.post("/x", "\(index)"))?.status ?? -1 }) { statuses.add(status) }
            answered.signal()
        }.start()
        try #require(waitUntil { held.list.count == 8 }, "the 8 requests never reached the handler")
        let shutdown = DispatchSemaphore(value: 0)
        Thread {
            server.shutdown(grace: 60)
            shutdown.signal()
        }.start()
        try #require(waitUntil { (try? RawConnection(port: server.port)) == nil }, "the server still accepts connections")
        #expect(server.requestsInFlight == 8)
        for (request, responder) in held.list { responder.respond(Self.echo(request)) }
        answered.wait()
        shutdown.wait()
        #expect(statuses.list == Array(repeating: 200, count: 8))
        #expect(server.requestsInFlight == 0)
        #expect(throws: (any Error).self) { try RawConnection(port: server.port) }
    }

    @Test func aRequestWhoseBodyIsStillArrivingWhenTheServerQuiescesIsHandled() throws {
        // Counted in flight from its headers on, it is not refused for arriving before the rest of its body.
        let server = try HTTPServer(configuration: .init(), respond: Self.echo)
        defer { server.shutdown() }
        let early = try RawConnection(port: server.port)
        early.send("POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n01234")
        try #require(waitUntil { server.requestsInFlight == 1 }, "the request's headers never reached the server")
        server.quiesce()
        early.send("56789")
        let answer = early.readUntilClosed(timeout: 30)
        #expect(answer.text.hasPrefix("HTTP/1.1 200"), "\(answer.text)")
        #expect(answer.text.contains(#""body":"0123456789""#), "\(answer.text)")
        #expect(answer.text.lowercased().contains("connection: close"), "\(answer.text)")
        #expect(throws: (any Error).self) { try RawConnection(port: server.port) }
    }

    /// Polls `condition` every millisecond for up to 60 seconds (a generous deadline for a loaded
    /// machine); whether it became true.
    func waitUntil(_ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(60)
        while !condition() {
            guard Date() < deadline else { return false }
            usleep(1_000)
        }
        return true
    }

    @Test func shutdownAnswers503WhatIsStillUnansweredAfterTheGracePeriod() throws {
        let held = Collected<(HTTPRequest, HTTPResponder)>()  // answered only when the test says
        let server = try HTTPServer(configuration: .init()) { request, responder in held.add((request, responder)) }  // never answers
        let client = try HTTPClient(port: server.port)
        let statuses = Collected<Int>()
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            statuses.add((try? client.get("/never"))?.status ?? -1)
            done.signal()
        }
        try #require(waitUntil { held.list.count == 1 }, "the request never reached the handler")
        server.shutdown(grace: 0.1)
        done.wait()
        #expect(statuses.list == [503])
    }

    @Test func refusesAnAddressItCannotListenOn() throws {
        let first = try HTTPServer(configuration: .init(), respond: Self.echo)
        defer { first.shutdown() }
        let error = #expect(throws: HTTPServerError.self) { try HTTPServer(configuration: .init(port: first.port), respond: Self.echo) }
        // The port asked for, also in libmicrohttpd's own words (which used to say port 0).
        #expect(error?.description.hasPrefix("cannot listen on 127.0.0.1 port \(first.port): ") == true, "\(String(describing: error))")
        #expect(error?.description.contains("port 0") == false, "\(String(describing: error))")
        #expect(throws: HTTPServerError.self) { try HTTPServer(configuration: .init(host: "no-such-host.invalid"), respond: Self.echo) }
    }

    @Test func servesTLS12AndLaterOnly() throws {
        let folder = LedgerBinary.packageRoot.appendingPathComponent("Tests/HTTPServerTests/TLS")
        let certificate = folder.appendingPathComponent("localhost.cert.pem")
        let tls = HTTPServer.TLS(
            certificatePEM: try String(contentsOf: certificate, encoding: .utf8),
            keyPEM: try String(contentsOf: folder.appendingPathComponent("localhost.key.pem"), encoding: .utf8))
        let server = try HTTPServer(configuration: .init(tls: tls), respond: Self.echo)
        defer { server.shutdown() }
        let url = "https://localhost:\(server.port)/secure"
        let ok = try Curl.run(["--silent", "--cacert", certificate.path, url])
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(Fixtures.object(ok.stdout)["path"] as? String == "/secure")
        let old = try Curl.run(["--silent", "--cacert", certificate.path, "--tlsv1.1", "--tls-max", "1.1", url])
        #expect(old.status != 0)
        let plain = try Curl.run(["--silent", "http://localhost:\(server.port)/secure"])
        #expect(!plain.stdout.contains("/secure"))
    }
}
