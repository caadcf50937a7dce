public import LedgerCore
public import LedgerCrypto

/// The RFC 6962 Merkle tree over the log's records (leaf i = record i + 1), kept as the log grows:
/// its right edge in the head (``LogHead/frontier``), and the root of every perfect subtree of
/// ``storedLeaves`` leaves or more as a stored node, so a root, an inclusion proof or a consistency
/// proof costs O(log n) node reads plus at most ``storedLeaves`` leaf hashes at each edge, and
/// `verify` can tell which block of records changed.
public enum MerkleLog {
    /// Nodes of this level and above are stored: ~0.25 bytes a record.
    public static let storedLevel: UInt8 = 8
    public static let storedLeaves: UInt64 = 1 << 8

    /// Adds the leaf hash of record `count + 1` to `frontier` (the edge of `count` leaves), calling
    /// `store` with each perfect subtree it completes at ``storedLevel`` or above.
    public static func append(
        _ leaf: Digest32, count: UInt64, frontier: inout [Digest32], hasher: LogHasher, store: (UInt8, UInt64, Digest32) -> Void
    ) throws {
        var node = leaf
        var level: UInt8 = 0
        while count >> UInt64(level) & 1 == 1, let left = frontier.popLast() {
            node = try hasher.node(left, node)
            level += 1
            if level >= storedLevel { store(level, (count + 1 - (1 << UInt64(level))) >> UInt64(level), node) }
        }
        frontier.append(node)
    }

    /// The root of the tree whose right edge is `frontier` (SHA-256 of nothing for no leaves).
    public static func root(frontier: [Digest32], hasher: LogHasher) throws -> Digest32 {
        guard var root = frontier.last else { return try emptyRoot() }
        for node in frontier.dropLast().reversed() { root = try hasher.node(node, root) }
        return root
    }

    /// The root of the empty tree: SHA-256 of nothing.
    public static func emptyRoot() throws -> Digest32 {
        guard let root = Digest32(try MerkleTree.emptyRoot) else { throw CryptoError("SHA-256", detail: "the digest is not 32 bytes") }
        return root
    }

    /// The root of leaves [lo, hi) of the log `reader` reads: a stored node when the range is one,
    /// else the two halves RFC 6962 splits it into, down to leaf hashes of at most
    /// ``storedLeaves`` records.
    public static func subtreeRoot(_ lo: UInt64, _ hi: UInt64, reader: any EngineReader, hasher: LogHasher) throws -> Digest32 {
        let count = hi - lo
        if count >= storedLeaves, count & (count - 1) == 0, lo % count == 0,
            let node = try reader.merkleNode(level: UInt8(count.trailingZeroBitCount), index: lo / count)
        {
            return node
        }
        if count <= storedLeaves {
            var leaves: [[UInt8]] = []
            leaves.reserveCapacity(Int(count))
            try reader.forEachRecord(from: lo + 1, through: hi) { _, bytes in
                leaves.append(try hasher.leafHash(bytes).bytes)
                return true
            }
            guard leaves.count == Int(count) else { throw LedgerStoreError.corrupt("records \(lo + 1) to \(hi) are not all in the log") }
            guard let root = Digest32(try MerkleTree.subtreeRoot(leaves, 0, leaves.count)) else {
                throw CryptoError("SHA-256", detail: "the digest is not 32 bytes")
            }
            return root
        }
        let split = UInt64(MerkleTree.splitPoint(Int(count)))
        return try hasher.node(
            try subtreeRoot(lo, lo + split, reader: reader, hasher: hasher), try subtreeRoot(lo + split, hi, reader: reader, hasher: hasher))
    }

    /// The root of the first `size` records.
    public static func root(size: UInt64, reader: any EngineReader, hasher: LogHasher) throws -> Digest32 {
        size == 0 ? try emptyRoot() : try subtreeRoot(0, size, reader: reader, hasher: hasher)
    }

    /// The inclusion proof of record `sequence` in the tree of the first `size` records.
    public static func inclusionProof(of sequence: UInt64, size: UInt64, reader: any EngineReader, hasher: LogHasher) throws -> [[UInt8]] {
        try MerkleTree.inclusionProof(index: Int(sequence - 1), size: Int(size)) { lo, hi in
            try subtreeRoot(UInt64(lo), UInt64(hi), reader: reader, hasher: hasher).bytes
        }
    }

