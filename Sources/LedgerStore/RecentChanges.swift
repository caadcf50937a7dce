import CLMDB
import Foundation
import LedgerCore
import Projections

/// Storage format 3's recent changes: the derived entries a commit would put at random keys (a
/// lineage's index entry and read model in `lineages` and `read-models`, an account's vault entry
/// under `u` in `identities`) are appended instead to one of 128 small databases, `recent-0` …
/// `recent-127`, chosen by the key's top seven bits. Each commit then merges the next region in turn
/// (one per ``Recent/entriesPerMerge`` entries it appended, at least one) into the main trees and
/// empties it: a merge's puts fall into 1/128 of each tree's key range, so a merge writes at most one
/// leaf per merged entry, and fewer while that range holds fewer leaves (format 2 wrote one leaf per
/// line in each tree once the trees outgrew a commit). Every read consults both: a key's entries in its
/// region are newer than its entries in the main trees.
///
/// A region's entries: u64 serial (big-endian, appended with `MDB_APPEND`) → kind ‖ key(16) ‖ payload
/// (``RecentKind``). The store's next serial and the next region to merge are in `meta` under
/// ``Recent/metaKey``.
enum Recent {
    static let regionCount = 128
    static let names: [String] = (0..<regionCount).map { "recent-\($0)" }
    /// The region of a 16-byte key: its top seven bits.
    @inline(__always)
    static func region(of key: Key128) -> Int { Int(truncatingIfNeeded: key.high >> 57) }
    /// The first key byte of region `region` (every key byte `b` with `b >> 1 == region`).
    static func firstByte(of region: Int) -> UInt8 { UInt8(region << 1) }
    /// A write group larger than this (an upgrade's or a migration's, a repair) goes straight into the
    /// main trees, after every region has been merged.
    static let directLimit = 16_384
    static let metaKey = Array("recent".utf8)
    /// A commit merges one region per this many entries it appends (at least one): a region then
    /// holds at most about this many entries whatever the commits' size.
    static let entriesPerMerge = 2_560
}

/// What a region entry holds.
enum RecentKind: UInt8 {
    /// A `lineages` entry (payload: the 14-byte value).
    case lineageEntry = 1
    /// A lineage's read model (payload: its stored form, as `read-models` holds it under `L`).
    case readModel = 2
    /// A vault entry (payload: the 16-byte pseudonym). An erasure goes straight to `identities` and
    /// removes the key's entries from its region, so an erased identity stays readable nowhere.
    case vaultPut = 3
}

/// A `lineages` value as numbers: the record's sequence and its command key's first 8 bytes.
struct LineageEntryValue: Comparable {
    var sequence: UInt64
    var command: UInt64

    init(sequence: UInt64, command: UInt64) {
        self.sequence = sequence
        self.command = command
    }

    init(_ value: UnsafeRawBufferPointer) {
        sequence = LMDBAccess.sequence(ofLineageEntry: value)
        command = LMDBAccess.commandPrefix(ofLineageEntry: value)
    }

    static func < (a: Self, b: Self) -> Bool { (a.sequence, a.command) < (b.sequence, b.command) }

    /// The 14 stored bytes: the sequence's low 6 bytes, then the command prefix, big-endian.
    var buffer: KeyBuffer {
        var value = KeyBuffer()
        value.append(u48: sequence)
        value.append(command)
        return value
    }

    var bytes: [UInt8] { buffer.with { Array($0) } }
}

/// A change a commit appends to its key's region.
struct RecentChange {
    let kind: RecentKind
    let key: Key128
    /// A lineage entry's or a vault entry's payload (14 or 16 bytes), held inline.
    var fixed = KeyBuffer()
    /// A read model's stored form.
    var readModel: [UInt8] = []

    /// The payload's bytes.
    func withPayload<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        kind == .readModel ? try readModel.withUnsafeBytes(body) : try fixed.with(body)
    }
}

