import AppleSignedData
import FirebaseAuth
import Foundation
import OwnershipLedger

/// `ledger bench serve`: `ledger serve` under N keep-alive clients on loopback. Builds a fresh store
/// trusting the test Apple PKI, signs distinct purchases with it and Firebase ID tokens with the test
/// RSA key (`--fixtures`, the repository's `Tests/`), starts `ledger serve` as a child process, and
/// measures decisions/s, latency percentiles, the group sizes the writer committed and the server's
/// memory while it runs.
enum ServeBenchmark {
    struct Options {
        var clients = 64
        var requests = 20_000
        /// `transactions` (one signed purchase per request) or `submit` (NDJSON batches).
        var route = "transactions"
        var batch = 100
        /// Purchases each account makes with its one Firebase ID token (apps reuse a token for up to
        /// an hour): 1 verifies every token once; more shows what the verified-token cache saves.
        var purchasesPerAccount = 1
        var fixtures = URL(fileURLWithPath: "Tests")
        /// The `ledger` binary to run as the server; this one when nil. Two builds' servers can so be
        /// compared under the very same clients.
        var server: URL?
        var directory: URL
    }

    static let projectId = "myrecipes-bench"
    /// What ``run(_:log:)`` reads under ``Options/fixtures``.
    static let fixtureFiles =
        ["testLeaf.der", "testIntermediate.der", "testCA.der", "testLeaf.key.pem"].map { "AppleSignedDataTests/Vectors/certs/" + $0 }
        + ["token-signer-1.key.pem", "certificates.json"].map { "FirebaseAuthTests/Keys/" + $0 }