    /// The consistency proof from the first `oldSize` records to the first `size`.
    public static func consistencyProof(from oldSize: UInt64, to size: UInt64, reader: any EngineReader, hasher: LogHasher) throws -> [[UInt8]] {
        try MerkleTree.consistencyProof(oldSize: Int(oldSize), size: Int(size)) { lo, hi in
            try subtreeRoot(UInt64(lo), UInt64(hi), reader: reader, hasher: hasher).bytes
        }
    }
}

/// The index entries a record implies (besides Merkle nodes): every lineage it names (and, for a
/// step of a transfer case that names only the case, the case's lineage), each with the record's
/// command; its command on its own when it has no home lineage; and every lineage it binds to an
/// account (a binding, or a transfer's target).
public func impliedEntries(of record: Record, caseLineage: (String) -> LineageKey?) -> [IndexEntry] {
    var entries: [IndexEntry] = []
    forEachImpliedEntry(sequence: record.sequence, command: record.command, events: record.events[...], caseLineage: caseLineage) {
        entries.append($0)
    }
    return entries
}

/// The entries of ``impliedEntries(of:caseLineage:)``, in the same order, one at a time, for the
/// record at `sequence` of `command` whose events are `events` (a replay hashes each without
/// collecting them).
public func forEachImpliedEntry(
    sequence: UInt64, command: Key128, events: ArraySlice<LedgerEvent>, caseLineage: (String) -> LineageKey?, _ body: (IndexEntry) -> Void
) {
    if Record.homeLineage(ofFact: events.first) == nil { body(.command(command, sequence: sequence)) }
    var lineages = MentionedLineages()
    for event in events {
        if let lineage = event.lineage { lineages.add(lineage) }
    }
    for event in events {
        switch event {
        case .transferApproved(let e):
            if let lineage = caseLineage(e.caseId) { lineages.add(lineage) }
        case .transferRefused(let e):
            if let lineage = caseLineage(e.caseId) { lineages.add(lineage) }
        case .lineageBound(let lineage, let account):
            body(.accountLineage(account, lineage, sequence: sequence))
        case .transferApplied(let e):
            body(.accountLineage(e.target, e.lineage, sequence: sequence))
        default:
            break
        }
    }
    lineages.forEach { body(.lineage($0, sequence: sequence, command: command)) }
}

/// ``forEachImpliedEntry(sequence:command:events:caseLineage:_:)`` of a record whose events are all
/// views (a replay's usual record: no transfer step, so no case to look up).
public func forEachImpliedEntry(sequence: UInt64, command: Key128, views: ArraySlice<EventView>, _ body: (IndexEntry) -> Void) {
    let fact = views.first
    let home = fact?.kind == .transactionSubmitted || fact?.kind == .notificationReceived ? fact?.lineage : nil
    if home == nil { body(.command(command, sequence: sequence)) }
    var lineages = MentionedLineages()
    for view in views {
        if let lineage = view.lineage { lineages.add(lineage) }
    }
    for view in views where view.kind == .lineageBound {
        if let lineage = view.lineage, let account = view.account { body(.accountLineage(account, lineage, sequence: sequence)) }
    }
    lineages.forEach { body(.lineage($0, sequence: sequence, command: command)) }
}

/// Lineages in order of first mention, each once, with no allocation for the usual one.
private struct MentionedLineages {
    private var first: LineageKey?
    private var more: [LineageKey] = []

    mutating func add(_ lineage: LineageKey) {
        if let first {
            if lineage != first, !more.contains(lineage) { more.append(lineage) }
        } else {
            first = lineage
        }
    }

    func forEach(_ body: (LineageKey) -> Void) {
        guard let first else { return }
        body(first)
        for lineage in more { body(lineage) }
    }
}

/// Appends records in a write group: assigns sequence numbers and `recordedAt` (never earlier than
/// the head's), encodes, hashes (leaf and chain), grows the Merkle frontier, and collects the bytes,
/// index entries, Merkle nodes and new head into an ``EngineBatch``. After an error it must not be
/// used again (its write group is abandoned).
public struct LogAppender {
    public private(set) var head: LogHead
    public var batch = EngineBatch()
    private let hasher: LogHasher

    public init(head: LogHead) throws {
        self.head = head
        hasher = try LogHasher()
    }

