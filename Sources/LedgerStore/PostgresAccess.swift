import Foundation
import LedgerCore
import Projections

/// Reads and writes in one PostgreSQL transaction (``PostgresEngine``). Batch reads are one
/// statement each; writes are queued and sent with the next read, or with `COMMIT`, in one pipeline.
final class PostgresAccess: EngineReader, EngineWriter {
    let connection: PostgresConnection
    /// The store, as messages name it (the URL without its password).
    let store: String
    let writing: Bool
    private var pending: [PostgresStatement] = []
    /// The head as locked at the start of a write group, then as the group's batches moved it.
    private var lockedHead: LogHead?
    /// Whether `COMMIT` was sent (a connection lost after that leaves the outcome to be checked).
    private(set) var commitSent = false
    /// The group's last appended record, by which a lost `COMMIT` is resolved.
    private(set) var lastAppended: (sequence: UInt64, bytes: [UInt8])?
    /// Read-model keys and vault keys this write group read under the head lock and found absent,
    /// and has not written since: no other writer can insert them before the group commits (every
    /// write group holds the head lock), so the group inserts them without `ON CONFLICT` — a plain
    /// insertion costs the server about half a speculative one (docs/benchmarks.md, "Session 21: CPU per decision").
    private var absentReadModels = Set<[UInt8]>()
    private var absentVaultKeys = Set<Key128>()
    /// Whether the group's `BEGIN` and head lock are still to be sent (with its first statements).
    private var lockPending = false
    /// What ``prefetch(commands:vaultKeys:lineages:)`` read, by key (nil: absent), each answered
    /// once, and forgotten when the group writes.
    private var prefetchedCommands: [Key128: (sequence: UInt64, bytes: [UInt8])?] = [:]
    private var prefetchedVaultKeys: [Key128: VaultEntry?] = [:]
    private var prefetchedReadModels: [[UInt8]: [UInt8]?] = [:]
    /// The head's write generation as the group's lock set it (its own), and the head's sequence then.
    private(set) var lockedGeneration: Int64?
    private var lockedSequence: UInt64?
    /// Fingerprints of the keys this write group wrote (``ChangeLog``), recorded in `ledger_changes`
    /// at `COMMIT`; nil once there are too many to list (the row then says "every key").
    private var writtenKeys: [UInt64]? = []
    /// Called between a group's snapshot reads and its lock (tests make another writer commit there).
    var afterSnapshotReads: (() throws -> Void)?
    /// Called once the group's `COMMIT` is sent, before its answer is read (tests drop the connection there).
    var afterCommitSent: ((PostgresConnection) -> Void)?
    /// `ledger_changes` rows the committing group leaves (``ChangeLog/kept``; tests make it small).
    var keptChanges = ChangeLog.kept

    /// Whether `ledger_sealed_uids` has its `bound` column (without it, every sealed UID is legacy).
    let boundColumn: Bool

    init(connection: PostgresConnection, store: String, writing: Bool, boundColumn: Bool) {
        self.connection = connection
        self.store = store
        self.writing = writing
        self.boundColumn = boundColumn
    }

    /// The `bound` column of `ledger_sealed_uids` as `alias` names the table, or false when there is none.
    private func bound(_ alias: String) -> String { boundColumn ? "\(alias).bound" : "false" }

    /// A sealed UID read with its `bound` column, as the engines hand it up (``SealedUID``): a bound
    /// one is stored with its layout byte, a legacy one without.
    static func sealedValue(_ stored: [UInt8]?, bound: [UInt8]?) -> [UInt8]? {
        guard let stored else { return nil }
        return bound == [1] ? stored : [SealedUID.legacy] + stored
    }

    /// Begins the write group: its transaction and the lock on the head row are sent with the
    /// group's first statements, ahead of them in one pipeline. Write groups of every process on
    /// every host are serialised on that lock, and every later statement sees the groups committed
    /// before.
    func begin() { lockPending = true }

    /// Sends the queued writes, the group's `ledger_changes` row (``ChangeLog``) and `COMMIT` in one round trip.
    func commit() throws {
        if lockPending { try run([]) }
        guard let lockedSequence else { throw LedgerStoreError.corrupt("the write group holds no head lock") }
        commitSent = true
        try connection.pipeline(
            pending + [ChangeLog.recordStatement(writtenKeys, from: lockedSequence, kept: keptChanges), PostgresStatement("COMMIT")],
            afterSending: afterCommitSent)
        pending = []
    }

    private func query(_ sql: String, _ parameters: [PostgresValue] = []) throws -> PostgresRows {
        if pending.isEmpty && !lockPending { return try connection.query(sql, parameters) }
        let rows = try run(pending + [PostgresStatement(sql, parameters)])
        pending = []
        return rows[rows.count - 1]
    }

    /// Runs `statements` in one pipeline, after the group's `BEGIN` and head lock when they are
    /// still to be sent; returns the rows of `statements`.
    @discardableResult
    private func run(_ statements: [PostgresStatement]) throws -> [PostgresRows] {
        guard lockPending else { return try connection.pipeline(statements) }
        let rows = try connection.pipeline([PostgresStatement(PostgresEngine.beginWrite), ChangeLog.lockStatement] + statements)
        lockPending = false
        lockedHead = try PostgresRowDecoding.head(rows[1])
        lockedSequence = lockedHead?.sequence
        lockedGeneration = try withExtendedLifetime(rows[1]) { try PostgresRowDecoding.int64(rows[1].value(0, 4)) }
        return Array(rows.dropFirst(2))
    }

