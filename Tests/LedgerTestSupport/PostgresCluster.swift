import Foundation
public import LedgerStore
public import OwnershipLedger

/// A throwaway PostgreSQL cluster for the tests: `initdb` into a temporary directory, listening only
/// on a Unix socket there, started once per test process (``shared()``) and stopped when it exits
/// (a watchdog stops it too should the process die). Each test gets a database of its own
/// (``newDatabase()``). Run as the `postgres` system user when the tests run as root (PostgreSQL
/// refuses to run as root). `fsync` is off: a test cluster needs no durability against power loss.
public final class PostgresCluster: @unchecked Sendable {
    public let directory: URL
    public var socketDirectory: String { directory.path }
    let binaries: URL
    private let lock = NSLock()
    private var databases = 0

    nonisolated(unsafe) private static var sharedCluster: PostgresCluster?
    private static let sharedLock = NSLock()

    /// The cluster of this test process, started on first use.
    public static func shared() throws -> PostgresCluster {
        try sharedLock.withLock {
            if let sharedCluster { return sharedCluster }
            let cluster = try PostgresCluster()
            sharedCluster = cluster
            atexit { PostgresCluster.sharedCluster?.stopAndRemove() }
            return cluster
        }
    }

    /// The PostgreSQL server binaries: `pg_config --bindir`, else the newest /usr/lib/postgresql/N/bin.
    static func findBinaries() throws -> URL {
        if let bindir = try? LedgerBinary.runProcess(URL(fileURLWithPath: "/usr/bin/env"), ["pg_config", "--bindir"]), bindir.status == 0 {
            let path = bindir.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            if FileManager.default.isExecutableFile(atPath: path + "/initdb") { return URL(fileURLWithPath: path) }
        }
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let bin = URL(fileURLWithPath: "/usr/lib/postgresql/\(version)/bin")
            if FileManager.default.isExecutableFile(atPath: bin.appendingPathComponent("initdb").path) { return bin }
        }
        throw ClusterError("no PostgreSQL server binaries (initdb) found: install the Debian package postgresql (make deps)")
    }

    /// A cluster of its own (for tests that stop and restart the server), stopped by ``stopAndRemove()``.
    public static func standalone() throws -> PostgresCluster { try PostgresCluster() }

    /// A hot standby of this cluster (`pg_basebackup -R`, streaming replication), read-only, started;
    /// stop it with ``stopAndRemove()``.
    public func standby() throws -> PostgresCluster { try PostgresCluster(standbyOf: self) }

    init(standbyOf primary: PostgresCluster? = nil) throws {
        binaries = try Self.findBinaries()
        // A short path: a Unix socket path is limited to 107 bytes.
        directory = URL(fileURLWithPath: "/tmp/ledger-pg-\(getpid())-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if getuid() == 0 { try run("/bin/chown", ["postgres:postgres", directory.path], asServer: false) }
        if let primary {
            try run(
                binaries.appendingPathComponent("pg_basebackup").path,
                ["-h", primary.socketDirectory, "-U", "postgres", "-D", dataDirectory, "-R", "-X", "stream", "--no-sync"])
        } else {
            try run(
                binaries.appendingPathComponent("initdb").path,
                ["-D", dataDirectory, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"])
        }
        try start()
        // Stops the server should this process die without running its exit handlers.
        let watchdog =
            "while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done; \(getuid() == 0 ? "/usr/sbin/runuser -u postgres -- " : "")\(pgCtl) -D \(dataDirectory) stop -m immediate >/dev/null 2>&1; rm -rf \(directory.path)"
        try Self.spawnClean(["/bin/sh", "-c", watchdog], wait: false)
    }

    var dataDirectory: String { directory.appendingPathComponent("data").path }
    var logFile: String { directory.appendingPathComponent("server.log").path }
    var pgCtl: String { binaries.appendingPathComponent("pg_ctl").path }

    /// Starts the server (again, after ``stop(mode:)``).
    public func start() throws {
        let status = try Self.spawnClean(
            (getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []) + [
                pgCtl, "-D", dataDirectory, "-l", logFile, "-w", "-t", "60", "-o",
                "-k \(socketDirectory) -c listen_addresses='' -c fsync=off -c full_page_writes=off -c max_connections=200", "start",
            ], wait: true)
        guard status == 0 else { throw ClusterError("pg_ctl start failed (\(status)): \(serverLog().suffix(2000))") }
    }

    /// Runs `command` with no descriptor of this process but /dev/null as its standard streams: a
    /// daemon it leaves behind must hold no pipe of ours (Foundation's `Process` tells that a child
    /// has exited when a descriptor it hands down is closed, so a server inheriting one would make
    /// every wait hang). Returns the exit status when waiting.
    @discardableResult
    static func spawnClean(_ command: [String], wait: Bool) throws -> Int32 {
        let closeAll = #"for fd in /proc/$$/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-"; done; exec "$@" </dev/null >/dev/null 2>&1"#
        var pid: pid_t = 0
        let arguments = ["/bin/bash", "-c", closeAll, "bash"] + command
        var argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let spawned = posix_spawn(&pid, "/bin/bash", nil, nil, &argv, environ)
        guard spawned == 0 else { throw ClusterError("cannot start \(command[0]): \(String(cString: strerror(spawned)))") }
        guard wait else { return 0 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status >> 8) & 0xFF
    }

    /// Stops the server: `fast` (clients disconnected, clean shutdown) or `immediate` (a crash).
    public func stop(mode: String = "fast") throws {
        try run(pgCtl, ["-D", dataDirectory, "-m", mode, "-w", "stop"])
    }

    public func stopAndRemove() {
        _ = try? run(pgCtl, ["-D", dataDirectory, "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(at: directory)
    }

    /// A new empty database, as a URL the ledger takes.
    public func newDatabase() throws -> String {
        let name = lock.withLock {
            databases += 1
            return "ledger_test_\(databases)"
        }
        try sql("CREATE DATABASE \(name) STRATEGY FILE_COPY")
        return url(database: name)
    }

    /// The URL of `database` on this cluster (the socket directory as the host).
    public func url(database: String) -> String {
        "postgresql:///\(database)?host=\(socketDirectory.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? socketDirectory)&user=postgres"
    }

    /// Runs SQL with psql in the `postgres` database (or `database`); returns its unaligned output.
    @discardableResult
    public func sql(_ statement: String, database: String = "postgres") throws -> String {
        let result = try LedgerBinary.runProcess(
            binaries.appendingPathComponent("psql"),
            ["-h", socketDirectory, "-U", "postgres", "-d", database, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", statement])
        guard result.status == 0 else { throw ClusterError("psql failed (\(result.status)): \(result.stderr)") }
        return result.stdout
    }

    /// Everything `pg_dump` writes for `database` (a name or a URL): data and schema, plain SQL.
    public func dump(database: String) throws -> String {
        let result = try LedgerBinary.runProcess(
            binaries.appendingPathComponent("pg_dump"), ["-h", socketDirectory, "-U", "postgres", "-d", database])
        guard result.status == 0 else { throw ClusterError("pg_dump failed (\(result.status)): \(result.stderr)") }
        return result.stdout
    }

    /// The server's log so far.
    public func serverLog() -> String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    @discardableResult
    private func run(_ executable: String, _ arguments: [String], asServer: Bool = true) throws -> LedgerBinary.Result {
        let (path, args) =
            asServer && getuid() == 0 ? ("/usr/sbin/runuser", ["-u", "postgres", "--", executable] + arguments) : (executable, arguments)
        let result = try LedgerBinary.runProcess(URL(fileURLWithPath: path), args)
        guard result.status == 0 else {
            throw ClusterError("\(URL(fileURLWithPath: executable).lastPathComponent) failed (\(result.status)): \(result.stderr) \(result.stdout)")
        }
        return result
    }

    public struct ClusterError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}

/// Which store the behavioural suites run on: LMDB, or PostgreSQL when `LEDGER_TEST_STORE=postgres`
/// (`make test` runs them both ways).
public enum TestStore: String, Sendable {
    case lmdb
    case postgres

    public static let current = TestStore(rawValue: ProcessInfo.processInfo.environment["LEDGER_TEST_STORE"] ?? "lmdb") ?? .lmdb

    /// A new store location for a test, in `directory` (its key files there for PostgreSQL).
    public func location(in directory: TemporaryDirectory) throws -> StoreLocation {
        switch self {
        case .lmdb: return .directory(directory.path("store"))
        case .postgres:
            return .postgres(try PostgresURL(try PostgresCluster.shared().newDatabase()), keys: directory.path("store"), readOnly: nil)
        }
    }
}

extension StoreLocation {
    /// The `ledger` options that name this store.
    public var arguments: [String] {
        switch self {
        case .directory(let url, let keys): ["--store", url.path] + (keys == url ? [] : ["--keys", keys.path])
        case .postgres(let url, let keys, let readOnly):
            ["--store", url.connectionString, "--keys", keys.path] + (readOnly.map { ["--read-store", $0.connectionString] } ?? [])
        }
    }
}

extension Fixtures {
    /// `text` with every bytea hex literal (`\\x0a1b…`) replaced by the bytes it stands for, so a
    /// search finds plaintext stored in a bytea column and is not fooled by digits in random hex.
    public static func decodingByteaLiterals(_ text: String) -> Data {
        var out = Data()
        let bytes = Array(text.utf8)
        var index = 0
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case 0x30...0x39: byte - 0x30
            case 0x61...0x66: byte - 0x61 + 10
            default: nil
            }
        }
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "x") {
                index += 2
                while index + 1 < bytes.count, let high = hex(bytes[index]), let low = hex(bytes[index + 1]) {
                    out.append(high << 4 | low)
                    index += 2
                }
                out.append(0x20)
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return out
    }

    /// Whether `needle` is anywhere the ledger stores data: the files of its store directory, or
    /// for PostgreSQL a `pg_dump` of its database (every table and column) and the server's log.
    /// Needles are held to ``privacyNeedleMinimumBytes`` as in ``anyFile(in:contains:)``.
    public static func storeContains(_ ledger: Ledger, _ needle: String) throws -> Bool {
        switch ledger.store.location {
        case .directory(let url, let keys):
            return try anyFile(in: url, contains: needle) || anyFile(in: keys, contains: needle)
        case .postgres(let url, let keys, _):
            try requireDistinctive(needle, stores: 1)
            let cluster = try PostgresCluster.shared()
            let dump = decodingByteaLiterals(try cluster.dump(database: url.connectionString))
            return try dump.range(of: Data(needle.utf8)) != nil || cluster.serverLog().contains(needle) || anyFile(in: keys, contains: needle)
        }
    }
}
