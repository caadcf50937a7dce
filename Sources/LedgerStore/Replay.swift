import Foundation
import LedgerCore
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
    /// Support steps of history an upgrade copied from storage format 1 that format 2 would require
    /// more signatures of (``InvariantChecker/formatOneNotes``): not violations.
    public var formatOneNotes: [InvariantViolation] = []
    /// Read-model entries that differ between the persisted models and a fresh replay.
    public var readModelDifferences: [String]
    /// Entries of the derived indexes (`commands`, `lineages`, `account-lineages`, `merkle`) that
    /// differ from the ones the log implies. At most 100 lines, then one "… and N more".
    public var indexDifferences: [String]
    /// Lineages in the replayed state.
    public var lineages: Int
    /// What is inconsistent in the identity vault (``LedgerStore/vaultDifferences(_:)``), each line
    /// naming a pseudonym, never a UID. At most 100 lines, then one "… and N more". Checked by `verify`
    /// (a replay without repair), not by a repair.
    public var vaultDifferences: [String] = []
    /// Vault entries whose UID is sealed in the legacy layout (``SealedUID/legacy``: not bound to its
    /// pseudonym, protected only by the consistency check); nil when the vault was not checked.
    public var legacySealedUIDs: Int?

    public var isIntact: Bool {
        chainFault == nil && violations.isEmpty && readModelDifferences.isEmpty && indexDifferences.isEmpty && vaultDifferences.isEmpty
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

    /// Appends another list's lines, and counts what it left out.
    mutating func append(contentsOf other: DifferenceList) {
        for line in other.kept { append(line) }
        more += other.more
    }
    var isEmpty: Bool { kept.isEmpty }
}

/// An order-independent keyed hash of a multiset of index entries (or of read-model entries): the sums of the two halves of
/// each entry's 128-bit SipHash-1-3 under this process's random key, and a count. The entries a log
/// implies and the entries an index holds are summed in whatever order each is walked; equal sums
/// mean equal multisets but for a chance of about 2^-128 (the key is secret, so entries cannot be
/// crafted to collide). Each entry is hashed as a few fixed words (a tag, then its fields), in one
/// pass of the 128-bit variant instead of two of the standard library's 64-bit `Hasher`.
struct MultisetHash: Equatable {
    private(set) var count: UInt64 = 0
    private var first: UInt64 = 0
    private var second: UInt64 = 0

    /// This process's key, drawn once.
    private static let key = (UInt64.random(in: .min ... .max), UInt64.random(in: .min ... .max))

    mutating func add(_ entry: IndexEntry) {
        var h = SipHash13x128(key: Self.key)
        switch entry {
        case .command(let key, let sequence):
            h.add(1, key.high, key.low, sequence)
        case .lineage(let lineage, let sequence, let command):
            h.add(2, lineage.key.high, lineage.key.low, sequence)
            h.add(command.high, command.low)
        case .accountLineage(let account, let lineage, let sequence):
            h.add(3, account.key.high, account.key.low, lineage.key.high)
            h.add(lineage.key.low, sequence)
        case .merkleNode(let level, let index, let hash):
            h.add(4 | UInt64(level) << 8, index, hash.prefix128.high, hash.prefix128.low)
            h.add(hash.suffix128.high, hash.suffix128.low)
        case .malformed(let index, let key, let value):
            h.add(5 | UInt64(index.position) << 8, UInt64(key.count), UInt64(value.count), 0)
            key.withUnsafeBytes { h.add(bytes: $0) }
            value.withUnsafeBytes { h.add(bytes: $0) }
        }
        sum(&h)
    }

    /// Adds a read-model entry.
    mutating func add(key: [UInt8], value: [UInt8]) {
        key.withUnsafeBytes { k in value.withUnsafeBytes { v in add(key: k, value: v) } }
    }

    /// Adds a read-model entry lent as bytes.
    mutating func add(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        var h = SipHash13x128(key: Self.key)
        h.add(6, UInt64(key.count), UInt64(value.count), 0)
        h.add(bytes: key)
        h.add(bytes: value)
        sum(&h)
    }

    /// Adds the entries `other` summed (the multiset union).
    mutating func add(_ other: MultisetHash) {
        first &+= other.first
        second &+= other.second
        count += other.count
    }

    private mutating func sum(_ h: inout SipHash13x128) {
        let (a, b) = h.finish()
        first &+= a
        second &+= b
        count += 1
    }
}

/// SipHash-1-3 with a 128-bit result (the reference's 128-bit variant) over whole 64-bit words: the
/// caller makes its message injective (a tag and lengths first), so no length byte is padded in.
struct SipHash13x128 {
    private var v0: UInt64, v1: UInt64, v2: UInt64, v3: UInt64
    private var words: UInt64 = 0

    init(key: (UInt64, UInt64)) {
        v0 = key.0 ^ 0x736f_6d65_7073_6575
        v1 = key.1 ^ 0x646f_7261_6e64_6f6d ^ 0xee
        v2 = key.0 ^ 0x6c79_6765_6e65_7261
        v3 = key.1 ^ 0x7465_6462_7974_6573
    }