    /// Reads the latest records of `commands`, the vault entries of `vaultKeys` and the states of
    /// `lineages` for the write group about to lock the head: ``latestRecords(of:)``,
    /// ``identities(vaultKeys:)`` and ``lineageStates(_:)`` answer each key once from what it read,
    /// and ask the server only for the others.
    ///
    /// As the group's first statement, the reads run optimistically, outside the lock: in one
    /// snapshot (with the head's write generation G), while another writer may hold the lock. Then
    /// the lock, in one pipeline with the `ledger_changes` rows after G: every key a group committed
    /// since the snapshot wrote is read again under the lock (all of them when a row is missing,
    /// pruned, or says "every key"). What the group decides on is thus what it would have read
    /// under the lock (``ChangeLog``).
    func prefetch(commands: [CommandRef], vaultKeys: [Key128], lineages: [LineageKey]) throws {
        let commands = Array(Set(commands))
        let vaultKeys = Array(Set(vaultKeys))
        let readModelKeys = Array(Set(lineages)).map(ReadModel.lineageKey)
        guard writing, lockPending, pending.isEmpty, !(commands.isEmpty && vaultKeys.isEmpty && readModelKeys.isEmpty) else {
            return try readUnderLock(commands: commands, vaultKeys: vaultKeys, readModelKeys: readModelKeys)
        }
        // The snapshot, outside the lock (its rows decoded before the lock is asked for).
        var statements = [PostgresStatement("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"), ChangeLog.generationStatement]
        if !commands.isEmpty { statements.append(Self.latestRecordsStatement(commands)) }
        if !vaultKeys.isEmpty { statements.append(Self.identitiesStatement(vaultKeys, bound: bound("s"))) }
        if !readModelKeys.isEmpty { statements.append(Self.readModelsStatement(readModelKeys)) }
        var rows = try connection.pipeline(statements + [PostgresStatement("COMMIT")])[1...]
        let generationRows = rows.removeFirst()
        let snapshot = try withExtendedLifetime(generationRows) {
            (
                generation: try PostgresRowDecoding.int64(generationRows.value(0, 0)),
                sequence: try PostgresRowDecoding.int64(generationRows.value(0, 1))
            )
        }
        // Everything the snapshot answers, as if read under the lock, and each key by its
        // fingerprint (outside the lock: under it, only the keys changed since are handled).
        var byFingerprint: [UInt64: SnapshotKey] = [:]
        byFingerprint.reserveCapacity(commands.count + vaultKeys.count + readModelKeys.count)
        var collisions: [(UInt64, SnapshotKey)] = []  // the group's own keys sharing a fingerprint (improbable)
        func note(_ fingerprint: UInt64, _ key: SnapshotKey) {
            if byFingerprint[fingerprint] == nil { byFingerprint[fingerprint] = key } else { collisions.append((fingerprint, key)) }
        }
        if !commands.isEmpty {
            let found = try decodeLatestRecords(rows.removeFirst())
            for command in commands {
                prefetchedCommands.updateValue(found[command.key], forKey: command.key)
                note(ChangeLog.fingerprint(command: command.key), .command(command))
            }
        }
        if !vaultKeys.isEmpty {
            let found = try decodeIdentities(rows.removeFirst(), asked: vaultKeys)
            for key in vaultKeys {
                prefetchedVaultKeys.updateValue(found[key], forKey: key)
                if found[key] == nil { absentVaultKeys.insert(key) }
                note(ChangeLog.fingerprint(vaultKey: key), .vaultKey(key))
            }
        }
        if !readModelKeys.isEmpty {
            let found = Dictionary(decodeReadModels(rows.removeFirst(), asked: readModelKeys), uniquingKeysWith: { first, _ in first })
            for key in readModelKeys {
                prefetchedReadModels.updateValue(found[key], forKey: key)
                if found[key] == nil { absentReadModels.insert(key) }
                note(ChangeLog.fingerprint(readModel: key), .readModel(key))
            }
        }
        try afterSnapshotReads?()
        // The lock, and what changed since the snapshot.
        let changes = try run([ChangeLog.changesStatement(after: snapshot.generation)])[0]
        guard let generation = lockedGeneration, let sequence = lockedSequence else {
            throw LedgerStoreError.corrupt("the head's write generation is missing")
        }
        // The keys changed since (all of them when the rows do not account for every group since): forgotten, and read again now.
        var stale: [SnapshotKey] = []
        if let changed = try ChangeLog.changedKeys(changes, snapshot: snapshot, locked: (generation, Int64(sequence))) {
            for fingerprint in changed { if let key = byFingerprint.removeValue(forKey: fingerprint) { stale.append(key) } }
            if !collisions.isEmpty {
                let changed = Set(changed)
                stale += collisions.filter { changed.contains($0.0) }.map(\.1)
            }
        } else {
            snapshotsDropped += 1
            stale = Array(byFingerprint.values) + collisions.map(\.1)
        }
        guard !stale.isEmpty else { return }
        var again: (commands: [CommandRef], vaultKeys: [Key128], readModelKeys: [[UInt8]]) = ([], [], [])
        for key in stale {
            switch key {
            case .command(let command):
                prefetchedCommands.removeValue(forKey: command.key)
                again.commands.append(command)
            case .vaultKey(let key):
                prefetchedVaultKeys.removeValue(forKey: key)
                absentVaultKeys.remove(key)
                again.vaultKeys.append(key)
            case .readModel(let key):
                prefetchedReadModels.removeValue(forKey: key)
                absentReadModels.remove(key)
                again.readModelKeys.append(key)
            }
        }
        staleKeys += stale.count
        try readUnderLock(commands: again.commands, vaultKeys: again.vaultKeys, readModelKeys: again.readModelKeys)
    }

    /// A key of a group's snapshot reads.
    private enum SnapshotKey {
        case command(CommandRef)
        case vaultKey(Key128)
        case readModel([UInt8])
    }

    /// How many keys of the snapshot reads were read again under the lock, and whether the snapshot was dropped whole.
    private(set) var staleKeys = 0
    private(set) var snapshotsDropped = 0

