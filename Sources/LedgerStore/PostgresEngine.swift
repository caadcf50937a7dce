import CPostgres
import Foundation
import LedgerCore
import Projections

/// The server engine: the same log, indexes, read models, vault and Merkle nodes as ``LMDBEngine``,
/// in PostgreSQL tables (every key and value `bytea` or `bigint`; no column holds a UID or an Apple
/// identifier, only the keyed hashes, pseudonyms and sealed UIDs the layer above hands down):
///
/// | table | columns (primary key first) |
/// | --- | --- |
/// | `ledger_log` | sequence → record bytes |
/// | `ledger_head` | one row: sequence, chain hash, recordedAt, Merkle frontier (32 bytes each), write generation, writer (the transaction that took the generation last) |
/// | `ledger_commands` | (command key(16), sequence), for commands without a home lineage |
/// | `ledger_lineages` | (lineage(16), sequence, command key(16)) |
/// | `ledger_account_lineages` | (account(16), lineage(16), sequence) |
/// | `ledger_merkle` | (level, index) → 32-byte node |
/// | `ledger_read_models` | `ReadModel` key → value |
/// | `ledger_identities` | vault key(16) → pseudonym(16) |
/// | `ledger_sealed_uids` | pseudonym(16) → sealed UID, and whether it is bound to the pseudonym (``SealedUID``) |
/// | `ledger_meta` | name → value (`MetaKey`) |
/// | `ledger_changes` | generation → head sequences when locked and committed, fingerprints of the keys written (``ChangeLog``) |
///
/// Write groups are serialised on the head row: each group's `READ COMMITTED` transaction starts by
/// locking it (``ChangeLog/lockStatement``: `UPDATE ledger_head SET generation = generation + 1,
/// writer = txid_current() RETURNING …`, sent in one pipeline with the `ledger_changes` rows since the
/// group's snapshot; the group's first reads — the latest records of its commands, its UIDs'
/// pseudonyms, its lineages' states — ran before, in a snapshot, and only the keys changed since are
/// read again), then reads the state it decides on (every statement after the lock sees every group
/// committed before it), so two writers on different hosts can never decide on the same state, and
/// the chain stays gapless. A group's reads are a few batch statements; its writes are one
/// multi-row statement per table, sent with its `ledger_changes` row and the `COMMIT` in one
/// pipeline (one round trip). A writer killed mid-group leaves nothing half-written: the server
/// rolls back. A group whose connection dropped after its `COMMIT` was sent is looked up once its
/// transaction has ended (``resolve(_:backoff:)``), never decided again while it may still commit. A writer host lost mid-group (no socket closed) holds the lock until the server ends
/// its idle transaction (``idleInTransactionTimeout``) or TCP keepalive ends its session.
///
/// Reads run in `REPEATABLE READ READ ONLY` transactions (one snapshot, never blocking or blocked by
/// a writer), on a pool of connections to the primary or to the read-only URL (a replica).
public final class PostgresEngine: LedgerEngine, @unchecked Sendable {
    public let url: PostgresURL
    /// Where reads go (a replica), when not the primary.
    public let readURL: PostgresURL?
    /// How long a write keeps reconnecting, with backoff, before it fails with
    /// ``LedgerStoreError/unavailable(store:detail:)`` (``reconnectWindowVariable`` sets it; 15 s by default).
    public let reconnectWindow: Double
    /// The environment variable giving ``reconnectWindow`` in seconds.
    public static let reconnectWindowVariable = "LEDGER_RECONNECT_WINDOW"
    static let defaultReconnectWindow: Double = {
        guard let text = ProcessInfo.processInfo.environment[reconnectWindowVariable], let seconds = Double(text), seconds >= 0 else { return 15 }
        return min(seconds, 3_600)
    }()