    @inline(__always)
    private mutating func round() {
        v0 &+= v1
        v1 = v1.rotated(13) ^ v0
        v0 = v0.rotated(32)
        v2 &+= v3
        v3 = v3.rotated(16) ^ v2
        v0 &+= v3
        v3 = v3.rotated(21) ^ v0
        v2 &+= v1
        v1 = v1.rotated(17) ^ v2
        v2 = v2.rotated(32)
    }

    @inline(__always)
    mutating func add(_ word: UInt64) {
        v3 ^= word
        round()
        v0 ^= word
        words &+= 1
    }

    @inline(__always)
    mutating func add(_ a: UInt64, _ b: UInt64) {
        add(a)
        add(b)
    }

    @inline(__always)
    mutating func add(_ a: UInt64, _ b: UInt64, _ c: UInt64, _ d: UInt64) {
        add(a, b)
        add(c, d)
    }

    /// The bytes, eight to a word (the last one zero-padded); their count must be in the message already.
    mutating func add(bytes raw: UnsafeRawBufferPointer) {
        var offset = 0
        while offset + 8 <= raw.count {
            add(UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            offset += 8
        }
        guard offset < raw.count else { return }
        var word: UInt64 = 0
        for index in offset..<raw.count { word |= UInt64(raw[index]) << (UInt64(index - offset) * 8) }
        add(word)
    }

    mutating func finish() -> (UInt64, UInt64) {
        add(words << 56)
        v2 ^= 0xee
        round()
        round()
        round()
        let a = v0 ^ v1 ^ v2 ^ v3
        v1 ^= 0xdd
        round()
        round()
        round()
        return (a, v0 ^ v1 ^ v2 ^ v3)
    }
}

extension UInt64 {
    @inline(__always)
    fileprivate func rotated(_ bits: UInt64) -> UInt64 { self << bits | self >> (64 - bits) }
}

extension LedgerStore {
    /// Streams the whole log once: every record's structure, order and time; the leaf and chain
    /// hashes against the head, and the Merkle nodes against the stored ones (naming the block of
    /// records whose bytes changed); the invariants; the fold, compared with the persisted read
    /// models, and the entries each record implies, compared with the stored indexes, both through
    /// order-independent keyed hashes (an exact diagnosis in key order runs only on a mismatch). With
    /// `repair`, then makes the read models and the derived indexes equal to the log's.
    /// `progress` is called with (records done, total) every 10,000 records. Without `repair`, also
    /// checks the identity vault on the same snapshot (``vaultDifferences(_:)``), which no repair
    /// changes, calling `vaultProgress` with (accounts checked, total) as ``vaultCheck(_:progress:)`` does.
    ///
    /// Memory stays bounded whatever the store's size: when the store holds more lineages than
    /// ``Analysis/lineagesPerPass``, the lineage key space is split into ranges and the log is
    /// folded once per range, each pass keeping the state of its range only (the first pass also does
    /// the hashes and indexes). A check runs every pass on one snapshot; a repair repairs each range
    /// after its pass, and analyses again when the log grew meanwhile.
    public func replay(
        repair: Bool = false, progress: ((UInt64, UInt64) -> Void)? = nil, vaultProgress: ((UInt64, UInt64) -> Void)? = nil
    ) throws -> ReplayReport {
        try replay(repair: repair, progress: progress, lineagesPerPass: Analysis.lineagesPerPass, vaultProgress: vaultProgress)
    }

    /// ``replay(repair:progress:)`` with at most `lineagesPerPass` lineages per pass (tests make it small),
    /// the reading thread hashing the implied index entries as `readerHashing` says, the stored side
    /// walked as `walking` says, and (without
    /// `repair`) the identity vault checked unless `checkingVault` is false.
    func replay(
        repair: Bool, progress: ((UInt64, UInt64) -> Void)?, lineagesPerPass: Int, readerHashing: Analysis.ReaderHashing = .whenBehind,
        walking: Analysis.StoredWalking = .whicheverIsFree, checkingVault: Bool = true, vaultProgress: ((UInt64, UInt64) -> Void)? = nil
    ) throws -> ReplayReport {
        for _ in 0..<3 {
            var passes = Analysis.Passes()
            if !repair {
                return try read { reader in
                    let (count, models) = try Analysis.passes(reader, lineagesPerPass: lineagesPerPass)
                    var first: Analysis.First?
                    for pass in 0..<count {
                        let analysis = try Analysis.run(
                            reader, pass: pass, of: count, models: models, after: first, readerHashing: readerHashing, walking: walking,
                            progress: progress)
                        if pass == 0 { first = analysis.first }
                        passes.add(analysis)
                    }
                    var report = passes.report
                    if checkingVault {
                        (report.vaultDifferences, report.legacySealedUIDs) = try vaultCheck(reader, progress: vaultProgress)
                    }
                    return report
                }
            }
            let (count, models) = try read { try Analysis.passes($0, lineagesPerPass: lineagesPerPass) }
            var first: Analysis.First?
            var grew = false
            for pass in 0..<count {
                guard
                    let analysis = try read({ reader -> Analysis? in
                        if let first, try reader.head() != first.head { return nil }
                        return try Analysis.run(
                            reader, pass: pass, of: count, models: models, after: first, readerHashing: readerHashing, walking: walking,
                            progress: progress)
                    })
                else {
                    grew = true
                    break
                }
                if pass == 0 { first = analysis.first }
                passes.add(analysis)
                if analysis.needsRepair, try !analysis.repair(self) {
                    grew = true
                    break
                }
            }
            if !grew { return passes.report }
            // The log grew while repairing: analyse again from the new head.
        }
        throw LedgerStoreError.corrupt("the log kept growing during rebuild: run it again when writes are quieter")
    }