    /// ``prefetch(commands:vaultKeys:lineages:)``'s reads under the lock, in one pipeline (with the
    /// head's lock when it is the group's first statement).
    private func readUnderLock(commands: [CommandRef], vaultKeys: [Key128], readModelKeys: [[UInt8]]) throws {
        var statements: [PostgresStatement] = []
        if !commands.isEmpty { statements.append(Self.latestRecordsStatement(commands)) }
        if !vaultKeys.isEmpty { statements.append(Self.identitiesStatement(vaultKeys, bound: bound("s"))) }
        if !readModelKeys.isEmpty { statements.append(Self.readModelsStatement(readModelKeys)) }
        guard !statements.isEmpty || lockPending else { return }
        var rows = try run(pending + statements)[...]
        rows.removeFirst(pending.count)
        pending = []
        if !commands.isEmpty {
            let found = try decodeLatestRecords(rows.removeFirst())
            for command in commands { prefetchedCommands.updateValue(found[command.key], forKey: command.key) }
        }
        if !vaultKeys.isEmpty {
            let found = try decodeIdentities(rows.removeFirst(), asked: vaultKeys)
            for key in vaultKeys { prefetchedVaultKeys.updateValue(found[key], forKey: key) }
        }
        if !readModelKeys.isEmpty {
            let found = Dictionary(decodeReadModels(rows.removeFirst(), asked: readModelKeys), uniquingKeysWith: { first, _ in first })
            for key in readModelKeys { prefetchedReadModels.updateValue(found[key], forKey: key) }
        }
    }

    // MARK: Head, metadata, log

    func head() throws -> LogHead {
        if lockPending { try run([]) }
        if let lockedHead { return lockedHead }
        return try PostgresRowDecoding.head(query("SELECT sequence, chain_hash, recorded_at, frontier FROM ledger_head"))
    }

    func meta(_ key: MetaKey) throws -> [UInt8]? {
        try query("SELECT value FROM ledger_meta WHERE name = $1", [.text(key.rawValue)]).bytes(0, 0)
    }

    func record(_ sequence: UInt64) throws -> [UInt8]? {
        guard sequence <= UInt64(Int64.max) else { return nil }
        return try query("SELECT record FROM ledger_log WHERE sequence = $1", [.int64(Int64(sequence))]).bytes(0, 0)
    }

    func forEachRecord(from: UInt64, through: UInt64, _ body: (UInt64, UnsafeRawBufferPointer) throws -> Bool) throws {
        var next = from
        let last = Int64(min(through, UInt64(Int64.max)))
        while next <= UInt64(last) {
            let rows = try query(
                "SELECT sequence, record FROM ledger_log WHERE sequence >= $1 AND sequence <= $2 ORDER BY sequence LIMIT \(PostgresEngine.page)",
                [.int64(Int64(next)), .int64(last)])
            let more = try withExtendedLifetime(rows) {
                for row in 0..<rows.count {
                    let sequence = try PostgresRowDecoding.sequence(rows.value(row, 0))
                    guard let bytes = rows.value(row, 1) else { throw LedgerStoreError.corrupt("record \(sequence) is NULL in \(store)") }
                    guard try body(sequence, bytes) else { return false }
                    next = sequence + 1
                }
                return true
            }
            guard more else { return }
            if rows.count < PostgresEngine.page { return }
        }
    }

    func lastSequence(recordedAtOrBefore time: Timestamp) throws -> UInt64 {
        var low: UInt64 = 0  // recorded at or before `time` (0: none)
        var high = try head().sequence + 1  // recorded after (head + 1: none known)
        while high - low > 1 {
            let middle = low + (high - low) / 2
            guard let bytes = try record(middle) else { throw LedgerStoreError.corrupt("record \(middle) is missing from the log") }
            guard let recorded = bytes.withUnsafeBytes({ RecordCodec.recordedAt(of: $0) }) else {
                throw LedgerStoreError.corrupt("record \(middle) has no readable time")
            }
            if recorded <= time { low = middle } else { high = middle }
        }
        return low
    }

    // MARK: Indexes

    func latestRecords(of commands: [CommandRef]) throws -> [Key128: (sequence: UInt64, bytes: [UInt8])] {
        var out: [Key128: (sequence: UInt64, bytes: [UInt8])] = [:]
        var unique: [CommandRef] = []
        for command in Set(commands) {
            if let prefetched = prefetchedCommands.removeValue(forKey: command.key) {
                out[command.key] = prefetched
            } else {
                unique.append(command)
            }
        }
        guard !unique.isEmpty else { return out }
        let statement = Self.latestRecordsStatement(unique)
        return try out.merging(decodeLatestRecords(query(statement.sql, statement.parameters))) { _, read in read }
    }

    /// The latest record of each of `commands` that has one: a command with a home lineage is among
    /// that lineage's entries, the others in ledger_commands (an empty home stands for none).
    private static func latestRecordsStatement(_ commands: [CommandRef]) -> PostgresStatement {
        PostgresStatement(
            """
            SELECT k.command, c.sequence, l.record FROM unnest($1::bytea[], $2::bytea[]) AS k(command, home)
            CROSS JOIN LATERAL (
                SELECT sequence FROM ledger_lineages WHERE length(k.home) > 0 AND lineage = k.home AND command = k.command
                UNION ALL SELECT sequence FROM ledger_commands WHERE length(k.home) = 0 AND command = k.command
                ORDER BY sequence DESC LIMIT 1) AS c
            JOIN ledger_log AS l ON l.sequence = c.sequence
            """, [.bytesArray(commands.map(\.key.bytes)), .bytesArray(commands.map { $0.home?.bytes ?? [] })])
    }

