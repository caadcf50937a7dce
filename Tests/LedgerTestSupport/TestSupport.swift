import AppleSignedData
import Foundation
import LedgerCore
import LedgerStore
import OwnershipLedger
public import StrictJSON

/// A fresh directory under the system temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let url: URL

    public init(_ label: String = "ledger-test") {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    public func path(_ component: String) -> URL { url.appendingPathComponent(component) }

    public func remove() { try? FileManager.default.removeItem(at: url) }
}

/// Fixtures shared by the test targets.
public enum Fixtures {
    public static let bundleId = "com.myrecipes.app"
    public static let day: Int64 = 86_400_000
    /// 2026-11-01T00:00:00Z.
    public static let start: Int64 = 1_793_491_200_000

    public static let configuration = LedgerConfiguration(bundleId: bundleId, environment: .sandbox)

    /// The ledger clock of library tests: a fixed instant before every business time they use, so
    /// every record is "known" at those times (`recordedAt` never follows the caller's `at`). Tests
    /// of time cuts drive a ``ManualClock`` instead.
    public static let recordedAt: Int64 = start - 30 * day
    public static let clock: @Sendable () -> Int64 = { recordedAt }

    /// A new ledger in a temporary directory (on the store ``TestStore/current`` names: its key
    /// files in the directory's `store`).
    public static func ledger(_ configuration: LedgerConfiguration = configuration, clock: @escaping @Sendable () -> Int64 = clock) throws
        -> (Ledger, TemporaryDirectory)
    {
        let directory = TemporaryDirectory()
        let ledger = try Ledger.initialize(at: TestStore.current.location(in: directory), configuration: configuration, clock: clock)
        return (ledger, directory)
    }

    /// A decoded transaction with Apple's field names, as `--trust-decoded` takes it.
    public static func transaction(
        _ originalTransactionId: String, transactionId: String? = nil, at purchase: Int64, days: Int64 = 30,
        ownership: String = "PURCHASED", revokedAt: Int64? = nil, environment: String = "Sandbox", bundleId: String = bundleId
    ) -> [String: Any] {
        var object: [String: Any] = [
            "originalTransactionId": originalTransactionId, "transactionId": transactionId ?? originalTransactionId,
            "productId": "com.myrecipes.premium.monthly", "bundleId": bundleId, "purchaseDate": purchase,
            "expiresDate": purchase + days * day, "inAppOwnershipType": ownership, "environment": environment,
            "signedDate": purchase,
        ]
        if let revokedAt { object["revocationDate"] = revokedAt }
        return object
    }

    /// A decoded notification about `transaction`.
    public static func notification(_ type: String, uuid: String, transaction: [String: Any], at: Int64) -> [String: Any] {
        [
            "notificationType": type, "notificationUUID": uuid, "signedDate": at,
            "data": ["environment": "Sandbox", "bundleId": bundleId, "transaction": transaction],
        ]
    }

    /// The payload form of ``transaction(_:transactionId:at:days:ownership:revokedAt:environment:bundleId:)``.
    public static func payload(_ json: [String: Any]) throws -> TransactionPayload {
        try TransactionPayload(jsonData: JSONSerialization.data(withJSONObject: json))
    }

    /// A dictionary built with Foundation types, read the way the ledger reads JSON.
    public static func members(_ dictionary: [String: Any]) throws -> JSONMembers {
        try JSONReader().object(JSONSerialization.data(withJSONObject: dictionary))
    }

