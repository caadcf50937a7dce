import Foundation
import LedgerCore

/// How the LMDB engine keeps a record at rest (`docs/storage-format.md`, "Stored form of records").
/// The canonical record bytes (what is hashed and chained, exported in dispute bundles, copied by
/// `migrate`) never change: the engine stores them with each product id it has learned replaced by a
/// two-byte reference into an append-only dictionary kept in `meta`, and every read expands them back.
///
/// ```
/// canonical bytes (byte 0 = 2)        a record naming no dictionary entry, and every record stored before
/// 0x82 ‖ canonical bytes 1..<23 ‖ tail the fixed header as it is (recordedAt and command at their offsets),
///                                     then the rest of the canonical bytes, each run one of:
///     0xFF 0x00                       one 0xFF byte
///     0xFF k (1…254)                  the bytes of dictionary entry k
///     b (any byte but 0xFF)           b
/// ```
///
/// Entry k is `meta` `record-dictionary` ‖ u8 k: the bytes a product id is written as in a record (a
/// varint length and its UTF-8). Entries are learned from the records as they are appended (the first
/// record naming a product id not yet known adds it, up to 254 entries) and never changed, so every
/// record keeps its meaning; a changed entry changes the expanded bytes, which the hash chain catches.
struct StoredRecordDictionary: Equatable {
    /// The first byte of a record in stored form: `0x80 | ` the record format.
    static let marker: UInt8 = 0x80 | RecordCodec.formatVersion
    static let escape: UInt8 = 0xFF
    /// Bytes 0..<23 (format, recordedAt, command key) are the fixed header, never transformed.
    static let headerLength = 23
    static let capacity = 254
    /// The `meta` key of entry k is this prefix and the byte k.
    static let metaPrefix = Array("record-dictionary".utf8)
    /// Shorter entries would not save a byte against their two-byte reference.
    static let shortestEntry = 4

    /// Entry k is `entries[k - 1]`.
    private(set) var entries: [[UInt8]] = []
    /// The indexes into `entries` of the entries starting with each byte.
    private var startingWith: [[UInt8]] = Array(repeating: [], count: 256)
    /// Whether an entry starts with each byte, or it is the escape: where the encoder looks closer.
    private var startsAnEntryOrEscape: [Bool] = (0..<256).map { $0 == Int(StoredRecordDictionary.escape) }

    init(_ entries: [[UInt8]] = []) {
        for entry in entries { append(entry) }
    }

    static func == (a: Self, b: Self) -> Bool { a.entries == b.entries }

    var isFull: Bool { entries.count >= Self.capacity }

    mutating func append(_ entry: [UInt8]) {
        precondition(!isFull && entry.count >= Self.shortestEntry, "a record dictionary entry beyond its limits")
        startingWith[Int(entry[0])].append(UInt8(entries.count))
        startsAnEntryOrEscape[Int(entry[0])] = true
        entries.append(entry)
    }

    /// Whether `stored` is in stored form (otherwise it is a record's canonical bytes, or not a record).
    static func isStoredForm(_ stored: UnsafeRawBufferPointer) -> Bool { stored.first == marker }

    /// The stored form of `canonical`, or nil when no entry occurs in it (it is then stored as it is).
    func storedForm(of canonical: [UInt8]) -> [UInt8]? {
        guard canonical.count > Self.headerLength, canonical[0] == RecordCodec.formatVersion else { return nil }
        return storedForm(of: canonical, header: Self.headerLength)
    }

    /// The stored form of any bytes whose first byte has bit 7 clear: the first byte with bit 7 set,
    /// bytes 1..<`header` as they are, then the rest with each entry replaced by its reference (and
    /// each 0xFF escaped); nil when no entry occurs after the header. Records use it with their 23-byte
    /// header, the LMDB engine's lineage read models with their flags byte alone.
    func storedForm(of canonical: [UInt8], header: Int) -> [UInt8]? {
        guard !entries.isEmpty, canonical.count > header, canonical[0] & 0x80 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(canonical.count + 8)
        var referenced = false
        canonical.withUnsafeBufferPointer { c in
            startsAnEntryOrEscape.withUnsafeBufferPointer { special in
                out.append(c[0] | 0x80)
                out.append(contentsOf: c[1..<header])
                var i = header
                var copied = i  // the bytes before it are written
                while i < c.count {
                    let byte = c[i]
                    guard special[Int(byte)] else {
                        i += 1
                        continue
                    }
                    if let k = longestEntry(in: c, at: i) {
                        out.append(contentsOf: c[copied..<i])
                        out.append(Self.escape)
                        out.append(UInt8(k + 1))
                        i += entries[k].count
                        copied = i
                        referenced = true
                    } else if byte == Self.escape {
                        out.append(contentsOf: c[copied...i])
                        out.append(0)
                        i += 1
                        copied = i
                    } else {
                        i += 1
                    }
                }
                out.append(contentsOf: c[copied...])
            }
        }
        return referenced ? out : nil
    }