    private func decodeLatestRecords(_ rows: PostgresRows) throws -> [Key128: (sequence: UInt64, bytes: [UInt8])] {
        var out: [Key128: (sequence: UInt64, bytes: [UInt8])] = [:]
        for row in 0..<rows.count {
            let command = try PostgresRowDecoding.key128(rows.value(row, 0))
            let sequence = try PostgresRowDecoding.sequence(rows.value(row, 1))
            guard let bytes = rows.bytes(row, 2) else { throw LedgerStoreError.corrupt("record \(sequence) is NULL in \(store)") }
            out[command] = (sequence, bytes)
        }
        return out
    }

    func sequences(ofLineage lineage: LineageKey, through: UInt64) throws -> [UInt64] {
        let rows = try query(
            "SELECT sequence FROM ledger_lineages WHERE lineage = $1 AND sequence <= $2 ORDER BY sequence",
            [.bytes(lineage.bytes), .int64(Int64(min(through, UInt64(Int64.max))))])
        return try (0..<rows.count).map { try PostgresRowDecoding.sequence(rows.value($0, 0)) }
    }

    /// In a write group, the same pipeline also reads ahead what a group asks next about these
    /// accounts (``WriteGroup``'s loading of a deletion): the states of those lineages and the
    /// accounts' deletion markers, answered once by ``lineageStates(_:)`` and ``deletedAccounts(among:)``.
    func lineages(boundTo accounts: [AccountID]) throws -> [AccountID: [LineageKey]] {
        guard !accounts.isEmpty else { return [:] }
        var out = Dictionary(accounts.map { ($0, [LineageKey]()) }, uniquingKeysWith: { first, _ in first })
        let keys = PostgresValue.bytesArray(Array(out.keys).map(\.bytes))
        let bound = PostgresStatement(
            "SELECT DISTINCT account, lineage FROM ledger_account_lineages WHERE account = ANY($1) ORDER BY account, lineage", [keys])
        guard writing else { return try decodeBound(query(bound.sql, bound.parameters), into: out) }
        let markers = out.keys.map(ReadModel.deletedKey)
        let statements = [
            bound,
            // The keys as an array computed at execution, so the read models are read through their
            // primary key: as `key IN (SELECT …)` the planner, guessing hundreds of lineages for a
            // few accounts, hashed them and read the whole table (docs/benchmarks.md, "Session 23").
            PostgresStatement(
                """
                SELECT key, value FROM ledger_read_models WHERE key = ANY(ARRAY(
                    SELECT DISTINCT $2::bytea || lineage FROM ledger_account_lineages WHERE account = ANY($1)))
                """, [keys, .bytes([ReadModel.lineagePrefix])]),
            Self.readModelsStatement(markers),
        ]
        var rows = try run(pending + statements)[...]
        rows.removeFirst(pending.count)
        pending = []
        out = try decodeBound(rows.removeFirst(), into: out)
        let states = out.values.joined().map(ReadModel.lineageKey)
        for (asked, answer) in [(states, rows.removeFirst()), (markers, rows.removeFirst())] {
            let found = Dictionary(decodeReadModels(answer, asked: asked), uniquingKeysWith: { first, _ in first })
            for key in asked { prefetchedReadModels.updateValue(found[key], forKey: key) }
        }
        return out
    }

    private func decodeBound(_ rows: PostgresRows, into out: [AccountID: [LineageKey]]) throws -> [AccountID: [LineageKey]] {
        var out = out
        for row in 0..<rows.count {
            let account = AccountID(try PostgresRowDecoding.key128(rows.value(row, 0)))
            out[account, default: []].append(LineageKey(try PostgresRowDecoding.key128(rows.value(row, 1))))
        }
        return out
    }

    func forEachEntry(of index: EngineIndex, _ body: (IndexEntry) throws -> Bool) throws {
        let table = PostgresRowDecoding.table(of: index)
        let columns = table.columns.joined(separator: ", ")
        var after: [PostgresValue]?
        while true {
            let placeholders = (1...table.columns.count).map { "$\($0)" }.joined(separator: ", ")
            let rows = try query(
                "SELECT \(columns) FROM \(table.name)" + (after == nil ? "" : " WHERE (\(columns)) > (\(placeholders))")
                    + " ORDER BY \(columns) LIMIT \(PostgresEngine.page)", after ?? [])
            for row in 0..<rows.count {
                guard try body(PostgresRowDecoding.entry(index, rows.row(row))) else { return }
            }
            guard rows.count == PostgresEngine.page else { return }
            after = try table.key(rows.row(rows.count - 1))
        }
    }

    func contains(_ entry: IndexEntry) throws -> Bool {
        switch entry {
        case .command(let command, let sequence):
            return try query("SELECT 1 FROM ledger_commands WHERE command = $1 AND sequence = $2", [.bytes(command.bytes), .int64(Int64(sequence))])
                .count > 0
        case .lineage(let lineage, let sequence, let command):
            return try query(
                "SELECT 1 FROM ledger_lineages WHERE lineage = $1 AND sequence = $2 AND command = $3",
                [.bytes(lineage.bytes), .int64(Int64(sequence)), .bytes(command.bytes)]
            ).count > 0
        case .accountLineage(let account, let lineage, let sequence):
            return try query(
                "SELECT 1 FROM ledger_account_lineages WHERE account = $1 AND lineage = $2 AND sequence = $3",
                [.bytes(account.bytes), .bytes(lineage.bytes), .int64(Int64(sequence))]
            ).count > 0
        case .merkleNode(let level, let index, let hash):
            return try merkleNode(level: level, index: index) == hash
        case .malformed:
            return false
        }
    }

    func normalized(_ entry: IndexEntry) -> IndexEntry { entry }

    // MARK: Read models