    /// One protocol line.
    public static func line(_ object: [String: Any]) -> String {
        String(decoding: (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data(), as: UTF8.self)
    }

    /// Parses a JSON line.
    public static func object(_ line: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
    }

    /// Changes one byte of every occurrence of `marker` in `data` (a raw write under LMDB's feet).
    public static func flipEveryOccurrence(of marker: String, in data: inout Data) throws {
        let bytes = Data(marker.utf8)
        var searchStart = data.startIndex
        var flipped = 0
        while let range = data.range(of: bytes, in: searchStart..<data.endIndex) {
            data[range.lowerBound + 3] ^= 0x20
            searchStart = range.upperBound
            flipped += 1
        }
        if flipped == 0 { throw CocoaError(.fileReadCorruptFile) }
    }

    /// The shortest needle the privacy checks (``anyFile(in:contains:)``) search one store for. A store
    /// holds random bytes (keys, HMAC pseudonyms, ciphertexts, hashes, signatures, and their base64
    /// and hex in the files beside the database), where a short needle turns up by chance: "bob"
    /// in about one demo store in thirty (~8 KB of base64 there). At 12 bytes the odds are below
    /// 10^-17 a store, so a match means the identifier was written.
    public static let privacyNeedleMinimumBytes = 12

    /// A privacy check that could not tell a write from chance: its needle is too short.
    public struct ShortNeedle: Error, CustomStringConvertible {
        public let description: String
    }

    /// Throws ``ShortNeedle`` unless `needle`, searched for in `stores` independent stores, has
    /// ``privacyNeedleMinimumBytes`` in all.
    static func requireDistinctive(_ needle: String, stores: Int) throws {
        guard stores > 0, needle.utf8.count * stores >= privacyNeedleMinimumBytes else {
            throw ShortNeedle(
                description: "\"\(needle)\" is too short to search \(stores) store(s) for: a chance match in their random bytes "
                    + "cannot be told from a write (\(privacyNeedleMinimumBytes) bytes in all are needed)")
        }
    }

    /// True when `needle` occurs in any file under `directory`: the privacy check that no plaintext
    /// UID or Apple transaction id is written. Throws ``ShortNeedle`` for a needle under
    /// ``privacyNeedleMinimumBytes``: give tests long identifiers (`uid-cli-alice-7f3a9c`, 16-digit
    /// transaction ids).
    public static func anyFile(in directory: URL, contains needle: String) throws -> Bool {
        try anyFile(inEach: [directory], contains: needle)
    }

    /// True when `needle` occurs in a file under each of `directories`: stores made independently from
    /// the same input, each with its own random keys (e.g. `ledger demo` run several times, whose
    /// UIDs are short names). A plaintext write is in every one of them; a chance match in all of
    /// them has one store's odds raised to their number. So a needle may be shorter in proportion:
    /// ``privacyNeedleMinimumBytes`` in all (3 letters in 4 stores: odds below 10^-6).
    public static func anyFile(inEach directories: [URL], contains needle: String) throws -> Bool {
        try requireDistinctive(needle, stores: directories.count)
        let bytes = Data(needle.utf8)
        return directories.allSatisfy { directory in
            let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
            while let file = files?.nextObject() as? URL {
                if let data = try? Data(contentsOf: file), data.range(of: bytes) != nil { return true }
            }
            return false
        }
    }
}

/// Runs the `ledger` binary built by the package.
public enum LedgerBinary {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
        public init(status: Int32, stdout: String, stderr: String) {
            self.status = status
            self.stdout = stdout
            self.stderr = stderr
        }
        public var lines: [String] { stdout.split(separator: "\n").map(String.init) }
        public var json: [String: Any] { Fixtures.object(lines.last ?? "") }
    }

