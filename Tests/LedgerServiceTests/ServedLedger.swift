import AppleSignedData
import FirebaseAuth
import Foundation
import LedgerTestSupport
import OwnershipLedger

/// A `ledger serve` process on 127.0.0.1:0 over a fresh store that trusts the test Apple PKI, with
/// the test Firebase certificates and one service token; its log goes to a file. Tests talk real
/// HTTP to it and open the store themselves to check what was written.
final class ServedLedger: @unchecked Sendable {
    static let projectId = "myrecipes-test"
    static let serviceToken = "svc-" + String(repeating: "7f3a", count: 12)
    static let root = LedgerBinary.packageRoot.appendingPathComponent("Tests")
    static let appleCertificates = root.appendingPathComponent("AppleSignedDataTests/Vectors/certs")
    static let firebaseKeys = root.appendingPathComponent("FirebaseAuthTests/Keys")

    let directory = TemporaryDirectory("ledger-serve")
    var store: String { directory.path("store").path }
    var logFile: URL { directory.path("serve.log") }
    let process = Process()
    let port: UInt16
    let client: HTTPClient

    /// Starts the server with `options` added to the defaults (and the service token file unless
    /// `serviceTokens` is false), on the store `storeOptions` name (a new store directory by default),
    /// with `environment` added to its own.
    init(
        _ options: [String] = [], serviceTokens: Bool = true, connections: Int = 8, storeOptions: [String]? = nil,
        environment: [String: String] = [:]
    ) throws {
        let storeOptions = storeOptions ?? ["--store", directory.path("store").path]
        let initialized = try LedgerBinary.run(
            ["init", "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"] + storeOptions + [
                "--root-certificate", Self.appleCertificates.appendingPathComponent("testCA.der").path,
            ])
        guard initialized.status == 0 else { throw ServeTestError("ledger init failed: \(initialized.stderr)") }
        let tokens = directory.path("service-tokens")
        try Data((Self.serviceToken + "\n").utf8).write(to: tokens)
        chmod(tokens.path, 0o600)
        _ = FileManager.default.createFile(atPath: directory.path("serve.log").path, contents: nil)
        process.executableURL = LedgerBinary.url
        process.arguments =
            ["serve"] + storeOptions + [
                "--listen", "127.0.0.1:0", "--firebase-project-id", Self.projectId,
                "--firebase-certificates", Self.firebaseKeys.appendingPathComponent("certificates.json").path,
            ] + (serviceTokens ? ["--service-token-file", tokens.path] : []) + options
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        let out = Pipe()
        process.standardOutput = out
        process.standardError = try FileHandle(forWritingTo: directory.path("serve.log"))
        try process.run()
        guard let line = Self.readLine(out.fileHandleForReading.fileDescriptor, timeout: 20),
            OutputSchemas.shared.problems(line, against: "serve.schema.json").isEmpty, let listening = Fixtures.object(line)["listening"] as? String,
            listening.hasPrefix("127.0.0.1:"),
            let port = UInt16(listening.dropFirst("127.0.0.1:".count))
        else {
            process.terminate()
            throw ServeTestError(
                "ledger serve did not print its address: \(String(decoding: (try? Data(contentsOf: directory.path("serve.log"))) ?? Data(), as: UTF8.self))"
            )
        }
        self.port = port
        client = try HTTPClient(port: port, connections: connections)
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        directory.remove()
    }