    private let writerLock = NSLock()
    private var writer: PostgresConnection?
    /// Whether the store is known to have the write generation and `ledger_changes` (``ChangeLog``).
    private var changeLogReady = false
    /// Whether `ledger_sealed_uids` is known to have its `bound` column (it is never dropped: once
    /// seen, not asked again; a reader of a store without it asks in each read transaction).
    private let boundColumnLock = NSLock()
    private var boundColumnSeen = false
    /// Called in each write group between its snapshot reads and its lock (tests).
    var afterSnapshotReads: (() throws -> Void)?
    /// Called in each write group once its `COMMIT` is sent, before the answer is read (tests).
    var afterCommitSent: ((PostgresConnection) -> Void)?
    /// `ledger_changes` rows this engine's groups keep when they prune (``ChangeLog/kept``; tests make it small).
    var keptChanges = ChangeLog.kept
    /// Keys of write groups' snapshot reads found stale under the lock and read again, and the
    /// snapshots dropped whole (a `ledger_changes` row missing or without keys), since this engine opened.
    private(set) var staleKeysReadAgain = 0
    private(set) var snapshotsDropped = 0
    private let poolLock = NSLock()
    private var pool: [PostgresConnection] = []
    /// Idle read connections kept for reuse.
    static let poolLimit = 8
    /// Rows fetched per statement by scans.
    static let page = 8_192

    /// Connects to `url` (reads to `readURL` when given) and checks that it holds a ledger's tables.
    /// Throws ``LedgerStoreError/notInitialized(directory:)`` when it holds none.
    init(url: PostgresURL, readURL: PostgresURL? = nil, reconnectWindow: Double = defaultReconnectWindow, creating: Bool = false) throws {
        self.url = url
        self.readURL = readURL
        self.reconnectWindow = reconnectWindow
        if creating { return }
        let present = try withWriter { connection in try Self.hasTables(connection) }
        guard present else { throw LedgerStoreError.notInitialized(directory: url.description) }
    }

    // MARK: Schema

    static let tables = [
        "ledger_log", "ledger_head", "ledger_commands", "ledger_lineages", "ledger_account_lineages", "ledger_merkle", "ledger_read_models",
        "ledger_identities", "ledger_sealed_uids", "ledger_meta", "ledger_changes",
    ]

    static let schema = """
        CREATE TABLE ledger_meta (name text PRIMARY KEY, value bytea NOT NULL);
        CREATE TABLE ledger_head (
            one boolean PRIMARY KEY CHECK (one), sequence bigint NOT NULL, chain_hash bytea NOT NULL,
            recorded_at bigint NOT NULL, frontier bytea NOT NULL);
        CREATE TABLE ledger_log (sequence bigint PRIMARY KEY, record bytea NOT NULL);
        CREATE TABLE ledger_commands (command bytea NOT NULL, sequence bigint NOT NULL, PRIMARY KEY (command, sequence));
        CREATE TABLE ledger_lineages (
            lineage bytea NOT NULL, sequence bigint NOT NULL, command bytea NOT NULL, PRIMARY KEY (lineage, sequence, command));
        CREATE TABLE ledger_account_lineages (
            account bytea NOT NULL, lineage bytea NOT NULL, sequence bigint NOT NULL, PRIMARY KEY (account, lineage, sequence));
        CREATE TABLE ledger_merkle (level smallint NOT NULL, index bigint NOT NULL, hash bytea NOT NULL, PRIMARY KEY (level, index));
        CREATE TABLE ledger_read_models (key bytea PRIMARY KEY, value bytea NOT NULL);
        CREATE TABLE ledger_identities (vault_key bytea PRIMARY KEY, account bytea NOT NULL);
        CREATE TABLE ledger_sealed_uids (account bytea PRIMARY KEY, sealed_uid bytea NOT NULL);
        INSERT INTO ledger_head VALUES (true, 0, '\\x', 0, '\\x');
        """ + ChangeLog.schema.map { $0 + ";" }.joined(separator: "\n")

    static func hasTables(_ connection: PostgresConnection) throws -> Bool {
        let rows = try connection.query("SELECT to_regclass('ledger_meta') IS NOT NULL")
        return rows.bytes(0, 0) == [1]
    }