    private func longestEntry(in c: UnsafeBufferPointer<UInt8>, at i: Int) -> Int? {
        var best: Int?
        var bestCount = 0
        for k in startingWith[Int(c[i])] {
            // Compared in place with `memcmp` (a generic `elementsEqual` of an array against a slice
            // stepped through both a byte at a time).
            let matches = entries[Int(k)].withUnsafeBufferPointer { entry in
                guard entry.count > bestCount, i + entry.count <= c.count, let start = entry.baseAddress, let here = c.baseAddress else {
                    return false
                }
                return memcmp(start, here + i, entry.count) == 0
            }
            if matches {
                best = Int(k)
                bestCount = entries[Int(k)].count
            }
        }
        return best
    }

    /// The canonical bytes of `stored` (a record in stored form) into `out`, replacing its contents.
    func expand(_ stored: UnsafeRawBufferPointer, into out: inout [UInt8]) throws(StoredFormDamage) {
        guard stored.count > Self.headerLength, stored[0] == Self.marker else {
            throw StoredFormDamage("\(stored.count) bytes that are not a record in stored form")
        }
        try expand(stored, header: Self.headerLength, into: &out)
    }

    /// The bytes whose stored form (``storedForm(of:header:)``) is `stored` into `out`, replacing its contents.
    func expand(_ stored: UnsafeRawBufferPointer, header: Int, into out: inout [UInt8]) throws(StoredFormDamage) {
        guard stored.count > header, stored[0] & 0x80 != 0 else {
            throw StoredFormDamage("\(stored.count) bytes that are not in stored form")
        }
        out.removeAll(keepingCapacity: true)
        out.reserveCapacity(stored.count + 64)
        out.append(stored[0] & 0x7F)
        out.append(contentsOf: UnsafeRawBufferPointer(rebasing: stored[1..<header]))
        var i = header
        while i < stored.count {
            // The bytes up to the next escape (found by `memchr`), copied at once.
            guard let base = stored.baseAddress, let found = memchr(base + i, Int32(Self.escape), stored.count - i) else {
                out.append(contentsOf: UnsafeRawBufferPointer(rebasing: stored[i...]))
                return
            }
            let escape = base.distance(to: UnsafeRawPointer(found))
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: stored[i..<escape]))
            guard escape + 1 < stored.count else { throw StoredFormDamage("it ends inside an escape") }
            let k = Int(stored[escape + 1])
            if k == 0 {
                out.append(Self.escape)
            } else if k <= entries.count {
                out.append(contentsOf: entries[k - 1])
            } else {
                throw StoredFormDamage("it names dictionary entry \(k) of \(entries.count)")
            }
            i = escape + 2
        }
    }

    /// Entries for the product ids `canonical` names that are not known yet and occur in its bytes
    /// after the header, as many as the dictionary has room for (appended, and returned).
    mutating func learn(from canonical: [UInt8]) -> [[UInt8]] {
        guard !isFull, canonical.count > Self.headerLength, let record = try? RecordCodec.decode(canonical, sequence: 0) else { return [] }
        var learned: [[UInt8]] = []
        for product in Self.productIds(of: record.events) where !isFull {
            var w = ByteWriter()
            w.shortString(product)
            let entry = w.output
            guard entry.count >= Self.shortestEntry, !entries.contains(entry),
                canonical[Self.headerLength...].firstRange(of: entry) != nil
            else { continue }
            append(entry)
            learned.append(entry)
        }
        return learned
    }

    static func productIds(of events: [LedgerEvent]) -> [String] {
        events.compactMap { event in
            switch event {
            case .transactionSubmitted(let e): e.transaction.productId
            case .notificationReceived(let e): e.transaction?.productId
            case .entitlementGranted(let e): e.productId
            default: nil
            }
        }
    }

    /// The `meta` key of entry `k` (1…254).
    static func metaKey(_ k: Int) -> [UInt8] { metaPrefix + [UInt8(k)] }

    /// The dictionary from its `meta` entries, in key order: entry k under key k, from 1 without gaps.
    static func load(_ stored: [(key: [UInt8], value: [UInt8])]) throws(StoredFormDamage) -> StoredRecordDictionary {
        var dictionary = StoredRecordDictionary()
        for (key, value) in stored {
            guard key.count == metaPrefix.count + 1, key.starts(with: metaPrefix), Int(key[metaPrefix.count]) == dictionary.entries.count + 1,
                !dictionary.isFull, value.count >= shortestEntry
            else {
                let number = key.last.map(String.init) ?? "?"
                throw StoredFormDamage(
                    "the record dictionary's entry \(number) (\(value.count) bytes) is not entry \(dictionary.entries.count + 1)")
            }
            dictionary.append(value)
        }
        return dictionary
    }
}

