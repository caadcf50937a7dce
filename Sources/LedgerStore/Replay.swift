public import LedgerCore
import LedgerCrypto
public import Projections

/// The first place the log's bytes, hashes or order are wrong: one record, or the block of records
/// whose Merkle node no longer matches them (a record's bytes changed in place: format 2 keeps no
/// hash per record, so the change is located to the smallest stored subtree that covers it).
public struct ChainFault: Equatable, Sendable, CustomStringConvertible {
    /// The first record of the faulty range.
    public var sequence: UInt64
    /// The last record of the range (the same as `sequence` for one record).
    public var through: UInt64
    public var reason: String

    public init(sequence: UInt64, through: UInt64, reason: String) {
        self.sequence = sequence
        self.through = through
        self.reason = reason
    }

    public var description: String {
        sequence == through ? "record \(sequence): \(reason)" : "records \(sequence) to \(through): \(reason)"
    }
}

/// What one pass over the whole log found.
public struct ReplayReport: Sendable {
    /// Records checked before the first fault (all of them when intact).
    public var verifiedRecords: UInt64
    /// Events in those records.
    public var events: UInt64
    public var chainFault: ChainFault?
    public var violations: [InvariantViolation]
    /// Read-model entries that differ between the persisted models and a fresh replay.
    public var readModelDifferences: [String]
    /// Entries of the derived indexes (`commands`, `lineages`, `account-lineages`, `merkle`) that
    /// differ from the ones the log implies. At most 100 lines, then one "… and N more".
    public var indexDifferences: [String]
    /// Lineages and live accounts with bound lineages in the replayed state.
    public var lineages: Int
    public var accounts: Int

    public var isIntact: Bool {
        chainFault == nil && violations.isEmpty && readModelDifferences.isEmpty && indexDifferences.isEmpty
    }
}

/// At most ``limit`` lines, then one "… and N more".
struct DifferenceList {
    static let limit = 100
    private var kept: [String] = []
    private var more = 0

    mutating func append(_ line: @autoclosure () -> String) {
        if kept.count < Self.limit { kept.append(line()) } else { more += 1 }
    }

    var lines: [String] { more == 0 ? kept : kept + ["… and \(more) more"] }
    var isEmpty: Bool { kept.isEmpty }
}

/// An order-independent keyed hash of a multiset of index entries: two sums of SipHash values
/// under this process's random seed, and a count. The entries a log implies and the entries an
/// index holds are summed in whatever order each is walked; equal sums mean equal multisets but
/// for a chance of about 2^-128 (the seed is secret, so entries cannot be crafted to collide).
struct MultisetHash: Equatable {
    private(set) var count: UInt64 = 0
    private var first: UInt64 = 0
    private var second: UInt64 = 0

    mutating func add(_ entry: IndexEntry) {
        var a = Hasher()
        a.combine(UInt8(0xA5))
        a.combine(entry)
        var b = Hasher()
        b.combine(UInt8(0x5A))
        b.combine(entry)
        first &+= UInt64(bitPattern: Int64(a.finalize()))
        second &+= UInt64(bitPattern: Int64(b.finalize()))
        count += 1
    }
}

extension LedgerStore {
    /// Streams the whole log once: every record's structure, order and time; the leaf and chain
    /// hashes against the head, and the Merkle nodes against the stored ones (naming the block of
    /// records whose bytes changed); the invariants; the fold, compared with the persisted read
    /// models in key order; and the entries each record implies, compared with the stored indexes
    /// through order-independent keyed hashes (an exact diagnosis runs only on a mismatch). With
    /// `repair`, then makes the read models and the derived indexes equal to the log's.
    /// `progress` is called with (records done, total) every 10,000 records.
    public func replay(repair: Bool = false, progress: ((UInt64, UInt64) -> Void)? = nil) throws -> ReplayReport {
        for _ in 0..<3 {
            let analysis = try read { reader in try Analysis.run(reader, progress: progress) }
            guard repair, analysis.needsRepair else { return analysis.report }
            if try analysis.repair(self) { return analysis.report }
            // The log grew while repairing: analyse again from the new head.
        }
        throw LedgerStoreError.corrupt("the log kept growing during rebuild: run it again when writes are quieter")
    }