/// The writer's view of the regions, kept between its write transactions so that a lookup does not
/// scan a region: valid while `transaction` is the last committed LMDB transaction (another
/// process's commit in between, or an aborted transaction, makes it reload). A region's view is read
/// the first time a write transaction needs it (``LMDBAccess/cache(of:in:)``), so a process that
/// writes a few lines into a large store reads only the regions those lines touch.
final class RecentCache: @unchecked Sendable {
    struct Lineage {
        /// The serial of the lineage's newest read model in its region; 0 when none.
        var readModel: UInt64 = 0
        /// Its `lineages` entries in the region, oldest first.
        var entries: [LineageEntryValue] = []
    }

    struct Region {
        var lineages: [Key128: Lineage] = [:]
        /// Vault key → pseudonym.
        var vault: [Key128: AccountID] = [:]
    }

    var regions = [Region](repeating: Region(), count: Recent.regionCount)
    /// Whether each region's view has been read since the cache was last emptied (checked on every
    /// lookup and append: a plain buffer, without the exclusivity checks of a stored array).
    let loaded = UnsafeMutableBufferPointer<Bool>.allocate(capacity: Recent.regionCount)
    /// The LMDB transaction the cache reflects; nil when unknown.
    var transaction: UInt64?
    /// Whether the current write transaction changed the regions (so it is committed as its own id).
    var wrote = false
    /// Write transactions begun through this cache (a view for deciding ahead names the one it follows).
    var writes: UInt64 = 0
    /// Whether the current write transaction found the cache stale (another process committed).
    var reloaded = false
    /// The regions the current write transaction merged, as they were before (a view for deciding
    /// ahead on the snapshot before the transaction's commit reads them).
    var premerge: [(region: Int, view: Region)] = []
    /// Held for the whole of a write transaction and the cache's update after it.
    let lock = NSLock()

    init() { loaded.initialize(repeating: false) }

    deinit { loaded.deallocate() }

    /// Forgets every region's view: each is read again when next needed.
    func empty() {
        regions = [Region](repeating: Region(), count: Recent.regionCount)
        loaded.update(repeating: false)
    }

    func note(_ serial: UInt64, _ kind: RecentKind, _ key: Key128, _ payload: UnsafeRawBufferPointer) {
        let region = Recent.region(of: key)
        switch kind {
        case .lineageEntry: regions[region].lineages[key, default: Lineage()].entries.append(LineageEntryValue(payload))
        case .readModel: regions[region].lineages[key, default: Lineage()].readModel = serial
        case .vaultPut: regions[region].vault[key] = AccountID(Key128(loading: payload, at: 0))
        }
    }
}

/// The regions' database handles in one transaction, with the writer's cache in a write transaction.
struct RecentRegions {
    let databases: [MDB_dbi]
    let cache: RecentCache?
}