    /// Recomputes the persisted read models and the indexes from the log alone (the identity vault,
    /// which the log cannot reproduce, is neither changed nor checked: `verify` checks it).
    public func rebuildReadModels(repair: Bool, progress: ((UInt64, UInt64) -> Void)? = nil) throws -> ReplayReport {
        try replay(repair: repair, progress: progress, lineagesPerPass: Analysis.lineagesPerPass, checkingVault: false)
    }
}

/// One pass's findings and the repairs they call for.
struct Analysis {
    /// The most lineages one pass keeps (packed, 56 bytes each in a table of 2^19 slots: about 30
    /// MiB, and the peak heap stays under 64 MiB); more make more passes.
    static let lineagesPerPass = 250_000

    /// How many passes the store's lineages need (estimated from its read models), and the read models
    /// counted (``readModelCount(_:)``).
    static func passes(_ reader: any EngineReader, lineagesPerPass: Int) throws -> (count: Int, models: Int) {
        let models = try readModelCount(reader)
        return (models == 0 ? 1 : (models - 1) / max(lineagesPerPass, 1) + 1, models)
    }

    /// The number of read models, as LMDB counts them. Every read model was written for a record,
    /// so a count above the log's is damage, not read models: it is capped there rather than
    /// believed (a damaged page's count once asked for 10^13 passes).
    static func readModelCount(_ reader: any EngineReader) throws -> Int {
        let counted = try reader.readModelCount()
        return min(counted, Int(clamping: try reader.head().sequence))
    }

    /// Pass `pass` of `count`: the first 8 bytes of the lineage keys it keeps.
    static func range(_ pass: Int, of count: Int) -> ClosedRange<UInt64> {
        let width = UInt64.max / UInt64(count)
        let low = width * UInt64(pass)
        return low...(pass == count - 1 ? UInt64.max : low + width - 1)
    }

    /// The read-model keys pass `pass` of `count` compares: [start, end) (end nil: to the last). The
    /// first pass also has the deleted accounts (`D`, before `L`), the last the roster and cases.
    static func readModelKeys(_ pass: Int, of count: Int) -> (start: [UInt8], end: [UInt8]?) {
        func lineageKey(_ high: UInt64) -> [UInt8] { [ReadModel.lineagePrefix] + KeyBuffer(high).with { Array($0) } }
        let range = range(pass, of: count)
        return (pass == 0 ? [] : lineageKey(range.lowerBound), pass == count - 1 ? nil : lineageKey(range.upperBound + 1))
    }

    /// The read-model keys a pass compares (``readModelKeys(_:of:)``).
    struct ModelKeys: Sendable {
        let start: [UInt8]
        let end: [UInt8]?
        init(_ keys: (start: [UInt8], end: [UInt8]?)) { (start, end) = keys }
        func contains(_ key: some Collection<UInt8>) -> Bool {
            !key.lexicographicallyPrecedes(start) && (end.map { key.lexicographicallyPrecedes($0) } ?? true)
        }
    }

    /// The passes' reports added up.
    struct Passes {
        var first: ReplayReport?
        var readModels = DifferenceList()
        var violations: [InvariantViolation] = []
        var seen = Set<String>()
        var deletions: [String: (sequence: UInt64, account: AccountID, bound: Int)] = [:]
        var lineages = 0

        mutating func add(_ analysis: Analysis) {
            if first == nil { first = analysis.report }
            readModels.append(contentsOf: analysis.readModelDiffs)
            for violation in analysis.report.violations
            where seen.insert("\(violation.invariant) \(violation.sequence) \(violation.message)").inserted {
                violations.append(violation)
            }
            for deletion in analysis.deletionsWhileBound {
                deletions["\(deletion.sequence) \(deletion.account)", default: (deletion.sequence, deletion.account, 0)].bound += deletion.bound
            }
            lineages += analysis.report.lineages
        }

        var report: ReplayReport {
            var report =
                first
                ?? ReplayReport(
                    verifiedRecords: 0, events: 0, chainFault: nil, violations: [], readModelDifferences: [], indexDifferences: [], lineages: 0)
            var all = violations
            for deletion in deletions.values {
                all.append(
                    InvariantViolation(
                        invariant: 1, sequence: deletion.sequence, message: InvariantChecker.deletedWhileBound(deletion.account, deletion.bound)))
            }
            report.violations = all.enumerated().sorted { ($0.element.sequence, $0.offset) < ($1.element.sequence, $1.offset) }.map(\.element)
            report.readModelDifferences = readModels.lines
            report.lineages = lineages
            return report
        }
    }

