public import LedgerCore
import Projections

/// A reader of `base` with `batch` applied on top: what a write group that follows the batch's reads
/// while the batch is still being committed (``LedgerEngine/readAhead(_:_:)``). It answers the reads
/// that deciding a group makes; a scan (verify, rebuild, a point-in-time cut) throws
/// ``Unsupported``, and the group is then decided in its own write transaction instead.
public struct OverlayReader: EngineReader {
    /// A read the overlay does not answer.
    public struct Unsupported: Error, CustomStringConvertible {
        public let description: String
    }

    let base: any EngineReader
    let batch: EngineBatch
    private let records: [UInt64: [UInt8]]
    /// The latest of the batch's records of each command.
    private let commands: [Key128: (sequence: UInt64, bytes: [UInt8])]
    private let states: [LineageKey: LineageState]
    private let vault: [Key128: VaultEntry?]
    private let sealed: [AccountID: [UInt8]?]

    public init(base: any EngineReader, batch: EngineBatch) {
        self.base = base
        self.batch = batch
        var records: [UInt64: [UInt8]] = [:]
        var commands: [Key128: (sequence: UInt64, bytes: [UInt8])] = [:]
        for (sequence, bytes) in batch.records {
            records[sequence] = bytes
            if let command = bytes.withUnsafeBytes({ RecordCodec.command(of: $0) }) { commands[command] = (sequence, bytes) }
        }
        self.records = records
        self.commands = commands
        states = Dictionary(batch.lineageStates, uniquingKeysWith: { _, last in last })
        var vault: [Key128: VaultEntry?] = [:]
        var sealed: [AccountID: [UInt8]?] = [:]
        // An insert the group made before an erasure of its key is gone from the batch: what inserts
        // remain came after every erasure.
        for erasure in batch.vaultErasures {
            vault[erasure.vaultKey] = .some(nil)
            sealed[erasure.account] = .some(nil)
        }
        for insert in batch.vaultInserts {
            vault[insert.vaultKey] = VaultEntry(account: insert.account, sealedUID: insert.sealedUID)
            sealed[insert.account] = insert.sealedUID
        }
        self.vault = vault
        self.sealed = sealed
    }

    private func unsupported(_ what: String) -> Unsupported { Unsupported(description: "\(what) is not read ahead") }

    public func head() throws -> LogHead { try batch.head ?? base.head() }

    public func meta(_ key: MetaKey) throws -> [UInt8]? {
        if let written = batch.meta.last(where: { $0.0 == key }) { return written.1 }
        return try base.meta(key)
    }

    public func record(_ sequence: UInt64) throws -> [UInt8]? { try records[sequence] ?? base.record(sequence) }

    public func forEachRecord(from: UInt64, through: UInt64, _ body: (UInt64, UnsafeRawBufferPointer) throws -> Bool) throws {
        throw unsupported("a walk of the log")
    }

    public func lastSequence(recordedAtOrBefore time: Timestamp) throws -> UInt64 { throw unsupported("a point in time") }

    public func latestRecords(of commands: [CommandRef]) throws -> [Key128: (sequence: UInt64, bytes: [UInt8])] {
        var found = try base.latestRecords(of: commands.filter { self.commands[$0.key] == nil })
        for command in commands { if let latest = self.commands[command.key] { found[command.key] = latest } }
        return found
    }

    public func prefetch(commands: [CommandRef], vaultKeys: [Key128], lineages: [LineageKey]) throws {
        try base.prefetch(commands: commands, vaultKeys: vaultKeys, lineages: lineages)
    }

    public func sequences(ofLineage lineage: LineageKey, through: UInt64) throws -> [UInt64] {
        var sequences = try base.sequences(ofLineage: lineage, through: through)
        for case .lineage(lineage, let sequence, _) in batch.entries where sequence <= through { sequences.append(sequence) }
        return sequences.sorted()
    }

    public func lineages(boundTo accounts: [AccountID]) throws -> [AccountID: [LineageKey]] {
        var bound = try base.lineages(boundTo: accounts)
        let wanted = Set(accounts)
        for case .accountLineage(let account, let lineage, _) in batch.entries where wanted.contains(account) {
            if !(bound[account]?.contains(lineage) ?? false) { bound[account, default: []].append(lineage) }
        }
        return bound
    }

    public func lineageStates(_ lineages: [LineageKey]) throws -> [LineageKey: LineageState] {
        var found = try base.lineageStates(lineages.filter { states[$0] == nil })
        for lineage in lineages { if let state = states[lineage] { found[lineage] = state } }
        return found
    }

    public func deletedAccounts(among accounts: [AccountID]) throws -> Set<AccountID> {
        try base.deletedAccounts(among: accounts).union(Set(batch.deletedAccounts).intersection(accounts))
    }

    public func staff() throws -> [StaffID: StaffMember] {
        var roster = try base.staff()
        for (id, member) in batch.staff { roster[id] = member }
        return roster
    }

    public func transferCases(_ ids: [String]) throws -> [String: TransferCase] {
        var cases = try base.transferCases(ids)
        let wanted = Set(ids)
        for (id, transfer) in batch.transferCases where wanted.contains(id) { cases[id] = transfer }
        return cases
    }

    public func identities(vaultKeys: [Key128]) throws -> [Key128: VaultEntry] {
        var found = try base.identities(vaultKeys: vaultKeys.filter { vault[$0] == nil })
        for key in vaultKeys {
            if let written = vault[key] { found[key] = written }
        }
        return found
    }

    public func sealedUID(of account: AccountID) throws -> [UInt8]? {
        if let written = sealed[account] { return written }
        return try base.sealedUID(of: account)
    }

    public func merkleNode(level: UInt8, index: UInt64) throws -> Digest32? {
        for case .merkleNode(level: let l, index: let i, let hash) in batch.entries where l == level && i == index { return hash }
        return try base.merkleNode(level: level, index: index)
    }

    public func forEachVaultEntry(from start: Key128, _ body: (Key128, VaultEntry) throws -> Bool) throws {
        throw unsupported("a walk of the vault")
    }
    public func forEachSealedUID(_ body: (AccountID, [UInt8]) throws -> Bool) throws { throw unsupported("a walk of the vault") }
    public func vaultEntryCount() throws -> Int { throw unsupported("the vault's size") }
    public func forEachEntry(of index: EngineIndex, _ body: (IndexEntry) throws -> Bool) throws { throw unsupported("a walk of an index") }
    public func forEachReadModel(from start: [UInt8], _ body: ([UInt8], [UInt8]) throws -> Bool) throws {
        throw unsupported("a walk of the read models")
    }
    public func forEachReadModelBytes(from start: [UInt8], _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws {
        throw unsupported("a walk of the read models")
    }
    public func contains(_ entry: IndexEntry) throws -> Bool { try batch.entries.contains(entry) || base.contains(entry) }
    public func normalized(_ entry: IndexEntry) -> IndexEntry { base.normalized(entry) }
    public func statistics() throws -> [(name: String, entries: Int, bytes: Int)] { throw unsupported("the statistics") }
}
