import CLMDB
public import LedgerCore
import LedgerCrypto
public import Projections

/// Reads inside one LMDB transaction: a consistent snapshot of the log, indexes and read models.
public struct ReadSession {
    let txn: LMDBTransaction
    let keys: LedgerKeys
    typealias DB = LedgerStore.Database
    typealias Meta = LedgerStore.Meta

    /// The last sequence number (0 when empty) and its hash.
    public func head() throws -> (sequence: UInt64, hash: Digest32) {
        let sequence = try txn.get(DB.meta, Meta.headSequence).flatMap(u64) ?? 0
        let hash = try txn.get(DB.meta, Meta.headHash).flatMap(Digest32.init) ?? .zero
        return (sequence, hash)
    }

    /// The stored bytes of record `sequence` (body ‖ hash).
    public func storedRecord(_ sequence: UInt64) throws -> [UInt8]? { try txn.get(DB.log, u64Bytes(sequence)) }

    /// Record `sequence`, decoded.
    public func record(_ sequence: UInt64) throws -> Record? {
        try storedRecord(sequence).map { try RecordCodec.decode($0, sequence: sequence) }
    }

    /// Visits stored records from `from` in order until `body` returns false.
    public func forEachStoredRecord(from: UInt64 = 1, _ body: (UInt64, [UInt8]) throws -> Bool) throws {
        try txn.scan(DB.log, from: u64Bytes(from)) { key, value in
            guard let sequence = u64(key) else { throw LedgerStoreError.corrupt("log key of \(key.count) bytes") }
            return try body(sequence, value)
        }
    }

    /// Visits decoded records from `from` in order until `body` returns false.
    /// - Complexity: O(records visited).
    public func forEachRecord(from: UInt64 = 1, _ body: (Record) throws -> Bool) throws {
        try forEachStoredRecord(from: from) { sequence, bytes in try body(RecordCodec.decode(bytes, sequence: sequence)) }
    }

    /// The sequence number an event id was appended at.
    public func sequence(ofEvent eventId: Digest32) throws -> UInt64? {
        try txn.get(DB.eventIds, eventId.bytes).flatMap(u64)
    }

    /// The sequence numbers of the lineage's events, in order.
    /// - Complexity: O(events in the lineage).
    public func sequences(ofLineage lineage: LineageKey) throws -> [UInt64] {
        try indexSequences(DB.lineages, prefix: lineage.digest.bytes)
    }

    /// The sequence numbers of events naming `account`, in order.
    public func sequences(ofAccount account: AccountID) throws -> [UInt64] {
        try indexSequences(DB.accounts, prefix: account.bytes)
    }

    /// The number of events in the lineage: the version an optimistic append states.
    public func lineageVersion(_ lineage: LineageKey) throws -> UInt64 {
        UInt64(try sequences(ofLineage: lineage).count)
    }

    private func indexSequences(_ db: String, prefix: [UInt8]) throws -> [UInt64] {
        var out: [UInt64] = []
        try txn.scan(db, prefix: prefix) { key, _ in
            if let sequence = u64(Array(key.dropFirst(prefix.count))) { out.append(sequence) }
        }
        return out
    }

    /// The latest attempt of a submission (see ``WriteSession/recordAttempt(of:attempt:firstSequence:)``).
    public func latestAttempt(of submission: Digest32) throws -> (attempt: UInt32, firstSequence: UInt64)? {
        guard let value = try txn.get(DB.submissions, submission.bytes) else { return nil }
        var reader = ByteReader(value)
        do {
            return (try reader.u32(), try reader.u64())
        } catch {
            throw LedgerStoreError.corrupt("submission index entry: \(error)")
        }
    }

    // MARK: Read models

