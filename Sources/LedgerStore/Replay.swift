public import LedgerCore
import LedgerCrypto
public import Projections

/// The first record whose bytes, hash or link is wrong.
public struct ChainFault: Equatable, Sendable, CustomStringConvertible {
    public var sequence: UInt64
    public var reason: String
    public var description: String { "record \(sequence): \(reason)" }
}

/// What one pass over the whole log found.
public struct ReplayReport: Sendable {
    /// Records whose hash and link verified before the first fault (all of them when intact).
    public var verifiedRecords: UInt64
    public var chainFault: ChainFault?
    public var violations: [InvariantViolation]
    /// Read-model entries that differ between the persisted models and a fresh replay.
    public var readModelDifferences: [String]
    /// Entries of `event-ids`, `lineage-index` and `account-index` that differ from the ones the log
    /// implies, and `submissions` entries that name no record (or, for a first attempt, the wrong one).
    /// At most 100 lines, then one "… and N more".
    public var indexDifferences: [String]
    /// The state a fresh replay produced.
    public var state: LedgerState

    public var isIntact: Bool {
        chainFault == nil && violations.isEmpty && readModelDifferences.isEmpty && indexDifferences.isEmpty
    }
}

extension LedgerStore {
    /// Streams the whole log once: checks every record's structure, hash and link, runs the
    /// invariant checker, folds the projections, collects the index entries the records imply, and
    /// compares the projections with the persisted read models and the entries with the stored
    /// indexes. With `repair`, replaces the persisted read models with the fresh ones and makes the
    /// `event-ids`, `lineage-index` and `account-index` databases equal to the log's, in the same
    /// write transaction (`submissions` cannot be derived from the log: it is only checked).
    /// `progress` is called with (records done, total) every 10,000 records.
    /// - Complexity: O(records + index entries); memory O(index entries).
    public func replay(repair: Bool = false, progress: ((UInt64, UInt64) -> Void)? = nil) throws -> ReplayReport {
        let work = { (session: ReadSession) throws -> (ReplayReport, IndexCheck.Repairs) in
            let total = try session.head().sequence
            var checker = InvariantChecker(signatures: .libcrypto)
            var indexes = IndexCheck(capacity: try session.txn.statistics(Database.log).entries)
            var previousHash = Digest32.zero
            var expected: UInt64 = 1
            var fault: ChainFault?
            try session.forEachStoredRecord { sequence, stored in
                guard sequence == expected else {
                    fault = ChainFault(sequence: expected, reason: "missing (next stored record is \(sequence))")
                    return false
                }
                // Only a record that does not decode is a fault; a failing libcrypto is an error, thrown.
                let record: Record
                let body: ArraySlice<UInt8>
                let hash: Digest32
                do throws(RecordDecodingError) {
                    record = try RecordCodec.decode(stored, sequence: sequence)
                    (body, hash) = try RecordCodec.split(stored, sequence: sequence)
                } catch {
                    fault = ChainFault(sequence: sequence, reason: "\(error)")
                    return false
                }
                guard record.previousHash == previousHash else {
                    fault = ChainFault(sequence: sequence, reason: "link broken: previous hash does not match record \(sequence - 1)")
                    return false
                }
                guard try Digest.sha256(previousHash.bytes, Array(body)) == hash.bytes else {
                    fault = ChainFault(sequence: sequence, reason: "hash mismatch: the record's bytes were changed")
                    return false
                }
                previousHash = hash
                try checker.check(record)
                indexes.add(record)
                if sequence % 10_000 == 0 { progress?(sequence, total) }
                expected += 1
                return true
            }
            let head = try session.head()
            if fault == nil, expected - 1 != head.sequence || previousHash != head.hash {
                fault = ChainFault(sequence: expected, reason: "head metadata says \(head.sequence) records ending in \(head.hash.hex)")
            }
            progress?(expected - 1, total)
            let fresh = ReadModel.entries(of: checker.state)
            let persisted = try session.readModelEntries()
            var differences: [String] = []
            for key in Set(fresh.keys).union(persisted.keys).sorted(by: { $0.lexicographicallyPrecedes($1) })
            where fresh[key] != persisted[key] {
                differences.append(
                    "\(ReadModel.describe(key)): " + (persisted[key] == nil ? "missing" : fresh[key] == nil ? "unexpected" : "differs"))
            }
            let (indexDifferences, repairs) = try indexes.compare(
                with: session, verifiedThrough: expected - 1, chainBroken: fault != nil)
            let report = ReplayReport(
                verifiedRecords: expected - 1, chainFault: fault, violations: checker.violations,
                readModelDifferences: differences, indexDifferences: indexDifferences, state: checker.state)
            return (report, repairs)
        }
        if repair {
            return try write { session in
                let (report, repairs) = try work(session.reader)
                try session.replaceReadModels(with: ReadModel.entries(of: report.state))
                try repairs.apply(to: session)
                return report
            }
        }
        return try read { try work($0).0 }
    }