    /// What later passes need of the first (not its state: one pass's state at a time).
    struct First {
        var report: ReplayReport
        var head: LogHead
    }

    var first: First { First(report: report, head: head) }

    var report: ReplayReport
    var head: LogHead
    /// This pass: which of how many, and the read-model keys it compares.
    var pass = 0
    var passCount = 1
    var readModelDiffs = DifferenceList()
    var deletionsWhileBound: [(sequence: UInt64, account: AccountID, bound: Int)] = []
    /// Indexes whose stored entries differ from the implied ones.
    var damagedIndexes: [EngineIndex] = []
    /// The replayed state and its lineages, whose read models the persisted ones are compared with.
    var replayed: (state: LedgerState, lineages: PackedLineages)
    /// The replayed state's read models in key order (for the exact comparison and the repair).
    var expected: ReadModel.OrderedEntries { ReadModel.OrderedEntries(replayed.state, lineages: replayed.lineages) }
    var readModelsDiffer = false
    var staleModelVersion = false
    /// Case id → lineage, for the entries of case steps.
    var caseLineages: [String: LineageKey] = [:]

    var needsRepair: Bool { !damagedIndexes.isEmpty || readModelsDiffer || staleModelVersion }

    /// Decoded records handed from the thread that reads, hashes and decodes the log to the one that
    /// checks and folds. A record is either views (``EventView``: plain values, the usual record) or,
    /// when one of its events has no view (a roster or transfer step, the upgrade record), its
    /// ``LedgerEvent``s: the views of all records in one array, the events in another, and each
    /// record's command, where its views and its events end (a record of views ends no events), and
    /// whether the reading thread already hashed the index entries it implies
    /// (``hashImpliedEntries(_:normalize:into:)``). `products` are the names of the product ids the
    /// reading thread numbered (``ViewProductNumbers``) since the batch before.
    /// The first pass also hands over the leaf hash of every record from `first` on, for the
    /// folding thread to link into the chain (after a record that does not decode, leaves only).
    struct Batch {
        var first: UInt64
        var views: [EventView] = []
        var events: [LedgerEvent] = []
        var records: [(command: Key128, views: Int, events: Int, impliedHashed: Bool)] = []
        var products: [String] = []
        var leaves: [Digest32] = []
        /// The stored Merkle nodes the leaves complete (``MerkleWalk/completedNodes(_:)``), by ``nodeKey(_:_:)``.
        var storedNodes: [UInt64: Digest32] = [:]
        static let capacity = 1_024

        static func nodeKey(_ level: UInt8, _ index: UInt64) -> UInt64 { UInt64(level) << 56 | index }

        /// Reads the stored nodes the batch's leaves complete, for the folding thread to compare.
        mutating func readStoredNodes(_ reader: any EngineReader) throws {
            guard !leaves.isEmpty else { return }
            for (level, index) in MerkleWalk.completedNodes(first...(first + UInt64(leaves.count) - 1)) {
                storedNodes[Self.nodeKey(level, index)] = try reader.merkleNode(level: level, index: index)
            }
        }

        init(first: UInt64) {
            self.first = first
            views.reserveCapacity(Self.capacity * 4)
            records.reserveCapacity(Self.capacity)
        }

        var isFull: Bool { records.count == Self.capacity || leaves.count == Self.capacity }
        var isEmpty: Bool { records.isEmpty && leaves.isEmpty }

        /// Hashes the index entries the batch's records imply into `implied` (by
        /// ``EngineIndex/position``) and marks them hashed: all but a record with a transfer approval
        /// or refusal, whose entries name the lineage of its case, which only the folding thread knows.
        /// The entries' multiset hashes are sums, so which thread adds an entry does not matter.
        mutating func hashImpliedEntries(normalize: (IndexEntry) -> IndexEntry, into implied: inout [MultisetHash]) {
            var (viewStart, start) = (0, 0)
            for index in records.indices {
                defer { (viewStart, start) = (records[index].views, records[index].events) }
                guard records[index].events > start else {
                    forEachImpliedEntry(
                        sequence: first + UInt64(index), command: records[index].command, views: views[viewStart..<records[index].views]
                    ) {
                        entry in implied[entry.index.position].add(normalize(entry))
                    }
                    records[index].impliedHashed = true
                    continue
                }
                let events = self.events[start..<records[index].events]
                let namesCase = events.contains {
                    switch $0 {
                    case .transferApproved, .transferRefused: true
                    default: false
                    }
                }
                guard !namesCase else { continue }
                forEachImpliedEntry(sequence: first + UInt64(index), command: records[index].command, events: events, caseLineage: { _ in nil }) {
                    entry in implied[entry.index.position].add(normalize(entry))
                }
                records[index].impliedHashed = true
            }
        }
    }

    /// A bounded queue of batches between the two threads.
    final class Handoff: @unchecked Sendable {
        private let condition = NSCondition()
        private var batches: [Batch] = []
        private var closed = false
        /// Set by the consumer when it stops early (a record that does not decode, an error).
        private(set) var stopped = false
        static let capacity = 4