    /// Recomputes the persisted read models and the indexes from the log alone.
    public func rebuildReadModels(repair: Bool, progress: ((UInt64, UInt64) -> Void)? = nil) throws -> ReplayReport {
        try replay(repair: repair, progress: progress)
    }
}

/// One pass's findings and the repairs they call for.
struct Analysis {
    var report: ReplayReport
    var head: LogHead
    /// Indexes whose stored entries differ from the implied ones.
    var damagedIndexes: [EngineIndex] = []
    /// Read-model keys to rewrite or remove.
    var readModelPuts: [([UInt8], [UInt8])] = []
    var readModelRemovals: [[UInt8]] = []
    var staleModelVersion = false
    /// Case id → lineage, for the entries of case steps.
    var caseLineages: [String: LineageKey] = [:]

    var needsRepair: Bool { !damagedIndexes.isEmpty || !readModelPuts.isEmpty || !readModelRemovals.isEmpty || staleModelVersion }

    static func run(_ reader: any EngineReader, progress: ((UInt64, UInt64) -> Void)?) throws -> Analysis {
        let head = try reader.head()
        var walk = try ChainWalk(head: head)
        var checker = InvariantChecker(signatures: .libcrypto)
        var implied = [EngineIndex: MultisetHash]()
        var events: UInt64 = 0
        var lastRecordedAt: Timestamp = 0
        try reader.forEachRecord(from: 1, through: head.sequence) { sequence, bytes in
            guard try walk.add(sequence, bytes, reader: reader, node: { implied[.merkle, default: MultisetHash()].add($0) }) else { return false }
            let record: Record
            do throws(RecordDecodingError) {
                record = try RecordCodec.decode(bytes, sequence: sequence)
            } catch {
                walk.stop(ChainFault(sequence: sequence, through: sequence, reason: error.reason))
                return false
            }
            guard record.recordedAt >= lastRecordedAt else {
                walk.stop(ChainFault(sequence: sequence, through: sequence, reason: "recorded before the record preceding it"))
                return false
            }
            lastRecordedAt = record.recordedAt
            try checker.check(record)
            let transfers = checker.state.transfers
            for entry in impliedEntries(of: record, caseLineage: { transfers[$0]?.request.plan.lineage }) {
                implied[entry.index, default: MultisetHash()].add(reader.normalized(entry))
            }
            events += UInt64(record.events.count)
            if sequence % 10_000 == 0 { progress?(sequence, head.sequence) }
            return true
        }
        let fault = walk.finish()
        progress?(walk.count, head.sequence)
        let state = checker.state
        var analysis = Analysis(
            report: ReplayReport(
                verifiedRecords: fault.map { $0.sequence - 1 } ?? head.sequence, events: events, chainFault: fault,
                violations: checker.violations, readModelDifferences: [], indexDifferences: [], lineages: state.lineages.count,
                accounts: state.accountLineages.count),
            head: head)
        analysis.caseLineages = state.transfers.mapValues { $0.request.plan.lineage }
        analysis.staleModelVersion = try reader.meta(.readModelVersion).flatMap(u32) != StateProjection.version
        try analysis.compareReadModels(state, reader)
        try analysis.compareIndexes(implied, reader)
        return analysis
    }

    // MARK: Read models