    /// Recomputes the persisted read models and the indexes from the log alone.
    public func rebuildReadModels(repair: Bool, progress: ((UInt64, UInt64) -> Void)? = nil) throws -> ReplayReport {
        try replay(repair: repair, progress: progress)
    }
}

/// The index entries the log implies, exactly as ``WriteSession/append(_:expectedVersions:)`` writes
/// them, collected record by record during replay, then sorted and merged with the stored databases
/// (which LMDB keeps in the same order). Keys are packed into fixed-size words: no allocation per
/// entry, and no hashing.
struct IndexCheck {
    /// The most difference lines a report lists before "… and N more".
    static let reportLimit = 100

    typealias DB = LedgerStore.Database

    /// Every record's event id and sequence.
    private var eventIds: [(key: PackedKey, sequence: UInt64)] = []
    /// lineage(32) ‖ u64 sequence.
    private var lineageEntries: [PackedKey] = []
    /// account(16) ‖ u64 sequence.
    private var accountEntries: [PackedKey] = []

    /// `capacity`: the number of records stored (LMDB's count, not the head metadata).
    init(capacity: Int) {
        eventIds.reserveCapacity(capacity)
        lineageEntries.reserveCapacity(capacity)
        accountEntries.reserveCapacity(capacity)
    }

    /// Adds the entries of one verified record.
    mutating func add(_ record: Record) {
        eventIds.append((PackedKey(record.eventId.bytes), record.sequence))
        if let lineage = record.event.lineage {
            lineageEntries.append(PackedKey(lineage.digest.bytes, sequence: record.sequence))
        }
        // The append indexes `Set(event.accounts)`: duplicates are dropped after sorting.
        for account in record.event.accounts {
            accountEntries.append(PackedKey(account.bytes, sequence: record.sequence))
        }
    }

    /// Writes that make the three derived indexes equal to the log's entries.
    struct Repairs {
        var puts: [(database: String, key: [UInt8], value: [UInt8])] = []
        var deletions: [(database: String, key: [UInt8])] = []

        func apply(to session: WriteSession) throws {
            for (database, key) in deletions { try session.txn.delete(database, key) }
            for (database, key, value) in puts { try session.txn.put(database, key, value) }
        }
    }

    /// Compares the collected entries with the stored indexes and checks `submissions`. Records
    /// after `last` were not collected: when the chain is broken, entries naming them are not judged
    /// (nor repaired). Consumes the collected entries.
    mutating func compare(
        with session: ReadSession, verifiedThrough last: UInt64, chainBroken: Bool
    ) throws -> (differences: [String], repairs: Repairs) {
        let judged = { (sequence: UInt64) in !chainBroken || sequence <= last }
        var differences = DifferenceList()
        var repairs = Repairs()
        var ids: [(key: PackedKey, sequence: UInt64)] = []
        swap(&ids, &eventIds)
        try Self.compareEventIds(&ids, with: session, judged: judged, into: &differences, repairs: &repairs)
        var lineages: [PackedKey] = []
        swap(&lineages, &lineageEntries)
        try Self.compare(
            &lineages, name: "lineage-index", database: DB.lineages, prefixLength: 32, label: "lineage", in: session,
            judged: judged, into: &differences, repairs: &repairs)
        lineages = []
        var accounts: [PackedKey] = []
        swap(&accounts, &accountEntries)
        try Self.compare(
            &accounts, name: "account-index", database: DB.accounts, prefixLength: 16, label: "account", in: session,
            judged: judged, into: &differences, repairs: &repairs)
        accounts = []
        try Self.checkSubmissions(in: session, eventIds: ids, verifiedThrough: last, chainBroken: chainBroken, into: &differences)
        return (differences.lines, repairs)
    }