        func put(_ batch: Batch) {
            condition.lock()
            while batches.count >= Self.capacity && !stopped { condition.wait() }
            if !stopped { batches.append(batch) }
            condition.broadcast()
            condition.unlock()
        }

        func close() {
            condition.lock()
            closed = true
            condition.broadcast()
            condition.unlock()
        }

        func take() -> Batch? {
            condition.lock()
            defer { condition.unlock() }
            while batches.isEmpty && !closed { condition.wait() }
            guard !batches.isEmpty else { return nil }
            condition.broadcast()
            return batches.removeFirst()
        }

        func stop() {
            condition.lock()
            stopped = true
            batches = []
            condition.broadcast()
            condition.unlock()
        }

        /// Whether the consumer is behind: the queue is full, or one short of it.
        var isBacklogged: Bool {
            condition.lock()
            defer { condition.unlock() }
            return batches.count >= Self.capacity - 1
        }

        var isStopped: Bool {
            condition.lock()
            defer { condition.unlock() }
            return stopped
        }
    }

    /// When the reading thread hashes the index entries a batch implies (else the folding thread does):
    /// when the folding thread is behind (the queue full or one short of it), or always (tests).
    enum ReaderHashing {
        case whenBehind, always
    }

    /// The other side of a pass's comparisons: the stored indexes (first pass) and this pass's persisted
    /// read models, each walked and hashed whole by whichever thread takes it first: the reading thread
    /// once the log is read, the folding thread once its fold is done (on a transaction of its own, of
    /// the same snapshot). Multiset hashes are sums, so who walks what does not change them.
    final class StoredWalks: @unchecked Sendable {
        enum Walk {
            case index(EngineIndex)
            case readModels
        }
        private let lock = NSLock()
        /// The walks not yet taken, largest first, so the thread that finishes last has the least left.
        private var pending: [Walk]
        private let modelKeys: ModelKeys
        /// The log's records: a read-model tree that yields more entries is damaged (``readModelCount(_:)``).
        private let records: UInt64
        private(set) var stored: [EngineIndex: MultisetHash] = [:]
        private(set) var persistedModels = MultisetHash()
        private(set) var error: (any Error)?

        init(indexes: Bool, modelKeys: ModelKeys, records: UInt64) {
            /// About how many entries each index holds per record, on a typical log.
            func weight(_ index: EngineIndex) -> Int {
                switch index {
                case .lineages: 4
                case .accountLineages: 2
                case .commands: 1
                case .merkle: 0
                }
            }
            let indexes = indexes ? EngineIndex.allCases.sorted { weight($0) > weight($1) }.map(Walk.index) : []
            pending = Array(indexes.prefix(1)) + [.readModels] + indexes.dropFirst()
            self.modelKeys = modelKeys
            self.records = records
        }

        /// Whether a walk is left to take.
        var remain: Bool { lock.withLock { error == nil && !pending.isEmpty } }

        private func next() -> Walk? { lock.withLock { error == nil && !pending.isEmpty ? pending.removeFirst() : nil } }

        /// Takes walks and hashes them through `reader` until none is left or one failed (``error``).
        func run(_ reader: any EngineReader) {
            while let walk = next() {
                do {
                    var hash = MultisetHash()
                    switch walk {
                    case .index(let index):
                        try reader.forEachEntry(of: index) { entry in
                            hash.add(entry)
                            return true
                        }
                        lock.withLock { stored[index] = hash }
                    case .readModels:
                        var visited: UInt64 = 0
                        try reader.forEachReadModelBytes(from: modelKeys.start) { key, value in
                            guard modelKeys.contains(key) else { return false }
                            visited += 1
                            guard visited <= records else {
                                throw LedgerStoreError.corrupt(
                                    "read-models yields more entries than the log has records (\(records)): data.mdb is damaged")
                            }
                            hash.add(key: key, value: value)
                            return true
                        }
                        lock.withLock { persistedModels = hash }
                    }
                } catch {
                    lock.withLock { if self.error == nil { self.error = error } }
                }
            }
        }
    }

    /// Which thread walks the stored side (``StoredWalks``): whichever is free first, or (tests) the
    /// folding thread, the reading thread walking only what it leaves (all, when the engine gives it no
    /// transaction of the same snapshot).
    enum StoredWalking {
        case whicheverIsFree, foldingThreadFirst
    }

    /// What the folding thread found.
    final class Fold: @unchecked Sendable {
        /// The fold's state: the folding thread moves it into a local value while it runs (no
        /// exclusivity check of a class's property per record), and back when it is done.
        var state: Folding
        /// The read-model keys of this pass.
        let modelKeys: ModelKeys
        var error: (any Error)?
        let done = DispatchSemaphore(value: 0)

        init(checker: InvariantChecker, indexes: Bool, modelKeys: ModelKeys) throws {
            state = Folding(checker: checker, indexes: indexes, hasher: try LogHasher())
            self.modelKeys = modelKeys
        }