    mutating func compareReadModels(_ state: LedgerState, _ reader: any EngineReader) throws {
        let fresh = ReadModel.entries(of: state)
        let keys = fresh.keys.sorted { $0.lexicographicallyPrecedes($1) }
        var differences = DifferenceList()
        var next = 0
        func missing(through key: [UInt8]?) {
            while next < keys.count, key.map({ keys[next].lexicographicallyPrecedes($0) }) ?? true {
                differences.append("\(ReadModel.describe(keys[next])): missing from the persisted read models")
                readModelPuts.append((keys[next], fresh[keys[next]] ?? []))
                next += 1
            }
        }
        try reader.forEachReadModel(from: []) { key, value in
            missing(through: key)
            if next < keys.count, keys[next] == key {
                if fresh[key] != value {
                    differences.append("\(ReadModel.describe(key)): persisted and replayed values differ")
                    readModelPuts.append((key, fresh[key] ?? []))
                }
                next += 1
            } else {
                differences.append("\(ReadModel.describe(key)): persisted but not produced by a replay")
                readModelRemovals.append(key)
            }
            return true
        }
        missing(through: nil)
        report.readModelDifferences = differences.lines
    }

    // MARK: Indexes

    mutating func compareIndexes(_ implied: [EngineIndex: MultisetHash], _ reader: any EngineReader) throws {
        var differences = DifferenceList()
        for index in EngineIndex.allCases {
            var stored = MultisetHash()
            try reader.forEachEntry(of: index) { entry in
                stored.add(entry)
                return true
            }
            guard stored != implied[index, default: MultisetHash()] else { continue }
            damagedIndexes.append(index)
            try diagnose(index, reader, into: &differences)
        }
        report.indexDifferences = differences.lines
    }

    /// Lists the exact differences of a damaged index in bounded memory: every stored entry is
    /// checked against the record it names, then every entry the log implies is looked up.
    func diagnose(_ index: EngineIndex, _ reader: any EngineReader, into differences: inout DifferenceList) throws {
        let judged = report.chainFault.map { $0.sequence - 1 } ?? head.sequence
        try forEachUnexpected(index, reader, judged: judged) { entry in differences.append("\(index.rawValue): unexpected \(describe(entry))") }
        try forEachMissing(index, reader, through: judged) { entry in differences.append("\(index.rawValue): missing \(describe(entry))") }
    }

    func describe(_ entry: IndexEntry) -> String {
        switch entry {
        case .command(let key, let sequence): "entry for record \(sequence) (command \(String(key.hex.prefix(16))))"
        case .lineage(let lineage, let sequence, _): "entry for record \(sequence) (lineage \(lineage))"
        case .accountLineage(let account, let lineage, let sequence): "entry for record \(sequence) (account \(account), lineage \(lineage))"
        case .merkleNode(let level, let index, _):
            "node of records \(index << UInt64(level) + 1) to \((index + 1) << UInt64(level))"
        case .malformed(_, let key, let value): "malformed entry (\(key.count)-byte key \(key.hex), \(value.count)-byte value)"
        }
    }

    /// The entries the records `from`…`through` imply for `index`, normalised as the engine stores them.
    func implied(_ index: EngineIndex, _ reader: any EngineReader, from: UInt64, through: UInt64, _ body: (IndexEntry) throws -> Void) throws {
        let hasher = try LogHasher()
        var frontier: [Digest32] = []
        if index == .merkle {
            // Nodes need every leaf from the first record.
            try reader.forEachRecord(from: 1, through: through) { sequence, bytes in
                var nodes: [IndexEntry] = []
                try MerkleLog.append(try hasher.leafHash(bytes), count: sequence - 1, frontier: &frontier, hasher: hasher) {
                    nodes.append(.merkleNode(level: $0, index: $1, hash: $2))
                }
                for node in nodes { try body(node) }
                return true
            }
            return
        }
        try reader.forEachRecord(from: from, through: through) { sequence, bytes in
            let record = try RecordCodec.decode(bytes, sequence: sequence)
            for entry in impliedEntries(of: record, caseLineage: { caseLineages[$0] }) where entry.index == index {
                try body(reader.normalized(entry))
            }
            return true
        }
    }