    /// The package root (two levels above this file's folder).
    public static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `LEDGER_BINARY`, else the one built beside the running test bundle (so `swift test
    /// --scratch-path DIR` uses DIR's build), else the package's debug build, else its release build.
    public static var url: URL {
        if let path = ProcessInfo.processInfo.environment["LEDGER_BINARY"] { return URL(fileURLWithPath: path) }
        if let sibling = Bundle.main.executableURL?.deletingLastPathComponent().appendingPathComponent("ledger"),
            FileManager.default.isExecutableFile(atPath: sibling.path)
        {
            return sibling
        }
        for configuration in ["debug", "release"] {
            let candidate = packageRoot.appendingPathComponent(".build/\(configuration)/ledger")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return packageRoot.appendingPathComponent(".build/debug/ledger")
    }

    /// Runs `ledger arguments…` with `stdin`, waiting for it to exit; `environment` is added to this process's.
    public static func run(
        _ arguments: [String], stdin: String = "", currentDirectory: URL? = nil, environment: [String: String] = [:]
    ) throws -> Result {
        try start(arguments, stdinData: Data(stdin.utf8), currentDirectory: currentDirectory, environment: environment).wait()
    }

    /// Runs `ledger arguments…` with raw bytes on standard input.
    public static func run(_ arguments: [String], stdinData: Data, currentDirectory: URL? = nil) throws -> Result {
        try start(arguments, stdinData: stdinData, currentDirectory: currentDirectory).wait()
    }

    /// A started `ledger` process.
    public final class Running: @unchecked Sendable {
        let process: Process
        let out: Pipe
        let err: Pipe
        init(process: Process, out: Pipe, err: Pipe) {
            self.process = process
            self.out = out
            self.err = err
        }

        /// The process id (e.g. to send it a signal).
        public var processIdentifier: Int32 { process.processIdentifier }

        public func wait() -> Result {
            let stdout = out.fileHandleForReading.readDataToEndOfFile()
            let stderr = err.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return Result(
                status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self),
                stderr: String(decoding: stderr, as: UTF8.self))
        }
    }

    /// Runs any `executable arguments…` with no input, waiting for it to exit.
    public static func runProcess(_ executable: URL, _ arguments: [String]) throws -> Result {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(
            status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// Starts `ledger arguments…` without waiting.
    public static func start(_ arguments: [String], stdin: String = "", currentDirectory: URL? = nil) throws -> Running {
        try start(arguments, stdinData: Data(stdin.utf8), currentDirectory: currentDirectory)
    }

    /// Starts `ledger arguments…` with raw bytes on standard input, without waiting; `environment` is added to
    /// this process's.
    public static func start(
        _ arguments: [String], stdinData: Data, currentDirectory: URL? = nil, environment: [String: String] = [:]
    ) throws -> Running {
        let process = Process()
        process.executableURL = url
        process.arguments = arguments
        if let currentDirectory { process.currentDirectoryURL = currentDirectory }
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        let input = Pipe()
        let out = Pipe()
        let err = Pipe()
        process.standardInput = input
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let data = stdinData
        // Writing to a child that exited must fail with EPIPE, not kill the test process: SIGPIPE is
        // otherwise only ignored once an in-process server has started.
        signal(SIGPIPE, SIG_IGN)
        DispatchQueue.global().async {
            // A command that fails before reading its input closes the pipe: EPIPE here is not an error (the
            // non-throwing `write(_:)` traps on it).
            try? input.fileHandleForWriting.write(contentsOf: data)
            try? input.fileHandleForWriting.close()
        }
        return Running(process: process, out: out, err: err)
    }
}

/// SplitMix64: a small seeded generator, so a failing seed can be replayed.
public struct SeededGenerator: RandomNumberGenerator {
    public var state: UInt64

    public init(state: UInt64) { self.state = state }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The format-1 ledger built by `Tests/Fixtures/format1/make-fixture.sh` with the format-1 binary:
/// purchases, renewals, notifications (a duplicate delivery, a refund and its reversal, an expiry), a
/// denied restore, a retry decided again, Family Sharing, a deletion and a two-person support transfer
/// (with a refused self-approval) followed by the target's restore; a dispute bundle of the transferred
/// lineage, a signed checkpoint and the signing public key.
public enum FormatOneFixture {
    public static let directory = LedgerBinary.packageRoot.appendingPathComponent("Tests/Fixtures/format1")
    /// Records in the fixture's log.
    public static let records: UInt64 = 54
    /// The original transaction id of the lineage moved by the support transfer (the bundle's subject).
    public static let transferredLineage = "2000000000000002"

    /// A copy of the fixture store in `directory` (key files mode 0600, as `init` writes them).
    public static func copyStore(to destination: URL) throws {
        let fm = FileManager.default
        try fm.createDirectory(at: destination, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for name in ["data.mdb", "ledger.key", "ledger-signing.key"] {
            let target = destination.appendingPathComponent(name)
            try fm.copyItem(at: directory.appendingPathComponent("store/\(name)"), to: target)
            try fm.setAttributes([.posixPermissions: 0o600], ofItemAtPath: target.path)
        }
    }

    public static func file(_ name: String) throws -> Data { try Data(contentsOf: directory.appendingPathComponent(name)) }
}

/// A switch flipped by a test and read from other threads (for example an injected failure).
public final class Switch: @unchecked Sendable {
    private let lock = NSLock()
    private var state = false
    public init() {}
    public var on: Bool {
        get { lock.withLock { state } }
        set { lock.withLock { state = newValue } }
    }
}

/// Values added from many threads (a server's completions, answers' statuses, log lines, retries),
/// read back as a list in the order they were added.
public final class Collected<Element>: @unchecked Sendable {
    private let lock = NSLock()
    private var all: [Element] = []

    public init() {}

    public func add(_ element: Element) { lock.withLock { all.append(element) } }

    public var list: [Element] { lock.withLock { all } }
}

/// A clock tests set by hand: the ledger's `recordedAt` for what they submit next.
public final class ManualClock: @unchecked Sendable {
    private var time: Int64
    private let lock = NSLock()

    public init(_ time: Int64) { self.time = time }

    public var now: Int64 {
        get { lock.withLock { time } }
        set { lock.withLock { time = newValue } }
    }

    /// The clock as `Ledger` takes it.
    public var function: @Sendable () -> Int64 { { [self] in now } }
}

extension Ledger {
    /// The pseudonym of the live account `uid`, if any.
    public func pseudonym(ofUID uid: String) throws -> AccountID? { try store.read { try store.pseudonym(ofUID: uid, in: $0) } }

    /// Every persisted read-model entry.
    public func persistedReadModels() throws -> [[UInt8]: [UInt8]] {
        try store.read { reader in
            var entries: [[UInt8]: [UInt8]] = [:]
            try reader.forEachReadModel(from: []) { key, value in
                entries[key] = value
                return true
            }
            return entries
        }
    }

    /// Appends one record of `events` as they are, bypassing every safeguard (for tests of what
    /// `verify` catches), then repairs the read models.
    public func appendRaw(_ events: [LedgerEvent], at: Int64) throws {
        try store.write { reader, writer in
            var appender = try LogAppender(head: try reader.head())
            try appender.append(
                recordedAt: clock(), at: at, command: Key128(high: UInt64.random(in: 0...UInt64.max), low: 0), attempt: 0, events: events)
            try writer.apply(appender.batch)
        }
        _ = try store.rebuildReadModels(repair: true)
    }
}