    private func readModels(_ keys: [[UInt8]]) throws -> [([UInt8], [UInt8])] {
        var found: [([UInt8], [UInt8])] = []
        var asked: [[UInt8]] = []
        for key in keys {
            if let prefetched = prefetchedReadModels.removeValue(forKey: key) {
                if let prefetched { found.append((key, prefetched)) }
            } else {
                asked.append(key)
            }
        }
        guard !asked.isEmpty else { return found }
        let statement = Self.readModelsStatement(asked)
        return try found + decodeReadModels(query(statement.sql, statement.parameters), asked: asked)
    }

    private static func readModelsStatement(_ keys: [[UInt8]]) -> PostgresStatement {
        PostgresStatement(byKey(table: "ledger_read_models", key: "key", columns: "key, value"), [.bytesArray(keys)])
    }

    /// The rows of `table` whose primary key `key` is one of the array `$1`, each found through the
    /// key's index. (`key = ANY($1)` lets the planner scan the whole table and hash the array once a
    /// group's keys are a few hundred: its cost estimate for random index reads wins over a table in
    /// memory, and the scan grows with the table. The lateral subquery with its `LIMIT` is not
    /// flattened into a join, so each key is one index probe whatever the table's size.)
    static func byKey(table: String, key: String, columns: String) -> String {
        """
        SELECT r.* FROM (SELECT DISTINCT unnest($1::bytea[]) AS asked) AS a
            CROSS JOIN LATERAL (SELECT \(columns) FROM \(table) WHERE \(key) = a.asked LIMIT 1) AS r
        """
    }

    /// The rows read for `asked`; under the head lock, the keys not found are noted as absent.
    private func decodeReadModels(_ rows: PostgresRows, asked: [[UInt8]]) -> [([UInt8], [UInt8])] {
        let found = (0..<rows.count).map { (rows.bytes($0, 0) ?? [], rows.bytes($0, 1) ?? []) }
        if lockedHead != nil {
            absentReadModels.formUnion(asked)
            absentReadModels.subtract(found.map(\.0))
        }
        return found
    }

    func lineageStates(_ lineages: [LineageKey]) throws -> [LineageKey: LineageState] {
        var out: [LineageKey: LineageState] = [:]
        for (key, value) in try readModels(Array(Set(lineages)).map(ReadModel.lineageKey)) {
            guard key.count == 17, let lineage = Key128(Array(key.dropFirst())).map(LineageKey.init) else {
                throw LedgerStoreError.corrupt("a read-model key of \(key.count) bytes")
            }
            do {
                out[lineage] = try ReadModel.decodeLineage(value)
            } catch {
                throw LedgerStoreError.corrupt("the persisted state of lineage \(lineage): \(error)")
            }
        }
        return out
    }

    func deletedAccounts(among accounts: [AccountID]) throws -> Set<AccountID> {
        Set(try readModels(Array(Set(accounts)).map(ReadModel.deletedKey)).compactMap { Key128(Array($0.0.dropFirst())).map(AccountID.init) })
    }

    func staff() throws -> [StaffID: StaffMember] {
        var entries: [([UInt8], [UInt8])] = []
        try forEachReadModel(from: [ReadModel.staffPrefix]) { key, value in
            guard key.first == ReadModel.staffPrefix else { return false }
            entries.append((key, value))
            return true
        }
        var state = LedgerState()
        do {
            try ReadModel.load(entries, into: &state)
        } catch {
            throw LedgerStoreError.corrupt("the persisted staff roster: \(error)")
        }
        return state.staff
    }

    func transferCases(_ ids: [String]) throws -> [String: TransferCase] {
        var state = LedgerState()
        do {
            try ReadModel.load(try readModels(Array(Set(ids)).map(ReadModel.transferKey)), into: &state)
        } catch let error as DecodingFailure {
            throw LedgerStoreError.corrupt("a persisted transfer case: \(error)")
        }
        return state.transfers
    }

    func forEachReadModel(from start: [UInt8], _ body: ([UInt8], [UInt8]) throws -> Bool) throws {
        var bound = start
        var inclusive = true
        while true {
            let rows = try query(
                "SELECT key, value FROM ledger_read_models WHERE key \(inclusive ? ">=" : ">") $1 ORDER BY key LIMIT \(PostgresEngine.page)",
                [.bytes(bound)])
            for row in 0..<rows.count {
                let columns = rows.row(row)
                guard try body(columns[0] ?? [], columns[1] ?? []) else { return }
            }
            guard rows.count == PostgresEngine.page else { return }
            bound = rows.row(rows.count - 1)[0] ?? []
            inclusive = false
        }
    }

    // MARK: Vault and Merkle nodes

    func identities(vaultKeys: [Key128]) throws -> [Key128: VaultEntry] {
        var out: [Key128: VaultEntry] = [:]
        var asked: [Key128] = []
        for key in Set(vaultKeys) {
            if let prefetched = prefetchedVaultKeys.removeValue(forKey: key) {
                if let prefetched { out[key] = prefetched }
            } else {
                asked.append(key)
            }
        }
        guard !asked.isEmpty else { return out }
        let statement = Self.identitiesStatement(asked, bound: bound("s"))
        return try out.merging(decodeIdentities(query(statement.sql, statement.parameters), asked: asked)) { _, read in read }
    }

    /// The vault entries of `vaultKeys`, each with the UID sealed under its pseudonym (NULL when none).
    private static func identitiesStatement(_ vaultKeys: [Key128], bound: String) -> PostgresStatement {
        PostgresStatement(
            byKey(
                table: "ledger_identities AS i LEFT JOIN ledger_sealed_uids AS s ON s.account = i.account", key: "i.vault_key",
                columns: "i.vault_key, i.account, s.sealed_uid, \(bound)"), [.bytesArray(vaultKeys.map(\.bytes))])
    }