    func forEachUnexpected(_ index: EngineIndex, _ reader: any EngineReader, judged: UInt64, _ body: (IndexEntry) throws -> Void) throws {
        try reader.forEachEntry(of: index) { entry in
            switch entry {
            case .malformed:
                try body(entry)
            case .merkleNode(let level, let nodeIndex, let hash):
                let size = UInt64(1) << UInt64(level)
                let last = (nodeIndex + 1) * size
                if level < MerkleLog.storedLevel || last > head.sequence {
                    try body(entry)
                } else if last <= judged, try recomputedNode(from: nodeIndex * size, through: last, reader) != hash {
                    try body(entry)
                }
            default:
                guard let sequence = entry.sequence, sequence <= judged else {
                    if let sequence = entry.sequence, sequence > head.sequence { try body(entry) }
                    return true
                }
                var matches = false
                try implied(index, reader, from: sequence, through: sequence) { if $0 == entry { matches = true } }
                if !matches { try body(entry) }
            }
            return true
        }
    }

    /// The root of the perfect subtree of records `lo + 1`…`last`, from their bytes.
    func recomputedNode(from lo: UInt64, through last: UInt64, _ reader: any EngineReader) throws -> Digest32 {
        let hasher = try LogHasher()
        var frontier: [Digest32] = []
        var count: UInt64 = 0
        try reader.forEachRecord(from: lo + 1, through: last) { _, bytes in
            try MerkleLog.append(try hasher.leafHash(bytes), count: count, frontier: &frontier, hasher: hasher) { _, _, _ in }
            count += 1
            return true
        }
        return try MerkleLog.root(frontier: frontier, hasher: hasher)
    }

    func forEachMissing(_ index: EngineIndex, _ reader: any EngineReader, through: UInt64, _ body: (IndexEntry) throws -> Void) throws {
        try implied(index, reader, from: 1, through: through) { entry in
            if try !reader.contains(entry) { try body(entry) }
        }
    }

    // MARK: Repair

    /// Applies the repairs in write groups of bounded size, each checking the log has not grown
    /// since the analysis. False when it had (nothing further is changed: analyse again).
    func repair(_ store: LedgerStore) throws -> Bool {
        let chunk = 10_000
        var pending: [(any EngineWriter) throws -> Void] = []
        var size = 0
        var grew = false
        func flush() throws {
            guard !pending.isEmpty, !grew else { return }
            let operations = pending
            grew = try store.write { reader, writer in
                guard try reader.head() == head else { return true }
                for operation in operations { try operation(writer) }
                return false
            }
            pending = []
            size = 0
        }
        func add(_ count: Int, _ operation: @escaping (any EngineWriter) throws -> Void) throws {
            pending.append(operation)
            size += count
            if size >= chunk { try flush() }
        }
        for start in stride(from: 0, to: readModelRemovals.count, by: chunk) {
            let keys = Array(readModelRemovals[start..<min(start + chunk, readModelRemovals.count)])
            try add(keys.count) { try $0.removeReadModels(keys) }
        }
        for start in stride(from: 0, to: readModelPuts.count, by: chunk) {
            let entries = Array(readModelPuts[start..<min(start + chunk, readModelPuts.count)])
            try add(entries.count) { try $0.putReadModels(entries) }
        }
        let judged = report.chainFault.map { $0.sequence - 1 } ?? head.sequence
        for index in damagedIndexes {
            var removals: [IndexEntry] = []
            try store.read { reader in try forEachUnexpected(index, reader, judged: judged) { removals.append($0) } }
            for start in stride(from: 0, to: removals.count, by: chunk) {
                let entries = Array(removals[start..<min(start + chunk, removals.count)])
                try add(entries.count) { try $0.remove(entries) }
            }
            var batch = EngineBatch()
            try store.read { reader in
                try forEachMissing(index, reader, through: judged) { entry in
                    batch.entries.append(entry)
                    if batch.entries.count >= chunk {
                        let full = batch
                        try add(full.entries.count) { try $0.apply(full) }
                        batch = EngineBatch()
                    }
                }
            }
            if !batch.entries.isEmpty {
                let last = batch
                try add(last.entries.count) { try $0.apply(last) }
            }
        }
        if staleModelVersion {
            var batch = EngineBatch()
            batch.meta = [(.readModelVersion, u32Bytes(StateProjection.version))]
            try add(1) { try $0.apply(batch) }
        }
        try flush()
        return !grew
    }
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