        /// Checks and folds the batches until the handoff closes, hashes the replayed read models, then
        /// takes the stored walks the reading thread has not, on a reader of `reader`'s snapshot of its
        /// own (none when the engine gives none: the reading thread then walks them all).
        func run(_ handoff: Handoff, walks: StoredWalks, reader: SharedReader) {
            defer { done.signal() }
            var folding = Folding(checker: InvariantChecker(), indexes: false, hasher: state.hasher)
            swap(&folding, &state)
            defer { swap(&folding, &state) }
            do {
                while let batch = handoff.take() { try folding.add(batch, normalize: reader.normalize) }
                let keys = modelKeys
                ReadModel.forEachEntry(of: folding.checker.state, lineages: folding.checker.leanLineages) { key, value in
                    if keys.contains(key) { folding.replayedModels.add(key: key, value: value) }
                }
            } catch {
                self.error = error
                handoff.stop()
                return
            }
            guard walks.remain, !handoff.isStopped else { return }
            do {
                _ = try reader.readingSameSnapshot { walks.run($0) }
            } catch {
                // No second transaction: the reading thread walks the rest.
            }
        }
    }

    /// The folding thread's work.
    struct Folding {
        var checker: InvariantChecker
        /// The first pass hashes the entries the records imply; later ones only fold.
        let indexes: Bool
        let hasher: LogHasher
        /// By ``EngineIndex/position``.
        var implied = [MultisetHash](repeating: MultisetHash(), count: EngineIndex.allCases.count)
        var events: UInt64 = 0
        /// The chain hash of the leaves handed over, and their Merkle tree.
        var chain = Digest32.zero
        var linked: UInt64 = 0
        var merkle: MerkleWalk
        /// The read models of the folded state, hashed once the fold is done.
        var replayedModels = MultisetHash()

        init(checker: InvariantChecker, indexes: Bool, hasher: LogHasher) {
            self.checker = checker
            self.indexes = indexes
            self.hasher = hasher
            merkle = MerkleWalk(hasher: hasher)
        }

        mutating func add(_ batch: Batch, normalize: (IndexEntry) -> IndexEntry) throws {
            for leaf in batch.leaves {
                linked += 1
                chain = try hasher.chain(chain, sequence: linked, leaf: leaf)
                try merkle.add(leaf, stored: { batch.storedNodes[Batch.nodeKey($0, $1)] }) { implied[EngineIndex.merkle.position].add($0) }
            }
            checker.numberViewProducts(batch.products)
            var (viewStart, start) = (0, 0)
            var sequence = batch.first
            for record in batch.records {
                defer {
                    (viewStart, start) = (record.views, record.events)
                    sequence += 1
                }
                guard record.events > start else {
                    let views = batch.views[viewStart..<record.views]
                    checker.check(sequence: sequence, views: views)
                    if indexes && !record.impliedHashed {
                        forEachImpliedEntry(sequence: sequence, command: record.command, views: views) { entry in
                            implied[entry.index.position].add(normalize(entry))
                        }
                    }
                    self.events += UInt64(views.count)
                    continue
                }
                let events = batch.events[start..<record.events]
                try checker.check(sequence: sequence, events: events)
                if indexes && !record.impliedHashed {
                    let transfers = checker.state.transfers
                    forEachImpliedEntry(
                        sequence: sequence, command: record.command, events: events, caseLineage: { transfers[$0]?.request.plan.lineage }
                    ) { entry in
                        implied[entry.index.position].add(normalize(entry))
                    }
                }
                self.events += UInt64(events.count)
            }
        }
    }