    /// The persisted state for the given lineages and accounts (with the accounts' bound lineages),
    /// the whole staff roster, and the given transfer cases: what a decision needs.
    public func loadState(
        lineages: [LineageKey] = [], accounts: [AccountID] = [], cases: [String] = []
    ) throws -> LedgerState {
        var entries: [([UInt8], [UInt8])] = []
        func add(_ key: [UInt8]) throws {
            if let value = try txn.get(DB.readModels, key) { entries.append((key, value)) }
        }
        var wanted = Set(lineages)
        for account in accounts {
            try add(ReadModel.accountKey(account))
            try add(ReadModel.deletedKey(account))
            if let value = entries.last?.1, entries.last?.0 == ReadModel.accountKey(account) {
                var partial = LedgerState()
                try ReadModel.load([(ReadModel.accountKey(account), value)], into: &partial)
                wanted.formUnion(partial.accountLineages[account] ?? [])
            }
        }
        for lineage in wanted { try add(ReadModel.lineageKey(lineage)) }
        for caseId in cases { try add(ReadModel.transferKey(caseId)) }
        try txn.scan(DB.readModels, prefix: ReadModel.staffPrefix) { key, value in entries.append((key, value)) }
        var state = LedgerState()
        do {
            try ReadModel.load(entries, into: &state)
        } catch {
            throw LedgerStoreError.corrupt("persisted read model: \(error)")
        }
        // Keep the accounts of every loaded binding in view, so evolving the state touches only loaded keys.
        for lineage in wanted {
            for account in state.lineage(lineage).binding.accounts where state.accountLineages[account] == nil {
                if let value = try txn.get(DB.readModels, ReadModel.accountKey(account)) {
                    do {
                        try ReadModel.load([(ReadModel.accountKey(account), value)], into: &state)
                    } catch {
                        throw LedgerStoreError.corrupt("persisted read model: \(error)")
                    }
                }
            }
        }
        return state
    }

    /// Every persisted read-model entry.
    public func readModelEntries() throws -> ReadModel.Entries {
        var out = ReadModel.Entries()
        try txn.scan(DB.readModels, from: []) { key, value in
            out[key] = value
            return true
        }
        return out
    }

    // MARK: Identity vault

    /// The pseudonym of a live account, or nil when the vault has no mapping for `uid`.
    public func pseudonym(ofUID uid: String) throws -> AccountID? {
        try txn.get(DB.identities, try vaultKey(uid)).flatMap { AccountID(Array($0.prefix(16))) }
    }

    /// The UID of a live account's pseudonym, or nil once the account is deleted.
    public func uid(of account: AccountID) throws -> String? {
        guard let sealed = try txn.get(DB.identities, [0x70] + account.bytes) else { return nil }
        let plain = try SealedBox.open(sealed, key: keys.sealKey)
        return String(decoding: plain, as: UTF8.self)
    }

    func vaultKey(_ uid: String) throws -> [UInt8] { [0x75] + (try Digest.hmacSHA256(key: keys.vaultKey, message: Array(uid.utf8))) }

    // MARK: Statistics

    /// Entries and bytes per database.
    public func statistics() throws -> [(name: String, entries: Int, bytes: Int)] {
        try LedgerStore.databaseNames.map { name in
            let stat = try txn.statistics(name)
            return (name, stat.entries, stat.bytes)
        }
    }
}

extension Binding {
    /// The accounts a binding names.
    var accounts: [AccountID] {
        switch self {
        case .unbound: []
        case .bound(let account), .tombstoned(let account): [account]
        }
    }
}

/// A write transaction: appends, read-model updates and identity changes commit together.
public struct WriteSession {
    /// Reads see this transaction's own writes.
    public let reader: ReadSession
    var txn: LMDBTransaction { reader.txn }
    typealias DB = LedgerStore.Database
    typealias Meta = LedgerStore.Meta

    init(txn: LMDBTransaction, keys: LedgerKeys) { reader = ReadSession(txn: txn, keys: keys) }

