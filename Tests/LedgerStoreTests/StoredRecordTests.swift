import Foundation
import LedgerCore
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

@testable import LedgerStore

/// The LMDB engine keeps records with their product ids replaced by dictionary references and gives
/// every reader the canonical bytes back (`docs/storage-format.md`, "Stored form of records").
@Suite struct StoredRecordTests {
    let t = Fixtures.start
    let product = "com.myrecipes.premium.monthly"

    func ledger(purchases: Int) throws -> (Ledger, TemporaryDirectory) {
        let (ledger, directory) = try Fixtures.ledger()
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        for i in 0..<purchases {
            let answer = submit.respond(
                to: Fixtures.line(["type": "purchase", "account": "user\(i)", "transaction": Fixtures.transaction("\(i + 1)", at: t), "at": t]))
            #expect(Fixtures.object(answer)["decision"] as? String == "granted", "\(answer)")
        }
        return (ledger, directory)
    }

    /// The bytes LMDB holds for record `sequence`, as they are.
    func stored(_ ledger: Ledger, _ sequence: UInt64) throws -> [UInt8] {
        try ledger.store.lmdbEngine.withWriteAccess { access in
            try KeyBuffer(sequence).with { k in try #require(try access.txn.get(access.db.log, k)).map { $0 } }
        }
    }

    func putStored(_ ledger: Ledger, _ sequence: UInt64, _ bytes: [UInt8]) throws {
        try ledger.store.lmdbEngine.withWriteAccess { access in
            try KeyBuffer(sequence).with { k in _ = try bytes.withUnsafeBytes { try access.txn.put(access.db.log, k, $0) } }
        }
    }

    func productEntry() -> [UInt8] {
        var w = ByteWriter()
        w.shortString(product)
        return w.output
    }

    @Test func theStoredFormExpandsToTheCanonicalBytes() throws {
        let entry = productEntry()
        let dictionary = StoredRecordDictionary([Array("other-entry".utf8), entry])
        // A header, a 0xFF byte, the product twice and an escape-like pair around it.
        let canonical: [UInt8] = [2] + Array(repeating: 0xFF, count: 22) + [0xFF, 0x00, 7] + entry + [0xFF, 1] + entry + [0xFF]
        let stored = try #require(dictionary.storedForm(of: canonical))
        #expect(stored[0] == StoredRecordDictionary.marker)
        #expect(Array(stored[1..<23]) == Array(canonical[1..<23]), "the fixed header is kept as it is")
        #expect(stored.count == canonical.count - 2 * (entry.count - 2) + 3)
        var expanded: [UInt8] = []
        try stored.withUnsafeBytes { try dictionary.expand($0, into: &expanded) }
        #expect(expanded == canonical)
        // Without an entry to refer to, the canonical bytes are stored as they are.
        #expect(StoredRecordDictionary([Array("absent".utf8)]).storedForm(of: canonical) == nil)
        #expect(StoredRecordDictionary().storedForm(of: canonical) == nil)
    }

    @Test func theLongestEntryThatMatchesIsTheOneReferred() throws {
        let short = Array("monthly-plan".utf8)
        let long = Array("monthly-plan-family".utf8)
        let other = Array("monthly-pass".utf8)
        let dictionary = StoredRecordDictionary([short, other, long])
        let header: [UInt8] = [2] + Array(repeating: 0, count: 22)
        // Where the longer entry is there, it is the one referred to (two bytes for its 19)...
        let both = header + long + [0x20] + short + [0x20] + Array("monthly-plan-fam".utf8)
        let stored = try #require(dictionary.storedForm(of: both))
        #expect(stored.count == both.count - (long.count - 2) - (short.count - 2) - (short.count - 2))
        #expect(Array(stored[23..<25]) == [StoredRecordDictionary.escape, 3], "the 19-byte entry, not the 12-byte one it starts with")
        var expanded: [UInt8] = []
        try stored.withUnsafeBytes { try dictionary.expand($0, into: &expanded) }
        #expect(expanded == both)
        // ...and an entry longer than what is left is not matched past the end.
        let cut = header + Array("monthly-plan-fa".utf8)
        let storedCut = try #require(dictionary.storedForm(of: cut))
        #expect(Array(storedCut[23...]) == [StoredRecordDictionary.escape, 1] + Array("-fa".utf8))
    }

    @Test func damagedStoredBytesAreRefusedNotExpanded() {
        let dictionary = StoredRecordDictionary([productEntry()])
        let header: [UInt8] = [StoredRecordDictionary.marker] + Array(repeating: 1, count: 22)
        for (bytes, reason) in [
            (header + [5, 0xFF], "it ends inside an escape"), (header + [0xFF, 2], "it names dictionary entry 2 of 1"),
            ([StoredRecordDictionary.marker, 1, 2], "3 bytes that are not a record in stored form"),
        ] {
            var out: [UInt8] = []
            #expect(throws: StoredFormDamage.self) { try bytes.withUnsafeBytes { try dictionary.expand($0, into: &out) } }
            do {
                try bytes.withUnsafeBytes { try dictionary.expand($0, into: &out) }
            } catch {
                #expect("\(error)" == reason)
            }
        }
    }

    @Test func recordsNamingAProductAreStoredShorterAndReadCanonical() throws {
        let (ledger, directory) = try ledger(purchases: 3)
        defer { directory.remove() }
        let dictionary = try ledger.store.lmdbEngine.withWriteAccess { try $0.recordDictionary() }
        #expect(dictionary.entries == [productEntry()])
        for sequence in UInt64(1)...3 {
            let raw = try stored(ledger, sequence)
            let canonical = try #require(try ledger.store.read { try $0.record(sequence) })
            #expect(raw[0] == StoredRecordDictionary.marker && canonical[0] == RecordCodec.formatVersion)
            let escapes = canonical[23...].filter { $0 == StoredRecordDictionary.escape }.count
            #expect(raw.count == canonical.count - productEntry().count + 2 + escapes, "\(raw.count) stored bytes for \(canonical.count)")
            #expect(raw.firstRange(of: Array(product.utf8)) == nil)
            #expect(canonical.firstRange(of: productEntry()) != nil)
            #expect(try RecordCodec.decode(canonical, sequence: sequence).sequence == sequence)
        }
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func recordsStoredCanonicallyBeforeStayReadable() throws {
        let (ledger, directory) = try ledger(purchases: 2)
        defer { directory.remove() }
        // Record 1 as a store written before the stored form holds it.
        let canonical = try #require(try ledger.store.read { try $0.record(1) })
        try putStored(ledger, 1, canonical)
        #expect(try stored(ledger, 1) == canonical)
        #expect(try ledger.store.read { try $0.record(1) } == canonical)
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func aChangedDictionaryEntryBreaksTheChain() throws {
        let (ledger, directory) = try ledger(purchases: 3)
        defer { directory.remove() }
        var changed = productEntry()
        changed[changed.count - 1] ^= 0x20
        try ledger.store.lmdbEngine.withWriteAccess { try $0.putMeta(StoredRecordDictionary.metaKey(1), changed) }
        let report = try ledger.store.replay()
        #expect(report.chainFault?.sequence == 1, "\(String(describing: report.chainFault))")
        #expect(!report.isIntact)
    }

    @Test func aDamagedStoredRecordIsAStoreErrorThroughTheBinary() throws {
        let (ledger, directory) = try ledger(purchases: 3)
        defer { directory.remove() }
        var raw = try stored(ledger, 2)
        let escape = try #require(raw[23...].firstIndex(of: StoredRecordDictionary.escape))
        raw[escape + 1] = 9  // a dictionary entry that does not exist
        try putStored(ledger, 2, raw)
        #expect(throws: LedgerStoreError.self) { try ledger.store.read { try $0.record(2) } }
        let store = ledger.store.directory.path
        for command in [["verify"], ["log"]] {
            let result = try LedgerBinary.run(command + ["--store", store])
            #expect(result.status == 3, "\(command): \(result.stderr)")
            #expect(result.stderr.contains("record 2 cannot be read: its stored form is damaged"), "\(result.stderr)")
        }
    }

    /// The lineage read models (key, canonical value) as readers see them.
    func lineageModels(_ ledger: Ledger) throws -> [([UInt8], [UInt8])] {
        var models: [([UInt8], [UInt8])] = []
        try ledger.store.read { reader in
            try reader.forEachReadModel(from: [ReadModel.lineagePrefix]) { key, value in
                guard key.first == ReadModel.lineagePrefix else { return false }
                models.append((key, value))
                return true
            }
        }
        return models
    }

    /// The bytes LMDB holds under read-model `key`, as they are (with `replacement`: put those first).
    func storedModel(_ ledger: Ledger, _ key: [UInt8], replacement: [UInt8]? = nil) throws -> [UInt8] {
        try ledger.store.lmdbEngine.withWriteAccess { access in
            try access.mergeAllRecent()  // the read models still in their regions into `read-models`
            return try key.withUnsafeBytes { k in
                if let replacement { _ = try replacement.withUnsafeBytes { try access.txn.put(access.db.readModels, k, $0) } }
                return try #require(try access.txn.get(access.db.readModels, k)).map { $0 }
            }
        }
    }

    @Test func lineageReadModelsNamingAProductAreStoredShorterAndReadCanonical() throws {
        let (ledger, directory) = try ledger(purchases: 3)
        defer { directory.remove() }
        let models = try lineageModels(ledger)
        #expect(models.count == 3)
        for (key, canonical) in models {
            let raw = try storedModel(ledger, key)
            #expect(raw[0] == canonical[0] | 0x80 && canonical[0] & 0x80 == 0)
            let escapes = canonical.dropFirst().filter { $0 == StoredRecordDictionary.escape }.count
            #expect(raw.count == canonical.count - productEntry().count + 2 + escapes, "\(raw.count) stored bytes for \(canonical.count)")
            #expect(raw.firstRange(of: Array(product.utf8)) == nil)
            let state = try ReadModel.decodeLineage(canonical)
            #expect(state.entitlement?.productId == product)
            let lineage = LineageKey(try #require(Key128(Array(key.dropFirst()))))
            #expect(try ledger.store.read { try $0.lineageStates([lineage]) } == [lineage: state])
        }
        #expect(try ledger.store.replay().isIntact)

        // A read model stored as it is (as every store before the stored form holds it) reads the same.
        let (first, canonical) = models[0]
        #expect(try storedModel(ledger, first, replacement: canonical) == canonical)
        #expect(try lineageModels(ledger).map(\.1) == models.map(\.1))
        #expect(try ledger.store.replay().isIntact)

        // A damaged one (a reference to an entry that does not exist) is a store error, never a guess.
        let (second, _) = models[1]
        var raw = try storedModel(ledger, second)
        let escape = try #require(raw.dropFirst().firstIndex(of: StoredRecordDictionary.escape))
        raw[escape + 1] = 9
        _ = try storedModel(ledger, second, replacement: raw)
        let result = try LedgerBinary.run(["verify", "--store", ledger.store.directory.path])
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stderr.contains("cannot be read: its stored form is damaged"), "\(result.stderr)")
    }

    @Test func consecutiveRecordsShareLogEntriesAndReadOneByOne() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let lines = (0..<10).map { i in
            Array(Fixtures.line(["type": "purchase", "account": "user\(i)", "transaction": Fixtures.transaction("\(i + 1)", at: t), "at": t]).utf8)
        }
        #expect(submit.respond(to: lines).count == 10)
        let (sequence, entries) = try ledger.store.read { reader in
            (try reader.head().sequence, try reader.statistics().first { $0.name == "log" }?.entries)
        }
        #expect(sequence == 10)
        #expect(entries == 3, "blocks of 4, 4 and 2 records")
        var scanned: [UInt64: [UInt8]] = [:]
        try ledger.store.read { reader in
            try reader.forEachRecord(from: 1, through: .max) { sequence, bytes in
                scanned[sequence] = Array(bytes)
                return true
            }
        }
        #expect(scanned.keys.sorted() == Array(1...10))
        for sequence in UInt64(1)...10 {
            let bytes = try #require(try ledger.store.read { try $0.record(sequence) })
            #expect(bytes == scanned[sequence])
            #expect(try RecordCodec.decode(bytes, sequence: sequence).sequence == sequence)
        }
        var middle: [UInt64] = []
        try ledger.store.read { reader in
            try reader.forEachRecord(from: 6, through: 7) { sequence, _ in
                middle.append(sequence)
                return true
            }
        }
        #expect(middle == [6, 7])
        #expect(try ledger.store.read { try $0.record(11) } == nil)
        #expect(try ledger.store.read { try $0.lastSequence(recordedAtOrBefore: .max) } == 10)
        #expect(try ledger.store.replay().isIntact)

        // A block whose record count no longer matches its bytes is a store error, never a guess.
        var block = try stored(ledger, 8)
        #expect(block[0] == LogBlock.marker && block[1] == 4)
        block[1] = 3
        try putStored(ledger, 8, block)
        let result = try LedgerBinary.run(["verify", "--store", ledger.store.directory.path])
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stderr.contains("the log entry of record 8 cannot be read"), "\(result.stderr)")
    }
}