    /// The vault entries read for `asked`; under the head lock, the keys not found are noted as absent.
    private func decodeIdentities(_ rows: PostgresRows, asked: [Key128]) throws -> [Key128: VaultEntry] {
        var out: [Key128: VaultEntry] = [:]
        for row in 0..<rows.count {
            out[try PostgresRowDecoding.key128(rows.value(row, 0))] = VaultEntry(
                account: AccountID(try PostgresRowDecoding.key128(rows.value(row, 1))),
                sealedUID: Self.sealedValue(rows.bytes(row, 2), bound: rows.bytes(row, 3)))
        }
        if lockedHead != nil { absentVaultKeys.formUnion(asked.filter { out[$0] == nil }) }
        return out
    }

    func sealedUID(of account: AccountID) throws -> [UInt8]? {
        let rows = try query("SELECT sealed_uid, \(bound("s")) FROM ledger_sealed_uids AS s WHERE account = $1", [.bytes(account.bytes)])
        return rows.count == 0 ? nil : Self.sealedValue(rows.bytes(0, 0), bound: rows.bytes(0, 1))
    }

    func forEachVaultEntry(from start: Key128, _ body: (Key128, VaultEntry) throws -> Bool) throws {
        var after: [UInt8]?
        while true {
            let rows = try query(
                """
                SELECT i.vault_key, i.account, s.sealed_uid, \(bound("s")) FROM ledger_identities AS i
                LEFT JOIN ledger_sealed_uids AS s ON s.account = i.account
                """ + (after == nil ? " WHERE i.vault_key >= $1" : " WHERE i.vault_key > $1") + " ORDER BY i.vault_key LIMIT \(PostgresEngine.page)",
                [.bytes(after ?? start.bytes)])
            for row in 0..<rows.count {
                let account = AccountID(try PostgresRowDecoding.key128(rows.value(row, 1)))
                let entry = VaultEntry(account: account, sealedUID: Self.sealedValue(rows.bytes(row, 2), bound: rows.bytes(row, 3)))
                guard try body(try PostgresRowDecoding.key128(rows.value(row, 0)), entry) else { return }
            }
            guard rows.count == PostgresEngine.page else { return }
            after = rows.bytes(rows.count - 1, 0)
        }
    }

    func forEachSealedUID(_ body: (AccountID, [UInt8]) throws -> Bool) throws {
        var after: [UInt8]?
        while true {
            let rows = try query(
                "SELECT account, sealed_uid, \(bound("s")) FROM ledger_sealed_uids AS s" + (after == nil ? "" : " WHERE account > $1")
                    + " ORDER BY account LIMIT \(PostgresEngine.page)",
                after.map { [.bytes($0)] } ?? [])
            for row in 0..<rows.count {
                let sealed = Self.sealedValue(rows.bytes(row, 1) ?? [], bound: rows.bytes(row, 2)) ?? []
                guard try body(AccountID(try PostgresRowDecoding.key128(rows.value(row, 0))), sealed) else { return }
            }
            guard rows.count == PostgresEngine.page else { return }
            after = rows.bytes(rows.count - 1, 0)
        }
    }

    func vaultEntryCount() throws -> Int {
        let rows = try query("SELECT (SELECT count(*) FROM ledger_identities) + (SELECT count(*) FROM ledger_sealed_uids)")
        return try withExtendedLifetime(rows) { Int(try PostgresRowDecoding.int64(rows.value(0, 0))) }
    }

    func merkleNode(level: UInt8, index: UInt64) throws -> Digest32? {
        guard index <= UInt64(Int64.max) else { return nil }
        let rows = try query("SELECT hash FROM ledger_merkle WHERE level = $1 AND index = $2", [.int16(Int16(level)), .int64(Int64(index))])
        guard rows.count > 0 else { return nil }
        return try withExtendedLifetime(rows) { try PostgresRowDecoding.digest(rows.value(0, 0)) }
    }

    /// Rows and bytes (with indexes and TOAST) per table, under the names of the LMDB databases they
    /// stand for (`ledger stats` and `verify` read them alike on both engines).
    func statistics() throws -> [(name: String, entries: Int, bytes: Int)] {
        let databases: [(String, [String])] = [
            ("log", ["ledger_log"]), ("commands", ["ledger_commands"]), ("lineages", ["ledger_lineages"]),
            ("account-lineages", ["ledger_account_lineages"]), ("read-models", ["ledger_read_models"]),
            ("identities", ["ledger_identities", "ledger_sealed_uids"]), ("merkle", ["ledger_merkle"]), ("meta", ["ledger_meta", "ledger_head"]),
        ]
        return try databases.map { name, tables in
            var entries = 0
            var bytes = 0
            for table in tables {
                let rows = try query("SELECT count(*), pg_total_relation_size($1::regclass) FROM \(table)", [.text(table)])
                try withExtendedLifetime(rows) {
                    entries += Int(try PostgresRowDecoding.int64(rows.value(0, 0)))
                    bytes += Int(try PostgresRowDecoding.int64(rows.value(0, 1)))
                }
            }
            return (name, entries, bytes)
        }
    }

    // MARK: Writing

    /// Drops what was read ahead: it describes the store before the group's writes.
    private func forgetReadAhead() {
        prefetchedCommands = [:]
        prefetchedVaultKeys = [:]
        prefetchedReadModels = [:]
    }

    /// Notes keys this group writes, for its `ledger_changes` row.
    private func noteWritten(_ fingerprints: some Sequence<UInt64>) {
        guard writtenKeys != nil else { return }
        writtenKeys?.append(contentsOf: fingerprints)
        if writtenKeys?.count ?? 0 > ChangeLog.keyLimit { writtenKeys = nil }
    }