    /// Sorts `ids` by event id, keeping the first record of an id several records share (the log
    /// itself cannot be indexed then), and merges them with `event-ids`.
    private static func compareEventIds(
        _ ids: inout [(key: PackedKey, sequence: UInt64)], with session: ReadSession, judged: (UInt64) -> Bool,
        into differences: inout DifferenceList, repairs: inout Repairs
    ) throws {
        ids.sort { ($0.key, $0.sequence) < ($1.key, $1.sequence) }
        var kept = 0
        for index in ids.indices {
            if kept > 0, ids[kept - 1].key == ids[index].key {
                differences.append(
                    "event-ids: records \(ids[kept - 1].sequence) and \(ids[index].sequence) share event id \(ids[index].key.bytes(count: 32).hex)")
            } else {
                ids[kept] = ids[index]
                kept += 1
            }
        }
        ids.removeLast(ids.count - kept)
        let sorted = ids
        try merge(count: sorted.count, key: { sorted[$0].key }, database: DB.eventIds, keyLength: 32, in: session) { index, key, value in
            let stored = value.count == 8 ? u64(value) : nil
            guard let index else {
                guard key.count == 32 else {
                    differences.append("event-ids: unexpected entry with a \(key.count)-byte key")
                    repairs.deletions.append((DB.eventIds, key))
                    return
                }
                if stored.map(judged) ?? true {
                    differences.append(
                        "event-ids: unexpected entry \(key.hex) " + (stored.map { "pointing to record \($0)" } ?? "(not a sequence number)"))
                    repairs.deletions.append((DB.eventIds, key))
                }
                return
            }
            let sequence = sorted[index].sequence
            if stored != sequence {
                differences.append(
                    "event-ids: entry for record \(sequence) " + (stored.map { "points to \($0)" } ?? "is not a sequence number"))
                repairs.puts.append((DB.eventIds, key, u64Bytes(sequence)))
            }
        } missing: { indexes in
            for index in indexes.sorted(by: { sorted[$0].sequence < sorted[$1].sequence }) {
                differences.append("event-ids: missing entry for record \(sorted[index].sequence)")
                repairs.puts.append((DB.eventIds, sorted[index].key.bytes(count: 32), u64Bytes(sorted[index].sequence)))
            }
        }
    }

    /// Compares one "prefix ‖ u64 sequence → empty" index with the entries expected in it.
    private static func compare(
        _ expected: inout [PackedKey], name: String, database: String, prefixLength: Int, label: String, in session: ReadSession,
        judged: (UInt64) -> Bool, into differences: inout DifferenceList, repairs: inout Repairs
    ) throws {
        expected.sort()
        var kept = 0
        for index in expected.indices where kept == 0 || expected[kept - 1] != expected[index] {
            expected[kept] = expected[index]
            kept += 1
        }
        expected.removeLast(expected.count - kept)
        let sorted = expected
        let sequenceWord = prefixLength / 8
        try merge(count: sorted.count, key: { sorted[$0] }, database: database, keyLength: prefixLength + 8, in: session) {
            index, key, value in
            guard key.count == prefixLength + 8 else {
                differences.append("\(name): unexpected entry with a \(key.count)-byte key")
                repairs.deletions.append((database, key))
                return
            }
            let sequence = PackedKey(key).word(sequenceWord)
            if index != nil {
                if !value.isEmpty {
                    differences.append("\(name): entry for record \(sequence) has a \(value.count)-byte value")
                    repairs.puts.append((database, key, []))
                }
            } else if judged(sequence) {
                differences.append("\(name): unexpected entry for record \(sequence) (\(label) \(Array(key.prefix(prefixLength)).hex))")
                repairs.deletions.append((database, key))
            }
        } missing: { indexes in
            for index in indexes.sorted(by: { (sorted[$0].word(sequenceWord), sorted[$0]) < (sorted[$1].word(sequenceWord), sorted[$1]) }) {
                let key = sorted[index].bytes(count: prefixLength + 8)
                differences.append(
                    "\(name): missing entry for record \(sorted[index].word(sequenceWord)) (\(label) \(Array(key.prefix(prefixLength)).hex))")
                repairs.puts.append((database, key, []))
            }
        }
    }

    /// Walks `database` in key order beside `count` expected keys in the same order: `visit` gets
    /// each stored entry with the index of its expected key (nil when unexpected or malformed: not
    /// `keyLength` bytes), then `missing` the indexes of the expected keys not stored.
    private static func merge(
        count: Int, key expectedKey: (Int) -> PackedKey, database: String, keyLength: Int, in session: ReadSession,
        visit: (_ index: Int?, _ key: [UInt8], _ value: [UInt8]) -> Void, missing: ([Int]) -> Void
    ) throws {
        var next = 0
        var absent: [Int] = []
        try session.txn.scan(database, from: []) { key, value in
            guard key.count == keyLength else {
                visit(nil, key, value)
                return true
            }
            let packed = PackedKey(key)
            while next < count, expectedKey(next) < packed {
                absent.append(next)
                next += 1
            }
            if next < count, expectedKey(next) == packed {
                visit(next, key, value)
                next += 1
            } else {
                visit(nil, key, value)
            }
            return true
        }
        absent.append(contentsOf: next..<count)
        if !absent.isEmpty { missing(absent) }
    }