extension LMDBAccess {
    /// Visits region `region`'s entries in serial order.
    func forEachRecent(
        in regions: RecentRegions, region: Int, _ body: (UInt64, RecentKind, Key128, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let cursor = try txn.cursor(regions.databases[region])
        defer { cursor.close() }
        var entry = try cursor.get(MDB_FIRST)
        while let (key, value) = entry {
            guard key.count == 8, value.count >= 17 else {
                throw corrupt("an entry of \(Recent.names[region]) of \(key.count) and \(value.count) bytes: restore the store from a backup")
            }
            guard let kind = RecentKind(rawValue: value[0]) else {
                throw corrupt("an entry of \(Recent.names[region]) of unknown kind \(value[0]): restore the store from a backup")
            }
            let payload = UnsafeRawBufferPointer(rebasing: value[17...])
            let valid: Bool
            switch kind {
            case .lineageEntry: valid = payload.count == Self.lineageEntryLength
            case .vaultPut: valid = payload.count == 16
            case .readModel: valid = !payload.isEmpty
            }
            guard valid else { throw corrupt("a \(kind) entry of \(Recent.names[region]) with \(payload.count) bytes") }
            try body(UInt64(bigEndian: key.loadUnaligned(as: UInt64.self)), kind, Key128(loading: value, at: 1), payload)
            entry = try cursor.get(MDB_NEXT)
        }
    }

    /// The payload of region `region`'s entry `serial`.
    func recentPayload(in regions: RecentRegions, region: Int, serial: UInt64) throws -> UnsafeRawBufferPointer {
        guard let value = try KeyBuffer(serial).with({ try txn.get(regions.databases[region], $0) }), value.count > 17 else {
            throw corrupt("entry \(serial) of \(Recent.names[region]) is missing")
        }
        return UnsafeRawBufferPointer(rebasing: value[17...])
    }

    /// A lineage's entries in its region, oldest first (the cache's in a write transaction).
    func recentEntries(_ lineage: Key128, in regions: RecentRegions) throws -> [LineageEntryValue] {
        let region = Recent.region(of: lineage)
        if let cache = try cache(of: region, in: regions) { return cache.regions[region].lineages[lineage]?.entries ?? [] }
        var entries: [LineageEntryValue] = []
        try forEachRecent(in: regions, region: region) { _, kind, key, payload in
            if key == lineage, kind == .lineageEntry { entries.append(LineageEntryValue(payload)) }
        }
        return entries
    }

    /// A lineage's newest read model in its region, nil when the region holds none. The bytes are
    /// LMDB's: valid until the transaction writes.
    func recentReadModel(_ lineage: Key128, in regions: RecentRegions) throws -> UnsafeRawBufferPointer? {
        let region = Recent.region(of: lineage)
        if let cache = try cache(of: region, in: regions) {
            guard let serial = cache.regions[region].lineages[lineage]?.readModel, serial != 0 else { return nil }
            return try recentPayload(in: regions, region: region, serial: serial)
        }
        var model: UnsafeRawBufferPointer?
        try forEachRecent(in: regions, region: region) { _, kind, key, payload in
            if key == lineage, kind == .readModel { model = payload }
        }
        return model
    }

    /// A vault key's pseudonym in its region; nil when the region holds none.
    func recentVault(_ vaultKey: Key128, in regions: RecentRegions) throws -> AccountID? {
        let region = Recent.region(of: vaultKey)
        if let cache = try cache(of: region, in: regions) { return cache.regions[region].vault[vaultKey] }
        var found: AccountID?
        try forEachRecent(in: regions, region: region) { _, kind, key, payload in
            if key == vaultKey, kind == .vaultPut { found = AccountID(Key128(loading: payload, at: 0)) }
        }
        return found
    }

    /// Removes every entry of `vaultKey` from its region (an erasure: an erased identity must stay
    /// readable nowhere, not even until its region is merged).
    func eraseRecentVault(_ vaultKey: Key128, in regions: RecentRegions) throws {
        let region = Recent.region(of: vaultKey)
        if let cache = try cache(of: region, in: regions), cache.regions[region].vault[vaultKey] == nil { return }
        var serials: [UInt64] = []
        try forEachRecent(in: regions, region: region) { serial, kind, key, _ in
            if key == vaultKey, kind == .vaultPut { serials.append(serial) }
        }
        for serial in serials { try KeyBuffer(serial).with { _ = try txn.delete(regions.databases[region], $0) } }
        regions.cache?.regions[region].vault[vaultKey] = nil
        regions.cache?.wrote = true
    }

    /// Region `region`'s changes as the main trees would hold them, each list in key order: every
    /// `lineages` entry; the newest read model of each lineage; the newest vault change of each key
    func recentOverlay(in regions: RecentRegions, region: Int) throws -> RecentOverlay {
        var overlay = RecentOverlay()
        var models: [Key128: [UInt8]] = [:]
        var vault: [Key128: AccountID] = [:]
        try forEachRecent(in: regions, region: region) { _, kind, key, payload in
            switch kind {
            case .lineageEntry: overlay.lineageEntries.append((key, LineageEntryValue(payload)))
            case .readModel: models[key] = Array(payload)
            case .vaultPut: vault[key] = AccountID(Key128(loading: payload, at: 0))
            }
        }
        overlay.lineageEntries.sort { ($0.0, $0.1) < ($1.0, $1.1) }
        overlay.readModels = models.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        overlay.vault = vault.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        return overlay
    }

    // MARK: Writing

    /// The store's next serial and next region to merge.
    func recentPosition() throws -> (serial: UInt64, next: Int) {
        guard let value = try meta(Recent.metaKey) else { return (1, 0) }
        guard value.count == 9 else { throw corrupt("the recent-changes position in meta has \(value.count) bytes") }
        let serial = value.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return (serial, Int(value[8]) % Recent.regionCount)
    }

    func putRecentPosition(serial: UInt64, next: Int) throws {
        var value = u64Bytes(serial)
        value.append(UInt8(next))
        try putMeta(Recent.metaKey, value)
    }

    /// Appends `changes` to their regions in order, then merges the next regions in turn: one per
    /// ``Recent/entriesPerMerge`` changes, at least one.
    func appendRecent(_ changes: [RecentChange], in regions: RecentRegions) throws {
        var (serial, next) = try recentPosition()
        let ordered = changes.indices.sorted { a, b in
            (Recent.region(of: changes[a].key), a) < (Recent.region(of: changes[b].key), b)
        }
        var value: [UInt8] = []
        // Each region's entries are appended through one cursor, which stays at its end (LMDB then
        // finds the last leaf without a descent from the root per entry).
        var open: (region: Int, cursor: LMDBCursor)?
        defer { open?.cursor.close() }
        for index in ordered {
            let change = changes[index]
            let region = Recent.region(of: change.key)
            value.removeAll(keepingCapacity: true)
            value.append(change.kind.rawValue)
            change.key.withBytes { value.append(contentsOf: $0) }
            change.withPayload { value.append(contentsOf: $0) }
            let end: LMDBCursor
            if let open, open.region == region {
                end = open.cursor
            } else {
                open?.cursor.close()
                // The region's view is read before its first change is appended, so each is noted once.
                _ = try cache(of: region, in: regions)
                end = try txn.cursor(regions.databases[region])
                open = (region, end)
            }
            let appended = try KeyBuffer(serial).with { k in
                try value.withUnsafeBytes { v in try end.put(k, v, flags: MDB_APPEND) }
            }
            guard appended else {
                throw corrupt(
                    "the recent-change position in meta (serial \(serial)) is behind the entries of \(Recent.names[region]): nothing was written; restore the store from a backup"
                )
            }
            if let cache = regions.cache {
                cache.wrote = true
                change.withPayload { cache.note(serial, change.kind, change.key, $0) }
            }
            serial += 1
        }
        open?.cursor.close()
        open = nil
        let merges = Swift.max(1, (changes.count + Recent.entriesPerMerge - 1) / Recent.entriesPerMerge)
        for step in 0..<merges { try mergeRecent(region: (next + step) % Recent.regionCount, in: regions) }
        try putRecentPosition(serial: serial, next: (next + merges) % Recent.regionCount)
    }

    /// Puts region `region`'s changes into the main trees in key order and empties it. They are taken
    /// from the writer's view of the region (``RecentCache``), which holds what a scan of the region
    /// would find, without scanning it: only each lineage's newest read model is read, by its serial.
    func mergeRecent(region: Int, in regions: RecentRegions) throws {
        // Only a write transaction merges, and it has the writer's view.
        guard let cache = try cache(of: region, in: regions) else { throw corrupt("\(Recent.names[region]) merged outside a write transaction") }
        let changed = cache.regions[region].lineages.sorted { $0.key < $1.key }
        // The region's keys are one range of each tree, put in key order through one cursor per tree.
        let lineages = try txn.cursor(db.lineages)
        defer { lineages.close() }
        for (lineage, view) in changed {
            try KeyBuffer(lineage).with { k in
                for entry in view.entries { try entry.buffer.with { v in _ = try lineages.put(k, v, flags: MDB_NODUPDATA) } }
            }
        }
        let readModels = try txn.cursor(db.readModels)
        defer { readModels.close() }
        // A read model's bytes are LMDB's, valid only until the next write: copied out first.
        var stored: [UInt8] = []
        for (lineage, view) in changed where view.readModel != 0 {
            stored.removeAll(keepingCapacity: true)
            stored.append(contentsOf: try recentPayload(in: regions, region: region, serial: view.readModel))
            try KeyBuffer(ReadModel.lineagePrefix, lineage).with { k in try stored.withUnsafeBytes { v in _ = try readModels.put(k, v) } }
        }
        let identities = try txn.cursor(db.identities)
        defer { identities.close() }
        for (vaultKey, account) in cache.regions[region].vault.sorted(by: { $0.key < $1.key }) {
            try KeyBuffer(Self.vaultPrefix, vaultKey).with { k in try account.key.withBytes { v in _ = try identities.put(k, v) } }
        }
        try txn.clear(regions.databases[region])
        cache.premerge.append((region, cache.regions[region]))
        cache.regions[region] = RecentCache.Region()
        cache.loaded[region] = true
        cache.wrote = true
    }

    /// Merges every region that holds changes (before a write that goes straight into the main trees).
    func mergeAllRecent() throws {
        guard let regions = recent else { return }
        for region in 0..<Recent.regionCount where try txn.statistics(regions.databases[region]).entries > 0 {
            try mergeRecent(region: region, in: regions)
        }
    }

    /// Empties `cache` (a writer's first transaction, or after another process wrote), checking that
    /// the store's next serial is past every region's last entry: each region's view is then read
    /// when first needed (``cache(of:in:)``).
    func reload(_ cache: RecentCache, in regions: RecentRegions) throws {
        cache.empty()
        var last: UInt64 = 0
        for (region, database) in regions.databases.enumerated() {
            let cursor = try txn.cursor(database)
            defer { cursor.close() }
            if let (key, _) = try cursor.get(MDB_LAST) {
                guard key.count == 8 else {
                    throw corrupt("an entry of \(Recent.names[region]) with a key of \(key.count) bytes: restore the store from a backup")
                }
                last = Swift.max(last, UInt64(bigEndian: key.loadUnaligned(as: UInt64.self)))
            }
        }
        let next = try recentPosition().serial
        guard next > last else {
            throw corrupt(
                "the recent-change position in meta (serial \(next)) is not past the regions' last entry (\(last)): restore the store from a backup")
        }
    }

    /// The writer's cache with region `region`'s view read (from the region, the first time since the
    /// cache was emptied); nil outside the writer's transactions.
    @inline(__always)
    func cache(of region: Int, in regions: RecentRegions) throws -> RecentCache? {
        guard let cache = regions.cache else { return nil }
        if !cache.loaded[region] {
            cache.regions[region] = RecentCache.Region()
            try forEachRecent(in: regions, region: region) { serial, kind, key, payload in cache.note(serial, kind, key, payload) }
            cache.loaded[region] = true
        }
        return cache
    }

    // MARK: Reading the main trees with the regions merged in

    /// Visits the entries of `dbi` with keys from `lower` up to `upper` (nil: the end) in key order.
    /// `overlay` (in key order, keys without `prefix`) is merged in: in a `MDB_DUPSORT` database its
    /// entries are further duplicates; otherwise each replaces the main tree's entry of its key, or
    /// removes it (a nil value). False when `body` stopped.
    func forEachMerged(
        _ dbi: MDB_dbi, prefix: [UInt8], lower: [UInt8], upper: [UInt8]?, overlay: [(Key128, [UInt8]?)], duplicates: Bool,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
    ) throws -> Bool {
        let cursor = try txn.cursor(dbi)
        defer { cursor.close() }
        var main = try lower.isEmpty ? cursor.get(MDB_FIRST) : lower.withUnsafeBytes { try cursor.get(MDB_SET_RANGE, key: $0) }
        if let upper, let (key, _) = main, Self.compareBytes(key, upper) >= 0 { main = nil }
        var index = overlay.startIndex
        var overlayKey: [UInt8] = []
        func loadOverlayKey() {
            overlayKey = prefix
            if index < overlay.endIndex { overlay[index].0.withBytes { overlayKey.append(contentsOf: $0) } }
        }
        // Overlay entries below `lower` (a start inside the range) are skipped.
        while index < overlay.endIndex {
            loadOverlayKey()
            if compare(overlayKey, lower) >= 0 { break }
            index += 1
        }
        loadOverlayKey()
        while true {
            let overlayLeft = index < overlay.endIndex
            guard let (key, value) = main else {
                guard overlayLeft else { return true }
                if let stored = overlay[index].1 {
                    let go = try overlayKey.withUnsafeBytes { k in try stored.withUnsafeBytes { v in try body(k, v) } }
                    guard go else { return false }
                }
                index += 1
                loadOverlayKey()
                continue
            }
            var order = overlayLeft ? -Self.compareBytes(key, overlayKey) : 1  // overlay's key against main's
            if order == 0, duplicates, let stored = overlay[index].1 { order = -Self.compareBytes(value, stored) }
            if order < 0 || (order == 0 && !duplicates) {
                // The overlay's entry comes first, or replaces the main tree's.
                if let stored = overlay[index].1 {
                    let go = try overlayKey.withUnsafeBytes { k in try stored.withUnsafeBytes { v in try body(k, v) } }
                    guard go else { return false }
                }
                if order == 0 { main = try next(cursor, upper) }
                index += 1
                loadOverlayKey()
            } else {
                if order == 0 {  // the same duplicate in both
                    index += 1
                    loadOverlayKey()
                }
                guard try body(key, value) else { return false }
                main = try next(cursor, upper)
            }
        }
    }

    private func next(_ cursor: LMDBCursor, _ upper: [UInt8]?) throws -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)? {
        guard let entry = try cursor.get(MDB_NEXT) else { return nil }
        if let upper, Self.compareBytes(entry.key, upper) >= 0 { return nil }
        return entry
    }