    func apply(_ batch: EngineBatch) throws {
        forgetReadAhead()
        noteWritten(batch.entries.lazy.compactMap(ChangeLog.fingerprint(of:)))
        noteWritten(batch.vaultErasures.lazy.map { ChangeLog.fingerprint(vaultKey: $0.vaultKey) })
        noteWritten(batch.vaultInserts.lazy.map { ChangeLog.fingerprint(vaultKey: $0.vaultKey) })
        if !batch.records.isEmpty {
            pending.append(
                PostgresStatement(
                    "INSERT INTO ledger_log (sequence, record) SELECT * FROM unnest($1::int8[], $2::bytea[])",
                    [.int64Array(batch.records.map { Int64($0.sequence) }), .bytesArray(batch.records.map(\.bytes))]))
            if let last = batch.records.last { lastAppended = last }
        }
        try insert(batch.entries, appending: batch.records.first.map { $0.sequence...(batch.records.last?.sequence ?? $0.sequence) })
        if let head = batch.head {
            pending.append(
                PostgresStatement(
                    "UPDATE ledger_head SET sequence = $1, chain_hash = $2, recorded_at = $3, frontier = $4",
                    [
                        .int64(Int64(head.sequence)), .bytes(head.sequence == 0 ? [] : head.chainHash.bytes), .int64(head.recordedAt),
                        .bytes(head.frontier.flatMap(\.bytes)),
                    ]))
            if writing { lockedHead = head }
        }
        // Read models: every put and removal of the batch, in order (the last one of a key wins).
        var puts: [([UInt8], [UInt8])] = batch.lineageStates.map { (ReadModel.lineageKey($0.0), ReadModel.encode($0.1)) }
        puts += batch.deletedAccounts.map { (ReadModel.deletedKey($0), []) }
        var removals: [[UInt8]] = []
        for (staff, member) in batch.staff {
            if let member {
                var roster = LedgerState()
                roster.staff = [staff: member]
                puts += ReadModel.entries(of: roster).map { ($0.key, $0.value) }
            } else {
                removals.append(ReadModel.staffKey(staff))
            }
        }
        for (caseId, transfer) in batch.transferCases {
            var cases = LedgerState()
            cases.transfers = [caseId: transfer]
            puts += ReadModel.entries(of: cases).map { ($0.key, $0.value) }
        }
        try removeReadModels(removals)
        try putReadModels(puts)
        // Erasures before insertions: a UID deleted and then used again in one group keeps its new mapping.
        if !batch.vaultErasures.isEmpty {
            pending.append(
                PostgresStatement("DELETE FROM ledger_identities WHERE vault_key = ANY($1)", [.bytesArray(batch.vaultErasures.map(\.vaultKey.bytes))])
            )
            pending.append(
                PostgresStatement("DELETE FROM ledger_sealed_uids WHERE account = ANY($1)", [.bytesArray(batch.vaultErasures.map(\.account.bytes))]))
        }
        if !batch.vaultInserts.isEmpty {
            // A vault key read as absent under the lock gets a pseudonym just issued (its first six
            // bytes the record's position, the rest random), so neither row can be there yet: plain
            // inserts; any other mapping (a migration's copy, a later write of the same key) is upserted.
            var seen = Set<Key128>()
            let inserts = batch.vaultInserts.reversed().filter { seen.insert($0.vaultKey).inserted }.reversed()
            var fresh: [(vaultKey: Key128, account: AccountID, sealedUID: [UInt8])] = []
            var others: [(vaultKey: Key128, account: AccountID, sealedUID: [UInt8])] = []
            for insert in inserts {
                if absentVaultKeys.remove(insert.vaultKey) != nil { fresh.append(insert) } else { others.append(insert) }
            }
            let upsertIdentity = " ON CONFLICT (vault_key) DO UPDATE SET account = EXCLUDED.account"
            let upsertSealed = " ON CONFLICT (account) DO UPDATE SET sealed_uid = EXCLUDED.sealed_uid, bound = EXCLUDED.bound"
            for (rows, conflict) in [(fresh, ""), (others, upsertIdentity)] where !rows.isEmpty {
                pending.append(
                    PostgresStatement(
                        "INSERT INTO ledger_identities (vault_key, account) SELECT * FROM unnest($1::bytea[], $2::bytea[])" + conflict,
                        [.bytesArray(rows.map(\.vaultKey.bytes)), .bytesArray(rows.map(\.account.bytes))]))
            }
            let sealed = [
                (fresh.map { ($0.account.bytes, $0.sealedUID) }, ""),
                (Self.lastOfEachKey(others.map { ($0.account.bytes, $0.sealedUID) }), upsertSealed),
            ]
            // Bound seals stored with their layout byte, legacy ones (a migration's copy) without (``SealedUID``).
            for (rows, conflict) in sealed where !rows.isEmpty {
                var stored: [(bound: Bool, rows: [([UInt8], [UInt8])])] = [(true, []), (false, [])]
                for (account, value) in rows {
                    switch value.first {
                    case SealedUID.bound: stored[0].rows.append((account, value))
                    case SealedUID.legacy: stored[1].rows.append((account, Array(value.dropFirst())))
                    default: throw LedgerStoreError.corrupt("a sealed UID of no known layout to store")
                    }
                }
                for (bound, rows) in stored where !rows.isEmpty {
                    pending.append(
                        PostgresStatement(
                            "INSERT INTO ledger_sealed_uids (account, sealed_uid, bound) SELECT a, s, \(bound) FROM unnest($1::bytea[], $2::bytea[]) AS t(a, s)"
                                + conflict, [.bytesArray(rows.map(\.0)), .bytesArray(rows.map(\.1))]))
                }
            }
        }
        if !batch.meta.isEmpty {
            let meta = Self.lastOfEachKey(batch.meta.map { (Array($0.0.rawValue.utf8), $0.1) })
            pending.append(
                PostgresStatement(
                    """
                    INSERT INTO ledger_meta (name, value) SELECT convert_from(n, 'UTF8'), v FROM unnest($1::bytea[], $2::bytea[]) AS m(n, v)
                    ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
                    """, [.bytesArray(meta.map(\.0)), .bytesArray(meta.map(\.1))]))
        }
    }