/// Why stored bytes could not be expanded into a record.
struct StoredFormDamage: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The record dictionary of one transaction, loaded on first use (read transactions may be shared by
/// two threads, as `replay` does).
final class StoredRecordDictionaryCell: @unchecked Sendable {
    private let lock = NSLock()
    private var dictionary: StoredRecordDictionary?

    func get(_ load: () throws -> StoredRecordDictionary) throws -> StoredRecordDictionary {
        lock.lock()
        defer { lock.unlock() }
        if let dictionary { return dictionary }
        let loaded = try load()
        dictionary = loaded
        return loaded
    }

    func set(_ new: StoredRecordDictionary) {
        lock.lock()
        defer { lock.unlock() }
        dictionary = new
    }
}

/// Consecutive records in one log entry, keyed by the last one's sequence (`docs/storage-format.md`,
/// "Blocks"). LMDB keeps a node header, a key and a page pointer (18 bytes) per entry: a block of
/// four ~95-byte records pays them once.
///
/// ```
/// u8 0x84 ‖ varint count (2…) ‖ count × (varint length ‖ the record as a one-record entry holds it)
/// ```
///
/// A log entry whose first byte is not 0x84 is one record (canonical or in stored form) under its own
/// sequence, as every record written before blocks is.
enum LogBlock {
    static let marker: UInt8 = 0x84
    /// At most this many records, and this many bytes of them, in one block: small enough that the
    /// space left at the end of a page (less than one block) stays a few percent of it.
    static let records = 4
    static let bytes = 640

    /// The log entries (key: last sequence, value) of `records`, stored bytes of ascending sequences.
    static func entries(_ records: [(sequence: UInt64, bytes: [UInt8])]) -> [(last: UInt64, value: [UInt8])] {
        var out: [(last: UInt64, value: [UInt8])] = []
        var start = 0
        while start < records.count {
            var end = start + 1
            var size = records[start].bytes.count
            while end < records.count, end - start < Self.records, size + records[end].bytes.count <= Self.bytes,
                records[end].sequence == records[end - 1].sequence + 1
            {
                size += records[end].bytes.count
                end += 1
            }
            if end - start == 1 {
                out.append((records[start].sequence, records[start].bytes))
            } else {
                var w = ByteWriter(capacity: size + 2 * (end - start) + 2)
                w.u8(marker)
                w.varint(UInt64(end - start))
                for record in records[start..<end] { w.shortBytes(record.bytes) }
                out.append((records[end - 1].sequence, w.output))
            }
            start = end
        }
        return out
    }

    /// Visits the records of the log entry `value` stored under `last`, as (sequence, stored bytes),
    /// until `body` returns false. Throws when a block is damaged.
    static func forEach(
        last: UInt64, _ value: UnsafeRawBufferPointer, _ body: (UInt64, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        guard value.first == marker else {
            _ = try body(last, value)
            return
        }
        var offset = 1
        let count = try length(value, &offset)
        guard count >= 2, count <= value.count / 2, UInt64(count) <= last else {
            throw StoredFormDamage("a block of \(count) records in \(value.count) bytes ending at record \(last)")
        }
        // The whole block is checked before any record of it is read: a damaged count or length is an
        // error, never records read under the wrong sequences.
        let first = offset
        for index in 0..<count {
            let size = try length(value, &offset)
            guard size >= 1, size <= value.count - offset, value[offset] != marker else {
                throw StoredFormDamage("record \(index + 1) of \(count) in the block has \(size) bytes of \(value.count - offset) left")
            }
            offset += size
        }
        guard offset == value.count else { throw StoredFormDamage("\(value.count - offset) bytes follow the block's \(count) records") }
        offset = first
        for sequence in last - UInt64(count) + 1...last {
            let size = try length(value, &offset)
            guard try body(sequence, UnsafeRawBufferPointer(rebasing: value[offset..<offset + size])) else { return }
            offset += size
        }
    }

    /// A varint length at `offset` (shortest form, under 2^28).
    private static func length(_ value: UnsafeRawBufferPointer, _ offset: inout Int) throws(StoredFormDamage) -> Int {
        var result = 0
        for shift in stride(from: 0, to: 28, by: 7) {
            guard offset < value.count else { throw StoredFormDamage("it ends inside a length") }
            let byte = value[offset]
            offset += 1
            result |= Int(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                guard byte != 0 || shift == 0 else { throw StoredFormDamage("a length not in its shortest form") }
                return result
            }
        }
        throw StoredFormDamage("a length of more than 4 bytes")
    }
}