    private func compare(_ a: [UInt8], _ b: [UInt8]) -> Int { a.withUnsafeBytes { Self.compareBytes($0, b) } }

    /// memcmp order, shorter first on a common prefix (LMDB's default order).
    @inline(__always)
    static func compareBytes(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Int {
        b.withUnsafeBytes { b in
            let common = Swift.min(a.count, b.count)
            if common > 0, let x = a.baseAddress, let y = b.baseAddress {
                let order = memcmp(x, y, common)
                if order != 0 { return order < 0 ? -1 : 1 }
            }
            return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
        }
    }

    /// Visits the entries of `dbi` from `start` (empty: the first) in key order, with every region's
    /// changes to the keys `prefix` ‖ 16 bytes merged in (`overlay(region)` lists them).
    func forEachWithRecent(
        _ dbi: MDB_dbi, prefix: [UInt8], from start: [UInt8], duplicates: Bool, overlay: (Int) throws -> [(Key128, [UInt8]?)],
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let rangeStart = prefix + [0]
        var rangeEnd = prefix
        // The key after every `prefix` ‖ … key (prefix's last byte incremented; none for an empty prefix).
        while let last = rangeEnd.last, last == 0xFF { rangeEnd.removeLast() }
        let end: [UInt8]? = rangeEnd.isEmpty ? nil : Array(rangeEnd.dropLast()) + [rangeEnd[rangeEnd.count - 1] + 1]
        if compare(start, rangeStart) < 0 {
            guard try forEachMerged(dbi, prefix: prefix, lower: start, upper: rangeStart, overlay: [], duplicates: duplicates, body) else { return }
        }
        for region in 0..<Recent.regionCount {
            let upper: [UInt8]? = region + 1 < Recent.regionCount ? prefix + [Recent.firstByte(of: region + 1)] : end
            if let upper, compare(start, upper) >= 0 { continue }
            let lower = max(prefix + [Recent.firstByte(of: region)], start, by: compare)
            guard try forEachMerged(dbi, prefix: prefix, lower: lower, upper: upper, overlay: overlay(region), duplicates: duplicates, body)
            else { return }
        }
        if let end {
            _ = try forEachMerged(dbi, prefix: prefix, lower: max(end, start, by: compare), upper: nil, overlay: [], duplicates: duplicates, body)
        }
    }

    private func max(_ a: [UInt8], _ b: [UInt8], by compare: ([UInt8], [UInt8]) -> Int) -> [UInt8] { compare(a, b) >= 0 ? a : b }
}

/// A region's changes in key order (``LMDBAccess/recentOverlay(in:region:)``).
struct RecentOverlay {
    var lineageEntries: [(Key128, LineageEntryValue)] = []
    var readModels: [(Key128, [UInt8])] = []
    var vault: [(Key128, AccountID)] = []
}