    /// Sends `signal` and waits for the process to end; its exit status.
    @discardableResult
    func stop(_ signal: Int32 = SIGTERM) -> Int32 {
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// The store, opened by the test (alongside the server, or after it).
    func ledger() throws -> Ledger { try Ledger(opening: directory.path("store")) }

    var log: String { String(decoding: (try? Data(contentsOf: logFile)) ?? Data(), as: UTF8.self) }

    /// A gauge or counter of `/metrics` (the sample whose name and labels are `sample`).
    func metric(_ sample: String) throws -> Double? {
        let text = try client.get("/metrics").text
        // The value follows the last space: label values may hold spaces (`endpoint="POST /inApps/…"`).
        return text.split(separator: "\n").first { $0.hasPrefix(sample + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    /// Polls `condition` for up to 60 seconds (generous, for a loaded machine: a condition that holds
    /// ends the wait at once); whether it became true.
    func waitUntil(_ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if try condition() { return true }
            usleep(5_000)
        }
        return false
    }

    /// Holds the store's write lock from the test process (an LMDB write transaction left open)
    /// until ``release()``: the server's writer waits for it, its readers do not.
    final class WriterHold: @unchecked Sendable {
        private let entered = DispatchSemaphore(value: 0)
        private let released = DispatchSemaphore(value: 0)
        private let done = DispatchSemaphore(value: 0)

        init(_ ledger: Ledger) {
            Thread {
                _ = try? ledger.store.write { _, _ in
                    self.entered.signal()
                    self.released.wait()
                }
                self.done.signal()
            }.start()
            entered.wait()
        }

        func release() {
            released.signal()
            done.wait()
        }
    }

    /// Sends a request on another thread; its answer once it comes.
    final class Pending: @unchecked Sendable {
        private let lock = NSLock()
        private var answer: HTTPClient.Response?
        private let finished = DispatchSemaphore(value: 0)

        init(_ send: @escaping @Sendable () throws -> HTTPClient.Response) {
            Thread {
                let answer = try? send()
                self.lock.withLock { self.answer = answer }
                self.finished.signal()
            }.start()
        }

        var isAnswered: Bool { lock.withLock { answer != nil } }

        func wait() -> HTTPClient.Response? {
            finished.wait()
            finished.signal()
            return lock.withLock { answer }
        }
    }

    // MARK: Requests

    func authorization(_ uid: String) throws -> [String: String] { ["Authorization": "Bearer " + (try Self.token(uid))] }

    /// POST /v1/transactions as `uid`.
    func transaction(_ type: String, as uid: String, _ jws: String) throws -> HTTPClient.Response {
        try client.post(
            "/v1/transactions", Fixtures.line(["type": type, "signedTransaction": jws]),
            headers: try authorization(uid).merging(["Content-Type": "application/json"]) { $1 })
    }

    // MARK: Signed data

    /// A Firebase ID token for `uid`, valid now, signed with test key 1.
    static func token(_ uid: String, change: (inout [String: Any]) -> Void = { _ in }) throws -> String {
        var claims = TestTokenSigner.claims(projectId: projectId, uid: uid, now: Int64(Date().timeIntervalSince1970))
        change(&claims)
        let key = try String(contentsOf: firebaseKeys.appendingPathComponent("token-signer-1.key.pem"), encoding: .utf8)
        return try TestTokenSigner.sign(claims: claims, keyId: "test-key-1", algorithm: .rs256(privateKeyPEM: key))
    }

    /// An hour ago, in ms: purchases start then and last 30 days, so they are active now.
    static var anHourAgo: Int64 { Int64(Date().timeIntervalSince1970 * 1000) - 3_600_000 }

    /// An App Store transaction signed with the test PKI.
    static func signedTransaction(
        _ originalTransactionId: String, transactionId: String? = nil, ownership: String = "PURCHASED", bundleId: String = Fixtures.bundleId
    ) throws -> String {
        try sign(
            Fixtures.transaction(
                originalTransactionId, transactionId: transactionId, at: anHourAgo, ownership: ownership, bundleId: bundleId))
    }

    /// A signed App Store Server Notification about `transaction`.
    static func signedNotification(_ type: String, uuid: String, transaction: String, bundleId: String = Fixtures.bundleId) throws -> String {
        try sign([
            "notificationType": type, "notificationUUID": uuid, "signedDate": anHourAgo, "version": "2.0",
            "data": ["environment": "Sandbox", "bundleId": bundleId, "signedTransactionInfo": transaction],
        ])
    }

    static func sign(_ payload: [String: Any]) throws -> String {
        let chain = try ["testLeaf.der", "testIntermediate.der", "testCA.der"].map {
            [UInt8](try Data(contentsOf: appleCertificates.appendingPathComponent($0)))
        }
        let key = try String(contentsOf: appleCertificates.appendingPathComponent("testLeaf.key.pem"), encoding: .utf8)
        return try TestJWSSigner.sign(payload: payload, chain: chain, privateKeyPEM: key)
    }

    /// Reads one line from `descriptor`, waiting at most `timeout` seconds.
    static func readLine(_ descriptor: Int32, timeout: Double) -> String? {
        var bytes: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            var byte: UInt8 = 0
            guard read(descriptor, &byte, 1) == 1 else { return nil }
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
        return nil
    }
}

struct ServeTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