    static func run(_ options: Options, log: (String) -> Void) throws -> JSONObject {
        let apple = options.fixtures.appendingPathComponent("AppleSignedDataTests/Vectors/certs")
        let firebase = options.fixtures.appendingPathComponent("FirebaseAuthTests/Keys")
        let store = options.directory.appendingPathComponent("store")
        try FileManager.default.createDirectory(at: options.directory, withIntermediateDirectories: true)
        _ = try Ledger.initialize(
            at: store,
            configuration: LedgerConfiguration(
                bundleId: "com.myrecipes.app", environment: .sandbox,
                rootCertificates: [try Data(contentsOf: apple.appendingPathComponent("testCA.der"))]))

        let decisions = options.route == "submit" ? options.requests * options.batch : options.requests
        // Each purchase is a new lineage bought by a new account (or N per account, each account with
        // one token, with --purchases-per-account), as in production (one account holds a few
        // lineages, never thousands: that would measure a pathological read model instead).
        let perAccount = max(1, options.purchasesPerAccount)
        let accounts = options.route == "submit" ? 0 : (decisions + perAccount - 1) / perAccount
        log("signing \(decisions) purchases with the test PKI and \(accounts) Firebase ID tokens")
        let chain = try ["testLeaf.der", "testIntermediate.der", "testCA.der"].map {
            [UInt8](try Data(contentsOf: apple.appendingPathComponent($0)))
        }
        let appleKey = try String(contentsOf: apple.appendingPathComponent("testLeaf.key.pem"), encoding: .utf8)
        let firebaseKey = try String(contentsOf: firebase.appendingPathComponent("token-signer-1.key.pem"), encoding: .utf8)
        let now = Int64(Date().timeIntervalSince1970)
        let purchases = try signedInParallel(decisions) { index in
            let start = (now - 3_600) * 1000
            let id = String(4_000_000_000_000_000 + index)
            return try TestJWSSigner.sign(
                payload: [
                    "originalTransactionId": id, "transactionId": id, "productId": "com.myrecipes.premium.monthly",
                    "bundleId": "com.myrecipes.app", "purchaseDate": start, "expiresDate": start + 30 * 86_400_000,
                    "inAppOwnershipType": "PURCHASED", "environment": "Sandbox", "signedDate": start,
                    "type": "Auto-Renewable Subscription",
                ], chain: chain, privateKeyPEM: appleKey)
        }
        let tokens = try signedInParallel(accounts) { user in
            try TestTokenSigner.sign(
                claims: TestTokenSigner.claims(projectId: projectId, uid: "bench-user-\(user)", now: now), keyId: "test-key-1",
                algorithm: .rs256(privateKeyPEM: firebaseKey))
        }
        let serviceToken = String(repeating: "b3", count: 32)
        let tokenFile = options.directory.appendingPathComponent("service-tokens")
        try Data((serviceToken + "\n").utf8).write(to: tokenFile)
        chmod(tokenFile.path, 0o600)
        let requests: [[UInt8]] = (0..<options.requests).map { index in
            if options.route == "submit" {
                let lines = (0..<options.batch).map { line in
                    let n = index * options.batch + line
                    return JSONLine.render(["type": "purchase", "account": "bench-user-\(n)", "signedTransaction": purchases[n]])
                }
                return request("/v1/submit", bearer: serviceToken, body: lines.joined(separator: "\n") + "\n")
            }
            return request(
                // An account's purchases are spread through the run (one app does not buy four things at once).
                "/v1/transactions", bearer: tokens[index % accounts],
                body: JSONLine.render(["type": "purchase", "signedTransaction": purchases[index]]))
        }

        let server = try Server(
            executable: options.server, store: store, certificates: firebase.appendingPathComponent("certificates.json"),
            tokenFile: tokenFile, log: options.directory.appendingPathComponent("serve.log"),
            // Every client connects from loopback, one address: more than the server's default
            // 128 connections per address are let in (older builds, compared at fewer clients,
            // never see the option).
            options: options.clients > 128 ? ["--max-connections-per-ip", "0"] : [])
        defer { server.stop() }
        log("ledger serve listening on port \(server.port); \(options.clients) clients, \(options.requests) requests to /v1/\(options.route)")
        let load = Load(requests: requests, clients: options.clients, port: server.port, sampleMemory: server.anonymousKiB)
        let serverCPUBefore = server.cpuSeconds()
        let clientCPUBefore = BenchCommand.processCPUNanoseconds()
        let started = Date()
        load.run()
        let seconds = Date().timeIntervalSince(started)
        // CPU per decision during the load alone, for the server and for these clients: figures that
        // other processes on the cores inflate far less than decisions/s.
        let clientCPU = Double(BenchCommand.processCPUNanoseconds() - clientCPUBefore) / 1e9
        let serverCPU = server.cpuSeconds() - serverCPUBefore
        let metrics = try server.metrics()
        let latencies = load.latencies.sorted()
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] * 1000
        }
        var figures: JSONObject = [
            "route": "/v1/\(options.route)", "clients": options.clients, "requests": options.requests,
            "decisions": decisions, "seconds": (seconds * 1000).rounded() / 1000,
            "decisionsPerSecond": Int(Double(decisions) / seconds), "requestsPerSecond": Int(Double(options.requests) / seconds),
            "latencyMs": ["p50": percentile(0.5), "p90": percentile(0.9), "p99": percentile(0.99), "max": percentile(1)].mapValues {
                ($0 * 100).rounded() / 100
            },
            "statuses": Dictionary(load.statuses.map { (String($0.key), $0.value) }, uniquingKeysWith: +),
            // Anonymous memory (heap, stacks), sampled at each tenth of the run: the LMDB map's file pages
            // are resident too but grow with the store, not with the load.
            "serverAnonymousMiB": load.memory.map { Double($0 / 1024) },
            "serverPeakResidentMiB": Double(server.peakResidentKiB() / 1024),
            "serverCPUSeconds": (server.cpuSeconds() * 100).rounded() / 100,
            "serverCPUMsPerDecision": (serverCPU / Double(decisions) * 1e6).rounded() / 1000,
            "clientCPUMsPerDecision": (clientCPU / Double(decisions) * 1e6).rounded() / 1000,
            "cores": ProcessInfo.processInfo.activeProcessorCount,
        ]
        if options.route == "submit" { figures["batch"] = options.batch } else { figures["purchasesPerAccount"] = perAccount }
        figures.merge(metrics) { $1 }
        let exit = server.stop()
        figures["serverExitStatus"] = Int(exit)
        return figures
    }

    /// `count` values of `sign(index)`, made on every core (signing 20,000 tokens and JWS one by one
    /// takes minutes); the first error thrown, if any.
    static func signedInParallel(_ count: Int, _ sign: @Sendable (Int) throws -> String) throws -> [String] {
        final class Results: @unchecked Sendable {
            let lock = NSLock()
            var values: [String?]
            var error: (any Error)?
            init(_ count: Int) { values = Array(repeating: nil, count: count) }
        }
        let results = Results(count)
        let slices = max(1, min(count, ProcessInfo.processInfo.activeProcessorCount))
        DispatchQueue.concurrentPerform(iterations: slices) { slice in
            var signed: [(Int, String)] = []
            do {
                for index in stride(from: slice, to: count, by: slices) { signed.append((index, try sign(index))) }
            } catch {
                results.lock.withLock { results.error = results.error ?? error }
            }
            results.lock.withLock { for (index, value) in signed { results.values[index] = value } }
        }
        if let error = results.error { throw error }
        return results.values.map { $0 ?? "" }
    }

    /// A keep-alive HTTP/1.1 request.
    static func request(_ path: String, bearer: String, body: String) -> [UInt8] {
        Array(
            ("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(bearer)\r\nContent-Type: application/json\r\n"
                + "Content-Length: \(body.utf8.count)\r\n\r\n" + body).utf8)
    }

    /// The `ledger serve` child process.
    final class Server {
        let process = Process()
        let port: UInt16
        private var stopped: Int32?

        init(executable: URL?, store: URL, certificates: URL, tokenFile: URL, log: URL, options: [String]) throws {
            process.executableURL = executable ?? URL(fileURLWithPath: Bundle.main.executablePath ?? CommandLine.arguments[0])
            process.arguments =
                [
                    "serve", "--store", store.path, "--listen", "127.0.0.1:0", "--firebase-project-id", ServeBenchmark.projectId,
                    "--firebase-certificates", certificates.path, "--service-token-file", tokenFile.path,
                ] + options
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            process.standardError = try FileHandle(forWritingTo: log)
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            let line = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
            guard let address = (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])?["listening"],
                let port = address.split(separator: ":").last.flatMap({ UInt16($0) })
            else {
                process.terminate()
                throw CLIError(code: .storeError, message: "ledger serve did not start: \(line)")
            }
            self.port = port
        }

        @discardableResult
        func stop() -> Int32 {
            if let stopped { return stopped }
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
            stopped = process.terminationStatus
            return process.terminationStatus
        }

        private func status(_ field: String) -> Int {
            guard let text = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8),
                let line = text.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") })
            else { return 0 }
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0") ?? 0
        }

        func anonymousKiB() -> Int { status("RssAnon") }
        func peakResidentKiB() -> Int { status("VmHWM") }

        /// User plus system CPU seconds the server has used.
        func cpuSeconds() -> Double {
            guard let text = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
                let close = text.lastIndex(of: ")")
            else { return 0 }
            let fields = text[text.index(after: close)...].split(separator: " ")
            guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
            return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
        }

        /// Commit group sizes and queue figures from `/metrics`.
        func metrics() throws -> JSONObject {
            let connection = try Connection(port: port)
            let text = String(decoding: try connection.exchange(Array("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)).body, as: UTF8.self)
            var buckets: [(bound: String, count: Int)] = []
            var sum = 0.0
            var count = 0
            var commitSeconds = 0.0
            for line in text.split(separator: "\n") {
                let parts = line.split(separator: " ")
                guard parts.count == 2 else { continue }
                if line.hasPrefix("ledger_commit_group_size_bucket{le=\"") {
                    buckets.append((String(parts[0].dropFirst("ledger_commit_group_size_bucket{le=\"".count).dropLast(2)), Int(parts[1]) ?? 0))
                } else if line.hasPrefix("ledger_commit_group_size_sum") {
                    sum = Double(parts[1]) ?? 0
                } else if line.hasPrefix("ledger_commit_group_size_count") {
                    count = Int(parts[1]) ?? 0
                } else if line.hasPrefix("ledger_commit_seconds_sum") {
                    commitSeconds = Double(parts[1]) ?? 0
                }
            }
            // Per-bucket counts rather than Prometheus' cumulative ones.
            var previous = 0
            var sizes: [String: Int] = [:]
            for bucket in buckets {
                if bucket.count > previous { sizes["≤" + bucket.bound] = bucket.count - previous }
                previous = bucket.count
            }
            return [
                "commits": count, "meanGroupSize": count == 0 ? 0 : (sum / Double(count) * 10).rounded() / 10, "groupSizes": sizes,
                "meanCommitMs": count == 0 ? 0 : (commitSeconds / Double(count) * 100_000).rounded() / 100,
            ]
        }
    }

    /// The clients: `clients` keep-alive connections, each with one request in flight at a time (the
    /// next request goes out when the answer to the last is in), driven by one thread that waits on
    /// all of them with `poll`. One thread rather than one per connection: the load generator shares the
    /// cores with the server, and 64 blocking threads spend several times the CPU on being woken.
    final class Load: @unchecked Sendable {
        let requests: [[UInt8]]
        let clients: Int
        let port: UInt16
        let sampleMemory: () -> Int
        private let lock = NSLock()
        private var answered = 0
        private(set) var latencies: [Double] = []
        private(set) var statuses: [Int: Int] = [:]
        private(set) var memory: [Int] = []

        init(requests: [[UInt8]], clients: Int, port: UInt16, sampleMemory: @escaping () -> Int) {
            self.requests = requests
            self.clients = clients
            self.port = port
            self.sampleMemory = sampleMemory
            latencies.reserveCapacity(requests.count)
        }

        func run() {
            let finished = DispatchSemaphore(value: 0)
            Thread {
                self.drive()
                finished.signal()
            }.start()
            // Resident memory at each tenth of the run.
            var mark = 0
            while finished.wait(timeout: .now() + .milliseconds(20)) == .timedOut {
                let done = lock.withLock { answered }
                if done >= (mark + 1) * requests.count / 10 {
                    mark += 1
                    let kib = sampleMemory()
                    lock.withLock { memory.append(kib) }
                }
            }
        }

        /// One connection's request in flight: its index, when it was sent, how much of it is sent.
        private struct Flight {
            var request: Int
            var started: DispatchTime
            var sent: Int
        }

        private func drive() {
            var connections: [Connection] = []
            var flights: [Flight?] = []
            /// What `poll` watches on each connection: answers (POLLIN), and room to send (POLLOUT)
            /// while a request waits for it; a closed connection's descriptor is -1 (ignored).
            var watched: [pollfd] = []
            var next = 0
            var open = 0
            /// Sends what it can of connection `slot`'s request; watches for room when the socket is full.
            func push(_ slot: Int) -> Bool {
                guard var flight = flights[slot] else { return true }
                let request = requests[flight.request]
                while flight.sent < request.count {
                    let written = request[flight.sent...].withUnsafeBytes {
                        send(connections[slot].socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                    }
                    if written < 0 && errno == EAGAIN { break }
                    guard written > 0 else { return false }
                    flight.sent += written
                }
                flights[slot] = flight
                watched[slot].events = Int16(POLLIN) | (flight.sent < request.count ? Int16(POLLOUT) : 0)
                return true
            }
            /// Closes connection `slot`; a request it had in flight is counted with status 0.
            func drop(_ slot: Int) {
                if flights[slot] != nil {
                    lock.withLock {
                        statuses[0, default: 0] += 1
                        answered += 1
                    }
                }
                flights[slot] = nil
                watched[slot].fd = -1
                open -= 1
            }
            /// Sends the next request on connection `slot`; closes it when none is left or it fails.
            func start(_ slot: Int) {
                guard next < requests.count else { return drop(slot) }
                flights[slot] = Flight(request: next, started: .now(), sent: 0)
                next += 1
                if !push(slot) { drop(slot) }
            }
            for _ in 0..<clients {
                guard let connection = try? Connection(port: port) else { break }
                _ = fcntl(connection.socket, F_SETFL, fcntl(connection.socket, F_GETFL) | O_NONBLOCK)
                connections.append(connection)
                flights.append(nil)
                watched.append(pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0))
            }
            open = connections.count
            for slot in connections.indices { start(slot) }
            while open > 0 {
                let ready = poll(&watched, nfds_t(watched.count), 10_000)
                if ready < 0 && errno == EINTR { continue }
                guard ready > 0 else { return }  // nothing for 10 s, or poll failed: the server is gone
                for slot in watched.indices where watched[slot].fd >= 0 && watched[slot].revents != 0 {
                    let events = watched[slot].revents
                    guard let flight = flights[slot] else { continue }
                    if events & Int16(POLLOUT) != 0 && !push(slot) {
                        drop(slot)
                        continue
                    }
                    guard events & Int16(POLLIN | POLLHUP | POLLERR) != 0 else { continue }
                    // One read per readiness: an answer not yet complete makes the connection
                    // ready again when more of it arrives (no `recv` that only says "nothing more").
                    let alive = connections[slot].receiveOnce()
                    if let status = connections[slot].takeResponse()?.status {
                        let seconds = Double(DispatchTime.now().uptimeNanoseconds - flight.started.uptimeNanoseconds) / 1e9
                        lock.withLock {
                            latencies.append(seconds)
                            statuses[status, default: 0] += 1
                            answered += 1
                        }
                        flights[slot] = nil
                        if alive { start(slot) } else { drop(slot) }
                    } else if !alive {
                        drop(slot)
                    }
                }
            }
        }
    }

    /// One keep-alive connection. It reads answers framed by `Content-Length`, which is how
    /// `ledger serve` sends every answer; it is the benchmark's client, not an HTTP implementation,
    /// and is kept cheap (one receive buffer, headers scanned as bytes) so that the clients take as
    /// little as they can of the cores the server runs on.
    final class Connection {
        let socket: Int32
        /// Received bytes; those before `start` are consumed.
        private var buffer = [UInt8](repeating: 0, count: 1 << 16)
        private var start = 0
        private var end = 0

        init(port: UInt16) throws {
            socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var one: Int32 = 1
            setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            // Not closed here: deinit runs when an initialised object's init throws, and a second
            // close(2) would close whatever another thread's descriptor reused the number.
            guard connected == 0 else { throw CLIError(code: .storeError, message: "cannot connect to 127.0.0.1:\(port)") }
        }

        deinit { if socket >= 0 { close(socket) } }

        struct Failure: Error {}

        /// Sends `request` and reads one answer: its status and body (a blocking socket).
        func exchange(_ request: [UInt8]) throws -> (status: Int, body: [UInt8]) {
            var sent = 0
            while sent < request.count {
                let written = request[sent...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard written > 0 else { throw Failure() }
                sent += written
            }
            while true {
                if let response = takeResponse() { return response }
                guard try fill() else { throw Failure() }
            }
        }

        /// The first complete answer received, taken out of the buffer; nil until all of it is in.
        func takeResponse() -> (status: Int, body: [UInt8])? {
            guard let headerEnd = Self.headerEnd(buffer, from: start, to: end) else { return nil }
            let (status, length) = Self.statusAndLength(buffer[start..<headerEnd])
            guard end >= headerEnd + length else { return nil }
            let body = Array(buffer[headerEnd..<(headerEnd + length)])
            start = headerEnd + length
            if start == end { (start, end) = (0, 0) }
            return (status, body)
        }

        /// Reads what has arrived on a non-blocking socket, with one `recv`; false when the
        /// connection is closed or failed.
        func receiveOnce() -> Bool { (try? fill()) != nil }

        /// The index just past the first CRLF CRLF in `bytes[from..<to]`.
        private static func headerEnd(_ bytes: [UInt8], from: Int, to: Int) -> Int? {
            var index = from
            while index + 3 < to {
                if bytes[index] == 13, bytes[index + 1] == 10, bytes[index + 2] == 13, bytes[index + 3] == 10 { return index + 4 }
                index += 1
            }
            return nil
        }

        /// The status code of a response head and its `Content-Length` (0 when absent).
        private static func statusAndLength(_ head: ArraySlice<UInt8>) -> (Int, Int) {
            func number(_ digits: some Sequence<UInt8>) -> Int {
                digits.prefix { $0 >= 48 && $0 <= 57 }.reduce(0) { $0 * 10 + Int($1 - 48) }
            }
            let afterVersion = head.drop { $0 != 32 }.dropFirst()
            let status = number(afterVersion)
            let name = Array("content-length:".utf8)
            var length = 0
            var line = head.startIndex
            while line < head.endIndex {
                let lineEnd = head[line...].firstIndex(of: 10) ?? head.endIndex
                if lineEnd - line > name.count, zip(head[line...], name).allSatisfy({ $0 | 0x20 == $1 | 0x20 }) {
                    length = number(head[(line + name.count)..<lineEnd].drop { $0 == 32 || $0 == 9 })
                }
                line = lineEnd + 1
            }
            return (status, length)
        }

        /// Receives more bytes into the buffer: true when some came, false when none are there yet
        /// (a non-blocking socket); throws when the connection is closed or failed.
        private func fill() throws -> Bool {
            if start > 0 {
                buffer.withUnsafeMutableBufferPointer { bytes in
                    guard let base = bytes.baseAddress else { return }
                    base.update(from: base + start, count: end - start)
                }
                (start, end) = (0, end - start)
            }
            if end == buffer.count { buffer += [UInt8](repeating: 0, count: buffer.count) }
            let count = buffer.withUnsafeMutableBytes { bytes in recv(socket, bytes.baseAddress.map { $0 + end }, bytes.count - end, 0) }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return false }
            guard count > 0 else { throw Failure() }
            end += count
            return true
        }
    }
}