    /// Creates the tables in an empty database with the head of an empty log and `meta`, in one
    /// transaction. Throws ``LedgerStoreError/alreadyInitialized(directory:)`` when any of them exists.
    func createTables(meta: [(MetaKey, [UInt8])]) throws {
        try withWriter { connection in
            try inTransaction(connection) {
                let existing = try connection.query(
                    "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relname = ANY($1)",
                    [.textArray(Self.tables)])
                guard try withExtendedLifetime(existing, { try PostgresRowDecoding.int64(existing.value(0, 0)) }) == 0 else {
                    throw LedgerStoreError.alreadyInitialized(directory: url.description)
                }
                // Several statements in one string: the simple protocol.
                for statement in Self.schema.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespacesAndNewlines) })
                where !statement.isEmpty {
                    try connection.query(statement)
                }
                try connection.query(
                    "INSERT INTO ledger_meta (name, value) SELECT * FROM unnest($1::text[], $2::bytea[])",
                    [.textArray(meta.map(\.0.rawValue)), .bytesArray(meta.map(\.1))])
                for statement in ChangeLog.guardSchema { try connection.query(statement) }
            }
        }
    }

    /// Whether the store's log holds no record and no metadata (a target `migrate` may fill).
    func isEmpty() throws -> Bool {
        try read { reader in try reader.head().sequence == 0 && reader.meta(.formatVersion) == nil }
    }

    // MARK: LedgerEngine

    public func read<T>(_ body: (any EngineReader) throws -> T) throws -> T {
        let connection = try readConnection()
        do {
            let value = try body(
                PostgresAccess(connection: connection, store: url.description, writing: false, boundColumn: try hasBoundColumn(connection)))
            try connection.query("COMMIT")
            release(connection)
            return value
        } catch {
            if connection.isHealthy, connection.inTransaction, (try? connection.query("ROLLBACK")) != nil { release(connection) }
            throw mapped(error)
        }
    }

    public func write<T>(_ body: (any EngineReader, any EngineWriter) throws -> T) throws -> T {
        writerLock.lock()
        defer { writerLock.unlock() }
        var backoff = Backoff(window: reconnectWindow)
        while true {
            let connection: PostgresConnection
            do {
                connection = try connectedWriter()
            } catch let error as PostgresError where error.connectionLost {
                try backoff.wait(after: error, store: url.description)
                continue
            }
            // The change log's schema (``prepareChangeLog(_:)``, before any statement of the group) gives it the `bound` column.
            let access = PostgresAccess(connection: connection, store: url.description, writing: true, boundColumn: true)
            access.afterSnapshotReads = afterSnapshotReads
            access.afterCommitSent = afterCommitSent
            access.keptChanges = keptChanges
            var value: T?
            do {
                try prepareChangeLog(connection)
                access.begin()
                let result = try body(access, access)
                value = result
                try access.commit()
                staleKeysReadAgain += access.staleKeys
                snapshotsDropped += access.snapshotsDropped
                return result
            } catch {
                if connection.isHealthy && !isConnectionLoss(error) {
                    if connection.inTransaction { _ = try? connection.query("ROLLBACK") }
                    throw mapped(error)
                }
                writer = nil
                if access.commitSent, let value, try resolve(access, backoff: &backoff) == true { return value }
                try backoff.wait(after: error, store: url.description)
            }
        }
    }

    /// Gives a store made before the write generation its columns, `ledger_changes` and the guard
    /// against older writers (``ChangeLog``), once per engine: in one transaction holding the head
    /// table's exclusive lock, so that writers starting together wait for the first and find the
    /// schema done. A store that has them runs no DDL (its writers need not own the tables), except
    /// that a guard function older than this build's is replaced, when this role may (otherwise the
    /// older guard stays in force).
    private func prepareChangeLog(_ connection: PostgresConnection) throws {
        guard !changeLogReady else { return }
        let installed = try connection.query(ChangeLog.installedStatement)
        if installed.bytes(0, 0) != [1] {
            try inTransaction(connection) {
                try connection.query("LOCK TABLE ledger_head IN ACCESS EXCLUSIVE MODE")
                for statement in ChangeLog.schema + ChangeLog.guardSchema { try connection.query(statement) }
            }
        } else if installed.bytes(0, 1) != [1] {
            do {
                try connection.query(ChangeLog.guardFunction)
            } catch let error as PostgresError where error.sqlState == "42501" {
                // Not the function's owner: the installed guard keeps refusing older writers.
            }
        }
        changeLogReady = true
    }

    /// Runs `body` in a `READ COMMITTED` transaction (whatever the session's default), committed
    /// when it returns and rolled back when it throws.
    private func inTransaction(_ connection: PostgresConnection, _ body: () throws -> Void) throws {
        try connection.query(Self.beginWrite)
        do {
            try body()
            try connection.query("COMMIT")
        } catch {
            if connection.isHealthy, connection.inTransaction { _ = try? connection.query("ROLLBACK") }
            throw error
        }
    }

    /// How a write transaction begins: `READ COMMITTED` whatever `default_transaction_isolation`
    /// the role or database sets (under `REPEATABLE READ` or `SERIALIZABLE` the head's lock would
    /// fail with 40001 whenever it waited for another writer).
    static let beginWrite = "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE"

    /// After the connection was lost while `COMMIT` was in flight: reconnects (within the backoff's
    /// window) and tells whether the group committed, by its last record's bytes (nil: it appended
    /// none, so it is simply run again).
    ///
    /// The lost group's transaction may still be running on the server: its backend may not have
    /// read the `COMMIT` yet, or may be committing (flushing WAL, waiting for a synchronous standby,
    /// running deferred triggers), its record not yet visible. Read then, the record would look
    /// absent and the group would run again on a state that, a moment later, holds it: a command
    /// whose key depends on the head (a support step) would be decided a second time, appended
    /// twice or refused although it was done. So the record is read only once that transaction has
    /// ended: `SELECT … FOR SHARE` on the head row conflicts with the row lock the group's
    /// `UPDATE ledger_head` took (``ChangeLog/lockStatement``) and waits until that transaction
    /// committed or rolled back; the read after it (`READ COMMITTED`: a new snapshot per
    /// statement) sees the outcome. One statement, and no polling of `txid_status` with the lock's
    /// transaction id. The wait is bounded as every writer's lock is: a transaction whose session
    /// went idle is ended by the server (``idleInTransactionTimeout``, TCP keepalives); the share
    /// lock itself is held only for the read, and takes no generation (it writes nothing, so the
    /// guard on the data tables, `ledger_require_generation`, does not apply).
    private func resolve(_ access: PostgresAccess, backoff: inout Backoff) throws -> Bool? {
        guard let last = access.lastAppended else { return nil }
        while true {
            do {
                let connection = try connectedWriter()
                var committed = false
                try inTransaction(connection) {
                    // Bounded by the reconnect window: a COMMIT stuck on the server (a synchronous
                    // standby that never answers) is not idle, so no idle timeout ends it.
                    try connection.query("SELECT set_config('lock_timeout', $1, true)", [.text("\(backoff.remainingMilliseconds)ms")])
                    try connection.query(Self.awaitHeadLockStatement)
                    let rows = try connection.query("SELECT record FROM ledger_log WHERE sequence = $1", [.int64(Int64(last.sequence))])
                    committed = rows.bytes(0, 0) == last.bytes
                }
                return committed
            } catch let error as PostgresError where error.connectionLost {
                writer = nil
                try backoff.wait(after: error, store: url.description)
            } catch let error as PostgresError where error.sqlState == "55P03" || error.sqlState == "57014" {
                // A `lock_timeout` or `statement_timeout` of the role or database ended the wait: wait
                // again, within the window (after it, the outcome is unknown: "unavailable").
                try backoff.wait(after: error, store: url.description)
            } catch {
                throw mapped(error)
            }
        }
    }

    /// Waits for the transaction holding the head row's lock, if any, to end (``resolve(_:backoff:)``).
    static let awaitHeadLockStatement = "SELECT 1 FROM ledger_head FOR SHARE"

    private func isConnectionLoss(_ error: any Error) -> Bool {
        (error as? PostgresError)?.connectionLost == true
    }

    /// PostgreSQL errors as store errors; the others as they are.
    func mapped(_ error: any Error) -> any Error {
        guard let error = error as? PostgresError else { return error }
        if error.connectionLost { return LedgerStoreError.unavailable(store: url.description, detail: error.message) }
        return LedgerStoreError.database(store: url.description, detail: error.description)
    }

    // MARK: Connections

    /// Runs `body` on the writer connection, outside any write group (schema, checks).
    func withWriter<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        writerLock.lock()
        defer { writerLock.unlock() }
        do {
            return try body(try connectedWriter())
        } catch {
            if !(writer?.isHealthy ?? false) { writer = nil }
            throw mapped(error)
        }
    }

    private func connectedWriter() throws -> PostgresConnection {
        if let writer, writer.isHealthy { return writer }
        writer = nil
        let connection = try PostgresConnection(url: url)
        try connection.query(
            "SELECT set_config('idle_in_transaction_session_timeout', CASE current_setting('idle_in_transaction_session_timeout') WHEN '0' THEN $1 ELSE current_setting('idle_in_transaction_session_timeout') END, false)",
            [.text(Self.idleInTransactionTimeout)])
        writer = connection
        return connection
    }

    /// The writer session's `idle_in_transaction_session_timeout`, unless the session already has
    /// one (from the URL's `options`, the role, the database or the server): a group is idle in its
    /// transaction, holding the head's lock, only while its writer decides (milliseconds), so a
    /// session idle this long belongs to a writer that is gone (a host lost or partitioned, whose
    /// socket nobody closed). The server then ends it and the lock is free for every other writer.
    static let idleInTransactionTimeout = "60s"

    /// A connection with a read transaction begun: an idle pooled one, or a new one. Reads do not
    /// wait for a server that is down (a query answers "unavailable" at once, and `serve` 503); a
    /// pooled connection the server dropped (a restart) is replaced.
    /// Whether `ledger_sealed_uids` has its `bound` column, asked on `connection` until it has.
    private func hasBoundColumn(_ connection: PostgresConnection) throws -> Bool {
        if boundColumnLock.withLock({ boundColumnSeen }) { return true }
        let rows = try connection.query(ChangeLog.boundColumnStatement)
        guard rows.bytes(0, 0) == [1] else { return false }
        boundColumnLock.withLock { boundColumnSeen = true }
        return true
    }

    private func readConnection() throws -> PostgresConnection {
        var lastError: PostgresError?
        for _ in 0..<Self.poolLimit + 1 {
            do {
                let connection = try poolLock.withLock({ pool.popLast() }) ?? PostgresConnection(url: readURL ?? url)
                try connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return connection
            } catch let error as PostgresError where error.connectionLost {
                lastError = error
            } catch {
                throw mapped(error)
            }
        }
        throw LedgerStoreError.unavailable(store: (readURL ?? url).description, detail: lastError?.message ?? "no connection")
    }

    private func release(_ connection: PostgresConnection) {
        poolLock.withLock { if pool.count < Self.poolLimit { pool.append(connection) } }
    }

    /// Closes idle connections (the writer's too): the next use reconnects.
    func closeConnections() {
        writerLock.withLock { writer = nil }
        poolLock.withLock { pool = [] }
    }
}

/// Bounded exponential backoff between reconnection attempts: 50 ms doubling to 2 s, for at most
/// `window` seconds, then the last error as ``LedgerStoreError/unavailable(store:detail:)``.
struct Backoff {
    let deadline: Double
    var delay = 0.05

    init(window: Double) { deadline = Self.now() + window }

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// What is left of the window, in whole milliseconds (at least 1).
    var remainingMilliseconds: Int { max(1, Int((deadline - Self.now()) * 1000)) }

    mutating func wait(after error: any Error, store: String) throws {
        let remaining = deadline - Self.now()
        guard remaining > 0 else {
            throw LedgerStoreError.unavailable(store: store, detail: (error as? PostgresError)?.message ?? "\(error)")
        }
        usleep(UInt32(min(delay, remaining) * 1e6))
        delay = min(delay * 2, 2)
    }
}