    /// Index entries, one statement per index (an entry already there is kept, as LMDB's `MDB_NODUPDATA`;
    /// a Merkle node is replaced). Entries of the records `appending` (the batch's own, inserted into
    /// `ledger_log` by the same pipeline) cannot be there yet: they are inserted without `ON CONFLICT`,
    /// which halves the server's cost per row (no speculative insertion); a stray row would fail the
    /// group, as a stray `ledger_log` row would.
    private func insert(_ entries: [IndexEntry], appending: ClosedRange<UInt64>?) throws {
        var commands: [IndexEntry] = []
        var lineages: [IndexEntry] = []
        var accountLineages: [IndexEntry] = []
        var nodes: [(key: [UInt8], level: Int16, index: Int64, hash: [UInt8])] = []
        var seen = Set<IndexEntry>()
        for entry in entries where seen.insert(entry).inserted {
            switch entry {
            case .command: commands.append(entry)
            case .lineage: lineages.append(entry)
            case .accountLineage: accountLineages.append(entry)
            case .merkleNode(let level, let index, let hash):
                nodes.append((PostgresValue.bigEndian(UInt16(level)) + PostgresValue.bigEndian(index), Int16(level), Int64(index), hash.bytes))
            case .malformed(let index, _, _):
                throw LedgerStoreError.corrupt("a malformed \(index.rawValue) entry cannot be stored")
            }
        }
        for (index, group) in [(EngineIndex.commands, commands), (.lineages, lineages), (.accountLineages, accountLineages)] where !group.isEmpty {
            let table = PostgresRowDecoding.table(of: index)
            let insert = "INSERT INTO \(table.name) (\(table.columns.joined(separator: ", "))) SELECT * FROM unnest(\(table.arrayPlaceholders))"
            let isNew = { (entry: IndexEntry) in entry.sequence.map { appending?.contains($0) == true } ?? false }
            let (fresh, others) = (group.filter(isNew), group.filter { !isNew($0) })
            if !fresh.isEmpty { pending.append(PostgresStatement(insert, PostgresRowDecoding.columnValues(fresh))) }
            if !others.isEmpty { pending.append(PostgresStatement(insert + " ON CONFLICT DO NOTHING", PostgresRowDecoding.columnValues(others))) }
        }
        if !nodes.isEmpty {
            var seen = Set<[UInt8]>()
            let unique = nodes.reversed().filter { seen.insert($0.key).inserted }
            pending.append(
                PostgresStatement(
                    """
                    INSERT INTO ledger_merkle (level, index, hash) SELECT * FROM unnest($1::int2[], $2::int8[], $3::bytea[])
                    ON CONFLICT (level, index) DO UPDATE SET hash = EXCLUDED.hash
                    """, [.int16Array(unique.map(\.level)), .int64Array(unique.map(\.index)), .bytesArray(unique.map(\.hash))]))
        }
    }

    func remove(_ entries: [IndexEntry]) throws {
        forgetReadAhead()
        noteWritten(entries.lazy.compactMap(ChangeLog.fingerprint(of:)))
        for index in EngineIndex.allCases {
            let table = PostgresRowDecoding.table(of: index)
            let keys = try entries.filter { $0.index == index }.map { try PostgresRowDecoding.rowKey(of: $0) }
            guard let first = keys.first else { continue }
            let arrays = (0..<first.count).map { column in PostgresRowDecoding.array(keys.map { $0[column] }) }
            let columns = table.keyColumns.joined(separator: ", ")
            pending.append(
                PostgresStatement(
                    "DELETE FROM \(table.name) WHERE (\(columns)) IN (SELECT * FROM unnest(\(table.keyArrayPlaceholders)))", arrays))
        }
    }

    func removeReadModels(_ keys: [[UInt8]]) throws {
        forgetReadAhead()
        guard !keys.isEmpty else { return }
        noteWritten(keys.lazy.map(ChangeLog.fingerprint(readModel:)))
        pending.append(PostgresStatement("DELETE FROM ledger_read_models WHERE key = ANY($1)", [.bytesArray(keys)]))
    }

    /// Upserts `entries` (the last value of each key wins); keys the group read as absent under the
    /// lock are inserted without `ON CONFLICT`.
    func putReadModels(_ entries: [([UInt8], [UInt8])]) throws {
        forgetReadAhead()
        guard !entries.isEmpty else { return }
        noteWritten(entries.lazy.map { ChangeLog.fingerprint(readModel: $0.0) })
        var fresh: [([UInt8], [UInt8])] = []
        var others: [([UInt8], [UInt8])] = []
        for entry in Self.lastOfEachKey(entries) {
            if absentReadModels.remove(entry.0) != nil { fresh.append(entry) } else { others.append(entry) }
        }
        for (rows, conflict) in [(fresh, ""), (others, " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")] where !rows.isEmpty {
            pending.append(
                PostgresStatement(
                    "INSERT INTO ledger_read_models (key, value) SELECT * FROM unnest($1::bytea[], $2::bytea[])" + conflict,
                    [.bytesArray(rows.map(\.0)), .bytesArray(rows.map(\.1))]))
        }
    }

    /// The pairs with each key once, holding its last value (one multi-row upsert may not touch a row twice).
    static func lastOfEachKey(_ pairs: [([UInt8], [UInt8])]) -> [([UInt8], [UInt8])] {
        var seen = Set<[UInt8]>()
        return pairs.reversed().filter { seen.insert($0.0).inserted }.reversed()
    }
}