    /// One pass over the log on two threads: this one reads each record, hashes it (leaf, Merkle
    /// nodes against the stored ones) and decodes it, then hashes the stored indexes and the
    /// persisted read models; the other links the leaves into the chain, checks the invariants, folds,
    /// hashes the entries the records imply and, once the fold is done, its read models. Only when
    /// the read-model hashes differ are both walked in key order to name each difference. Pass 0 of `count` does all
    /// of that; a later pass (`first` is pass 0's analysis) only folds its range of lineages, through
    /// the last record pass 0 verified, and compares their read models.
    /// `models` is the count of read models ``passes(_:lineagesPerPass:)`` took (to size the fold's tables).
    static func run(
        _ reader: any EngineReader, pass: Int = 0, of count: Int = 1, models: Int, after first: First? = nil,
        readerHashing: ReaderHashing = .whenBehind, walking: StoredWalking = .whicheverIsFree, progress: ((UInt64, UInt64) -> Void)?
    ) throws -> Analysis {
        let head = try reader.head()
        let hashing = pass == 0
        let through = first?.report.verifiedRecords ?? head.sequence
        var walk = try ChainWalk(head: head, linking: false)
        /// The entries of the records whose implied entries this thread hashed (``Batch/hashImpliedEntries(normalize:into:)``).
        var impliedHere = [MultisetHash](repeating: MultisetHash(), count: EngineIndex.allCases.count)
        let handoff = Handoff()
        var checker = InvariantChecker(signatures: .libcrypto, lean: true, lineageRange: count == 1 ? nil : range(pass, of: count))
        // About the lineages this pass keeps (the read models name each once), with a margin.
        checker.reserveCapacity(lineages: models / count + models / count / 8)
        let modelKeys = ModelKeys(readModelKeys(pass, of: count))
        let fold = try Fold(checker: checker, indexes: hashing, modelKeys: modelKeys)
        let shared = SharedReader(reader: reader)
        // Every read model was written for a record: more of them than records is a damaged tree,
        // whose walk could go on through garbage (``readModelCount(_:)``).
        let walks = StoredWalks(indexes: hashing, modelKeys: modelKeys, records: head.sequence)
        Thread.detachNewThread { fold.run(handoff, walks: walks, reader: shared) }
        var batch = Batch(first: 1)
        var decoder = RecordViewDecoder()
        /// The first record that does not decode or goes back in time: the records after it are not folded.
        var decodeFault: ChainFault?
        var lastRecordedAt: Timestamp = 0
        /// Hands a batch over (dropped once the other thread has stopped). When the folding thread is
        /// behind, this one first hashes the batch's implied entries instead of waiting for room.
        func send(_ batch: inout Batch) throws {
            batch.products = decoder.takeNewProductNames()
            try batch.readStoredNodes(reader)
            if hashing && (readerHashing == .always || handoff.isBacklogged) {
                batch.hashImpliedEntries(normalize: shared.normalize, into: &impliedHere)
            }
            handoff.put(batch)
        }
        let label = count == 1 ? progress : progress.map { report in { done, total in report(UInt64(pass) * total + done, UInt64(count) * total) } }
        do {
            try reader.forEachRecord(from: 1, through: through) { sequence, bytes in
                if hashing {
                    guard try walk.add(sequence, bytes, reader: reader, leaf: { batch.leaves.append($0) })
                    else { return false }
                }
                if decodeFault == nil {
                    let (views, events) = (batch.views.count, batch.events.count)
                    do throws(RecordDecodingError) {
                        let record = try decoder.decode(bytes, sequence: sequence, views: &batch.views, events: &batch.events)
                        if record.recordedAt < lastRecordedAt {
                            batch.views.removeSubrange(views...)
                            batch.events.removeSubrange(events...)
                            decodeFault = ChainFault(sequence: sequence, through: sequence, reason: "recorded before the record preceding it")
                        } else {
                            lastRecordedAt = record.recordedAt
                            batch.records.append((record.command, batch.views.count, batch.events.count, false))
                        }
                    } catch {
                        decodeFault = ChainFault(sequence: sequence, through: sequence, reason: error.reason)
                    }
                    // A later pass has nothing more to do; the first still hashes the rest of the chain.
                    if decodeFault != nil && !hashing { return false }
                }
                if batch.isFull {
                    try send(&batch)
                    batch = Batch(first: sequence + 1)
                    decoder.forgetStrings()
                }
                if sequence % 10_000 == 0 { label?(sequence, through) }
                return true
            }
        } catch {
            handoff.stop()
            handoff.close()
            fold.done.wait()
            throw error
        }
        if !batch.isEmpty {
            do {
                try send(&batch)
            } catch {
                handoff.stop()
                handoff.close()
                fold.done.wait()
                throw error
            }
        }
        handoff.close()
        // The stored indexes and persisted read models, while the other thread folds.
        if walking == .whicheverIsFree {
            walks.run(reader)
            fold.done.wait()
        } else {
            fold.done.wait()
            walks.run(reader)
        }
        if let error = walks.error { throw error }
        if let error = fold.error { throw error }
        let (stored, persistedModels) = (walks.stored, walks.persistedModels)
        var fault: ChainFault?
        if hashing {
            // A record that does not decode ends the pass there, unless a record before it is missing.
            if let bad = decodeFault, walk.fault.map({ $0.sequence > bad.sequence }) ?? true { walk.stop(bad) }
            fault = walk.finish(chain: fold.state.chain, merkle: fold.state.merkle)
        } else {
            fault = first?.report.chainFault
        }
        label?(through, through)
        let implied = Dictionary(
            uniqueKeysWithValues: EngineIndex.allCases.map { index in
                var hash = fold.state.implied[index.position]
                hash.add(impliedHere[index.position])
                return (index, hash)
            })
        let state = fold.state.checker.state
        var analysis = Analysis(
            report: ReplayReport(
                verifiedRecords: fault.map { $0.sequence - 1 } ?? head.sequence, events: fold.state.events, chainFault: fault,
                violations: fold.state.checker.violations, readModelDifferences: [], indexDifferences: [], lineages: fold.state.checker.lineageCount),
            head: head, pass: pass, passCount: count, deletionsWhileBound: fold.state.checker.deletionsWhileBound,
            replayed: (state, fold.state.checker.leanLineages))
        analysis.report.formatOneNotes = fold.state.checker.formatOneNotes
        analysis.caseLineages = state.transfers.mapValues { $0.request.plan.lineage }
        // The folding thread hashed the replayed read models the same way; the walk in key order that
        // names each difference runs only when the two differ.
        if fold.state.replayedModels != persistedModels { try analysis.compareReadModels(reader) }
        if hashing {
            analysis.staleModelVersion = try reader.meta(.readModelVersion).flatMap(u32) != StateProjection.version
            try analysis.compareIndexes(implied: implied, stored: stored, reader)
        }
        return analysis
    }