    /// Appends `events` in order: gapless sequence numbers, the hash chain and the indexes.
    ///
    /// Idempotent by event id: when every event was appended before with the same content, nothing
    /// is appended and the original sequence numbers are returned; an id appended with different
    /// content is ``LedgerStoreError/conflictingEvent(eventId:sequence:)``. Each entry of
    /// `expectedVersions` must equal the lineage's current version, else
    /// ``LedgerStoreError/staleLineageVersion(lineage:expected:actual:)``.
    @discardableResult
    public func append(_ events: [PendingEvent], expectedVersions: [LineageKey: UInt64] = [:]) throws -> AppendResult {
        guard !events.isEmpty else { return AppendResult(sequences: [], appended: false) }
        let existing = try events.map { try reader.sequence(ofEvent: $0.eventId) }
        if existing.contains(where: { $0 != nil }) {
            for (event, sequence) in zip(events, existing) {
                guard let sequence else {
                    throw LedgerStoreError.conflictingEvent(eventId: events[0].eventId, sequence: existing.compactMap { $0 }.first ?? 0)
                }
                guard let stored = try reader.record(sequence), stored.event == event.event else {
                    throw LedgerStoreError.conflictingEvent(eventId: event.eventId, sequence: sequence)
                }
            }
            return AppendResult(sequences: existing.compactMap { $0 }, appended: false)
        }
        for (lineage, expected) in expectedVersions.sorted(by: { $0.key < $1.key }) {
            let actual = try reader.lineageVersion(lineage)
            guard actual == expected else {
                throw LedgerStoreError.staleLineageVersion(lineage: lineage, expected: expected, actual: actual)
            }
        }
        var (sequence, previousHash) = try reader.head()
        var sequences: [UInt64] = []
        sequences.reserveCapacity(events.count)
        for pending in events {
            sequence += 1
            let body = RecordCodec.body(
                sequence: sequence, recordedAt: pending.recordedAt, eventId: pending.eventId, previousHash: previousHash,
                eventBytes: EventCodec.encode(pending.event))
            let hash = try Digest.sha256(previousHash.bytes, body)
            let key = u64Bytes(sequence)
            try txn.put(DB.log, key, body + hash, flags: MDB_APPEND)
            try txn.put(DB.eventIds, pending.eventId.bytes, key, flags: MDB_NOOVERWRITE)
            if let lineage = pending.event.lineage {
                try txn.put(DB.lineages, lineage.digest.bytes + key, [])
            }
            for account in Set(pending.event.accounts) {
                try txn.put(DB.accounts, account.bytes + key, [])
            }
            previousHash = Digest32(hash) ?? .zero
            sequences.append(sequence)
        }
        try txn.put(DB.meta, Meta.headSequence, u64Bytes(sequence))
        try txn.put(DB.meta, Meta.headHash, previousHash.bytes)
        return AppendResult(sequences: sequences, appended: true)
    }

    /// Records that attempt `attempt` (0 for the first) of a submission was appended starting at
    /// `firstSequence`, so a retry can be answered with its decision.
    public func recordAttempt(of submission: Digest32, attempt: UInt32, firstSequence: UInt64) throws {
        var writer = ByteWriter()
        writer.u32(attempt)
        writer.u64(firstSequence)
        try txn.put(DB.submissions, submission.bytes, writer.output)
    }

    /// Persists the difference between the state as loaded and as evolved.
    public func saveState(from before: LedgerState, to after: LedgerState) throws {
        let old = ReadModel.entries(of: before)
        let new = ReadModel.entries(of: after)
        for (key, value) in new where old[key] != value { try txn.put(DB.readModels, key, value) }
        for key in old.keys where new[key] == nil { try txn.delete(DB.readModels, key) }
    }

    /// Replaces every persisted read-model entry.
    func replaceReadModels(with entries: ReadModel.Entries) throws {
        for key in try reader.readModelEntries().keys where entries[key] == nil { try txn.delete(DB.readModels, key) }
        for (key, value) in entries { try txn.put(DB.readModels, key, value) }
        try txn.put(DB.meta, Meta.readModelVersion, u32Bytes(StateProjection.version))
    }

    /// The pseudonym of `uid`, issuing a random one (kept with the UID sealed) for a new account.
    public func pseudonym(forUID uid: String) throws -> AccountID {
        if let existing = try reader.pseudonym(ofUID: uid) { return existing }
        guard let account = AccountID(try Digest.randomBytes(16)) else { throw LedgerStoreError.corrupt("pseudonym") }
        let sealed = try SealedBox.seal(Array(uid.utf8), key: reader.keys.sealKey)
        try txn.put(DB.identities, try reader.vaultKey(uid), account.bytes)
        try txn.put(DB.identities, [0x70] + account.bytes, sealed)
        return account
    }

    /// Erases the mapping between `uid` and its pseudonym: events naming the pseudonym can no
    /// longer be linked to the person.
    public func eraseIdentity(uid: String) throws {
        guard let account = try reader.pseudonym(ofUID: uid) else { return }
        try txn.delete(DB.identities, try reader.vaultKey(uid))
        try txn.delete(DB.identities, [0x70] + account.bytes)
    }
}