    /// Every `submissions` entry must name a record; a first attempt's must name the record whose
    /// event id is the submission key (`docs/storage-format.md`). Not repairable from the log.
    /// `eventIds` is sorted by event id.
    private static func checkSubmissions(
        in session: ReadSession, eventIds: [(key: PackedKey, sequence: UInt64)], verifiedThrough last: UInt64, chainBroken: Bool,
        into differences: inout DifferenceList
    ) throws {
        func sequence(of eventId: PackedKey) -> UInt64? {
            var low = 0
            var high = eventIds.count
            while low < high {
                let middle = (low + high) / 2
                if eventIds[middle].key < eventId { low = middle + 1 } else { high = middle }
            }
            return low < eventIds.count && eventIds[low].key == eventId ? eventIds[low].sequence : nil
        }
        try session.txn.scan(DB.submissions, from: []) { key, value in
            guard key.count == 32, value.count == 12, let attempt = u32(Array(value.prefix(4))), let first = u64(Array(value.suffix(8)))
            else {
                differences.append("submissions: malformed entry (\(key.count)-byte key \(key.hex), \(value.count)-byte value)")
                return true
            }
            if first >= 1, first <= last {
                if attempt == 0, sequence(of: PackedKey(key)) != first {
                    differences.append(
                        "submissions: entry \(key.hex) (first attempt) points to record \(first), whose event id is not the submission key")
                }
            } else if try !chainBroken || session.storedRecord(first) == nil {
                differences.append("submissions: entry \(key.hex) points to record \(first), which does not exist")
            }
            return true
        }
    }
}

/// At most ``IndexCheck/reportLimit`` lines, then one "… and N more".
struct DifferenceList {
    private var kept: [String] = []
    private var more = 0

    mutating func append(_ line: @autoclosure () -> String) {
        if kept.count < IndexCheck.reportLimit { kept.append(line()) } else { more += 1 }
    }

    var lines: [String] { more == 0 ? kept : kept + ["… and \(more) more"] }
}

/// A key of at most 40 bytes, a multiple of 8, as big-endian words: equal and ordered as the bytes
/// are, and a set member without a heap allocation of its own.
struct PackedKey: Hashable, Comparable {
    private var w0: UInt64 = 0
    private var w1: UInt64 = 0
    private var w2: UInt64 = 0
    private var w3: UInt64 = 0
    private var w4: UInt64 = 0

    init(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            for index in 0..<min(raw.count / 8, 5) {
                set(index, UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self)))
            }
        }
    }

    /// `prefix` ‖ u64 big-endian `sequence`.
    init(_ prefix: [UInt8], sequence: UInt64) {
        self.init(prefix)
        set(prefix.count / 8, sequence)
    }

    func word(_ index: Int) -> UInt64 {
        switch index {
        case 0: w0
        case 1: w1
        case 2: w2
        case 3: w3
        default: w4
        }
    }

    private mutating func set(_ index: Int, _ word: UInt64) {
        switch index {
        case 0: w0 = word
        case 1: w1 = word
        case 2: w2 = word
        case 3: w3 = word
        default: w4 = word
        }
    }

    /// The first `count` bytes (a multiple of 8).
    func bytes(count: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count)
        for index in 0..<min(count / 8, 5) {
            let word = word(index)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
        }
        return out
    }

    static func < (lhs: Self, rhs: Self) -> Bool { (lhs.w0, lhs.w1, lhs.w2, lhs.w3, lhs.w4) < (rhs.w0, rhs.w1, rhs.w2, rhs.w3, rhs.w4) }
}

extension InvariantChecker.SignatureChecks {
    /// Ed25519 and SHA-256 from libcrypto.
    public static let libcrypto = InvariantChecker.SignatureChecks(
        verify: { publicKey, message, signature in
            // A stored key of the wrong length signs nothing; only a failing libcrypto throws.
            guard let key = try? Ed25519PublicKey(rawRepresentation: publicKey) else { return false }
            return try key.isValidSignature(signature, for: message)
        },
        sha256: { try Digest.sha256($0) })
}