    /// Appends a record of `events` (recorded at `recordedAt`, or at the head's time when that is
    /// later) and returns it with its sequence number.
    @discardableResult
    public mutating func append(
        recordedAt: Timestamp, at: Timestamp, command: Key128, attempt: UInt32, events: [LedgerEvent],
        caseLineage: (String) -> LineageKey? = { _ in nil }
    ) throws -> Record {
        let record = Record(
            sequence: head.sequence + 1, recordedAt: max(recordedAt, head.recordedAt), at: at, command: command, attempt: attempt,
            events: events)
        try link(record, bytes: RecordCodec.encode(record), caseLineage: caseLineage)
        return record
    }

    /// Appends a record exactly as stored elsewhere (a copy of another log: `migrate`), as the next
    /// one. Returns it decoded.
    @discardableResult
    public mutating func append(stored bytes: [UInt8], caseLineage: (String) -> LineageKey? = { _ in nil }) throws -> Record {
        let record: Record
        do throws(RecordDecodingError) {
            record = try RecordCodec.decode(bytes, sequence: head.sequence + 1)
        } catch {
            throw LedgerStoreError.corrupt("record \(head.sequence + 1): \(error.reason)")
        }
        try link(record, bytes: bytes, caseLineage: caseLineage)
        return record
    }

    /// Hashes `bytes` into the chain and the Merkle tree and adds them, with their index entries, to the batch.
    private mutating func link(_ record: Record, bytes: [UInt8], caseLineage: (String) -> LineageKey?) throws {
        let leaf = try hasher.leafHash(bytes)
        let chainHash = try hasher.chain(head.chainHash, sequence: record.sequence, leaf: leaf)
        // The frontier is taken out of the head, and the batch's copy of the head dropped, so that it
        // grows in place instead of being copied per record. (A hash that fails here leaves the
        // appender spent: its write group is abandoned, as after any error.)
        batch.head = nil
        var frontier: [Digest32] = []
        swap(&frontier, &head.frontier)
        forEachImpliedEntry(sequence: record.sequence, command: record.command, events: record.events[...], caseLineage: caseLineage) {
            batch.entries.append($0)
        }
        try MerkleLog.append(leaf, count: head.sequence, frontier: &frontier, hasher: hasher) { level, index, node in
            batch.entries.append(.merkleNode(level: level, index: index, hash: node))
        }
        head = LogHead(sequence: record.sequence, chainHash: chainHash, recordedAt: record.recordedAt, frontier: frontier)
        batch.records.append((record.sequence, bytes))
        batch.head = head
    }
}

/// The Merkle half of a walk of the log (``ChainWalk``): the tree's edge over the leaves added so
/// far, and the first block whose stored node does not match the nodes its leaves complete.
public struct MerkleWalk {
    private let hasher: LogHasher
    /// The edge of the leaves added so far.
    public private(set) var frontier: [Digest32] = []
    public private(set) var count: UInt64 = 0
    /// The first block of records whose stored Merkle node does not match them.
    public private(set) var changedBlock: ChainFault?

    public init(hasher: LogHasher) { self.hasher = hasher }

    /// Adds the leaf of record `count + 1`: `node` gets each stored-level node it completes, which
    /// is compared with `stored(level, index)`, the node the store holds (nil: none).
    public mutating func add(_ leaf: Digest32, stored: (UInt8, UInt64) throws -> Digest32?, node: (IndexEntry) -> Void = { _ in }) throws {
        var completed: [(UInt8, UInt64, Digest32)] = []
        try MerkleLog.append(leaf, count: count, frontier: &frontier, hasher: hasher) { completed.append(($0, $1, $2)) }
        for (level, index, hash) in completed {
            node(.merkleNode(level: level, index: index, hash: hash))
            if changedBlock == nil, try stored(level, index) != hash {
                let size = UInt64(1) << UInt64(level)
                changedBlock = ChainFault(
                    sequence: index * size + 1, through: (index + 1) * size,
                    reason: "the records' bytes changed: they no longer match their stored Merkle node or the head's hash chain")
            }
        }
        count += 1
    }