    /// The reading thread's reader, for the two calls the folding thread may make on it while the
    /// reading thread uses it: `normalized` (pure) and `readingSameSnapshot` (a transaction of its own).
    struct SharedReader: @unchecked Sendable {
        let reader: any EngineReader
        func normalize(_ entry: IndexEntry) -> IndexEntry { reader.normalized(entry) }
        func readingSameSnapshot<T>(_ body: (any EngineReader) throws -> T) throws -> T? { try reader.readingSameSnapshot(body) }
    }

    // MARK: Read models

    /// One difference between the persisted read models and the replay's.
    enum ReadModelChange {
        case put([UInt8], [UInt8])
        case remove([UInt8])
    }

    /// Walks the expected entries from `start` beside the persisted ones, calling `body` with each
    /// difference and its description until `body` returns false; returns the key to resume from
    /// (nil at the end).
    func forEachReadModelChange(
        from start: [UInt8], _ reader: any EngineReader, _ body: (ReadModelChange, String) throws -> Bool
    ) throws -> [UInt8]? {
        let end = Self.readModelKeys(pass, of: passCount).end
        func inRange(_ key: [UInt8]) -> Bool { end.map { key.lexicographicallyPrecedes($0) } ?? true }
        var pending: ([UInt8], [UInt8])?  // the next expected entry not yet matched
        var resume: [UInt8]?
        var stop = false
        var expectedIterator: [([UInt8], [UInt8])] = []
        // Expected entries are produced in chunks so the walk never holds them all.
        var expectedFrom = start
        var expectedDone = false
        func nextExpected() -> ([UInt8], [UInt8])? {
            if expectedIterator.isEmpty && !expectedDone {
                var chunk: [([UInt8], [UInt8])] = []
                expected.forEach(from: expectedFrom) { key, value in
                    guard inRange(key) else { return false }
                    chunk.append((key, value))
                    return chunk.count < 1_024
                }
                // The next key after the last one: the last with a zero byte appended.
                if let last = chunk.last { expectedFrom = last.0 + [0] }
                if chunk.count < 1_024 { expectedDone = true }
                expectedIterator = chunk.reversed()
            }
            return expectedIterator.popLast()
        }
        pending = nextExpected()
        func missing(before key: [UInt8]?) throws {
            while !stop, let entry = pending, key.map({ entry.0.lexicographicallyPrecedes($0) }) ?? true {
                if try !body(.put(entry.0, entry.1), "\(ReadModel.describe(entry.0)): missing from the persisted read models") {
                    stop = true
                    resume = entry.0
                    return
                }
                pending = nextExpected()
            }
        }
        try reader.forEachReadModel(from: start) { key, value in
            guard inRange(key) else { return false }
            try missing(before: key)
            if stop { return false }
            if let entry = pending, entry.0 == key {
                if entry.1 != value, try !body(.put(key, entry.1), "\(ReadModel.describe(key)): persisted and replayed values differ") {
                    stop = true
                    resume = key
                    return false
                }
                pending = nextExpected()
            } else if try !body(.remove(key), "\(ReadModel.describe(key)): persisted but not produced by a replay") {
                stop = true
                resume = key
                return false
            }
            return true
        }
        try missing(before: nil)
        return resume
    }

    mutating func compareReadModels(_ reader: any EngineReader) throws {
        var differences = DifferenceList()
        _ = try forEachReadModelChange(from: Self.readModelKeys(pass, of: passCount).start, reader) { _, line in
            differences.append(line)
            return true
        }
        readModelsDiffer = !differences.isEmpty
        readModelDiffs = differences
        report.readModelDifferences = differences.lines
    }

    // MARK: Indexes

    mutating func compareIndexes(
        implied: [EngineIndex: MultisetHash], stored: [EngineIndex: MultisetHash], _ reader: any EngineReader
    ) throws {
        var differences = DifferenceList()
        for index in EngineIndex.allCases {
            guard stored[index, default: MultisetHash()] != implied[index, default: MultisetHash()] else { continue }
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
        if readModelsDiffer {
            // In chunks, each found in a read of its own (no write inside a read).
            var resume: [UInt8]? = Self.readModelKeys(pass, of: passCount).start
            while let start = resume, !grew {
                var puts: [([UInt8], [UInt8])] = []
                var removals: [[UInt8]] = []
                resume = try store.read { reader in
                    try forEachReadModelChange(from: start, reader) { change, _ in
                        switch change {
                        case .put(let key, let value): puts.append((key, value))
                        case .remove(let key): removals.append(key)
                        }
                        return puts.count + removals.count < chunk
                    }
                }
                let (p, r) = (puts, removals)
                try add(p.count + r.count) { writer in
                    try writer.removeReadModels(r)
                    try writer.putReadModels(p)
                }
                try flush()
            }
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

extension EngineIndex {
    /// The index's place in `allCases`.
    var position: Int {
        switch self {
        case .commands: 0
        case .lineages: 1
        case .accountLineages: 2
        case .merkle: 3
        }
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