    /// The stored-level nodes that adding the leaves of records `sequences` completes, as (level, index),
    /// in the order ``add(_:stored:node:)`` completes them: what to read for it beforehand.
    public static func completedNodes(_ sequences: ClosedRange<UInt64>) -> [(level: UInt8, index: UInt64)] {
        var nodes: [(level: UInt8, index: UInt64)] = []
        let block = MerkleLog.storedLeaves
        // The first multiple of a block in the range (sequences start at 1).
        var sequence = Swift.max(sequences.lowerBound, 1).quotientAndRemainder(dividingBy: block).quotient * block
        if sequence < sequences.lowerBound || sequence == 0 { sequence += block }
        while sequence <= sequences.upperBound {
            var level = MerkleLog.storedLevel
            while level < 64 && sequence % (UInt64(1) << UInt64(level)) == 0 {
                nodes.append((level, sequence / (UInt64(1) << UInt64(level)) - 1))
                level += 1
            }
            let (next, overflow) = sequence.addingReportingOverflow(block)
            if overflow { break }
            sequence = next
        }
        return nodes
    }
}

/// Walks a log's stored records in order, recomputing leaf and chain hashes and the Merkle tree,
/// and comparing them with the head and the stored Merkle nodes, so a walk tells not only that
/// bytes changed but which records: the first block whose stored node no longer matches them, or
/// the subtree of the head's frontier that does not.
public struct ChainWalk {
    public let head: LogHead
    private let hasher: LogHasher
    public private(set) var chain = Digest32.zero
    private var merkle: MerkleWalk
    /// The edge of the records walked so far.
    public var frontier: [Digest32] { merkle.frontier }
    public private(set) var count: UInt64 = 0
    public private(set) var fault: ChainFault?

    /// Links the chain hashes and walks the Merkle tree only when `linking` (else the caller links
    /// the leaves ``add`` hands it and walks their tree elsewhere, and gives ``finish(chain:merkle:)``
    /// the results).
    public init(head: LogHead, linking: Bool = true) throws {
        self.head = head
        self.linking = linking
        hasher = try LogHasher()
        merkle = MerkleWalk(hasher: hasher)
    }

    private let linking: Bool

    /// Hashes record `sequence`; `node` gets each Merkle node it completes and `leaf` its leaf hash.
    /// False (and ``fault`` set) when the record is not the next one.
    public mutating func add(
        _ sequence: UInt64, _ bytes: UnsafeRawBufferPointer, reader: any EngineReader, node: (IndexEntry) -> Void = { _ in },
        leaf leafHash: (Digest32) -> Void = { _ in }
    ) throws -> Bool {
        guard sequence == count + 1 else {
            fault = ChainFault(sequence: count + 1, through: count + 1, reason: "missing (the next stored record is \(sequence))")
            return false
        }
        let leaf = try hasher.leafHash(bytes)
        leafHash(leaf)
        if linking {
            chain = try hasher.chain(chain, sequence: sequence, leaf: leaf)
            try merkle.add(leaf, stored: { try reader.merkleNode(level: $0, index: $1) }, node: node)
        }
        count = sequence
        return true
    }

    /// Records a fault found by the caller (a record that does not decode, or out of order).
    public mutating func stop(_ fault: ChainFault) { self.fault = fault }

    /// ``finish()`` with the chain hash and the Merkle walk of the leaves ``add`` handed out, linked
    /// and walked by the caller.
    public mutating func finish(chain linked: Digest32, merkle walked: MerkleWalk) -> ChainFault? {
        chain = linked
        merkle = walked
        return finish()
    }

    /// After the last record: the first fault, if any. Bytes changed in place are located to the
    /// first stored node that no longer matches them, else to the subtree of the head's frontier
    /// (the records after the last stored node) that does not.
    public mutating func finish() -> ChainFault? {
        if fault == nil, count != head.sequence {
            fault = ChainFault(sequence: count + 1, through: head.sequence, reason: "missing: the head says \(head.sequence) records")
        }
        if fault == nil, chain != head.chainHash || frontier != head.frontier {
            fault = merkle.changedBlock ?? tailFault()
        }
        return fault
    }

    /// The root of the records walked.
    public func root() throws -> Digest32 { try MerkleLog.root(frontier: frontier, hasher: hasher) }

    private func tailFault() -> ChainFault {
        var start: UInt64 = 0
        var bits = (0..<64).reversed().filter { head.sequence >> UInt64($0) & 1 == 1 }.makeIterator()
        for (index, node) in frontier.enumerated() {
            guard let bit = bits.next() else { break }
            let size = UInt64(1) << UInt64(bit)
            if index >= head.frontier.count || head.frontier[index] != node {
                return ChainFault(
                    sequence: start + 1, through: start + size, reason: "the records' bytes changed: they no longer match the head's hash chain")
            }
            start += size
        }
        return ChainFault(sequence: head.sequence, through: head.sequence, reason: "the head's chain hash does not match the records")
    }
}
