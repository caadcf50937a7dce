import CLMDB
import Foundation
import LedgerCore
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

@testable import LedgerStore

@Suite struct LedgerStoreTests {
    let directory = TemporaryDirectory()

    func newStore() throws -> LedgerStore { try LedgerStore.create(at: directory.path("store"), configuration: [1, 2, 3]) }

    /// A 16-byte key of `index` (any distinct value will do).
    static func key(_ index: Int, _ salt: UInt64) -> Key128 { Key128(high: UInt64(index), low: salt) }
    static func account(_ index: Int) -> AccountID { AccountID(key(index, 0xACC)) }
    static func lineage(_ index: Int) -> LineageKey { LineageKey(key(index, 0x11E)) }

    /// A grant to account `index` on lineage `index`.
    static func events(_ index: Int, product: String = "com.myrecipes.premium.monthly") -> [LedgerEvent] {
        [.entitlementGranted(EntitlementGranted(lineage: lineage(index), account: account(index), productId: product, expiresAt: 5_000))]
    }

    /// Appends one record per element of `indexes`, recorded at `recordedAt`, in one write group.
    @discardableResult
    static func append(_ store: LedgerStore, _ indexes: some Sequence<Int>, recordedAt: Timestamp = 1_000, product: (Int) -> String = { _ in "p" })
        throws -> [Record]
    {
        try store.write { reader, writer in
            var appender = try LogAppender(head: try reader.head())
            let records = try indexes.map { index in
                try appender.append(
                    recordedAt: recordedAt, at: recordedAt, command: Key128(high: UInt64(index), low: 1), attempt: 0,
                    events: events(index, product: product(index)))
            }
            try writer.apply(appender.batch)
            return records
        }
    }

    @Test func appendAssignsGaplessSequencesAndChainsHashes() throws {
        let store = try newStore()
        defer { directory.remove() }
        let first = try Self.append(store, [1, 2])
        let second = try Self.append(store, [3])
        #expect(first.map(\.sequence) == [1, 2])
        #expect(second.map(\.sequence) == [3])
        #expect(try store.records() == first + second)
        let hasher = try LogHasher()
        var chain = Digest32.zero
        var frontier: [Digest32] = []
        for (index, record) in (first + second).enumerated() {
            let leaf = try hasher.leafHash(RecordCodec.encode(record))
            chain = try hasher.chain(chain, sequence: record.sequence, leaf: leaf)
            try MerkleLog.append(leaf, count: UInt64(index), frontier: &frontier, hasher: hasher) { _, _, _ in }
        }
        let head = try store.head()
        #expect(head.chainHash == chain && head.frontier == frontier && head.sequence == 3)
        let report = try store.replay()
        #expect(report.chainFault == nil && report.indexDifferences.isEmpty && report.verifiedRecords == 3)
    }

    /// `recordedAt` never goes backwards, whatever the clock says: "recorded at or before T" stays a prefix.
    @Test func aRecordIsNeverRecordedBeforeTheOneBeforeIt() throws {
        let store = try newStore()
        defer { directory.remove() }
        try Self.append(store, [1], recordedAt: 5_000)
        let late = try Self.append(store, [2], recordedAt: 1_000)
        #expect(late.map(\.recordedAt) == [5_000])
        #expect(try store.read { try $0.lastSequence(recordedAtOrBefore: 4_999) } == 0)
        #expect(try store.read { try $0.lastSequence(recordedAtOrBefore: 5_000) } == 2)
    }

    /// Roots and proofs from stored nodes and the frontier equal those over every leaf.
    @Test func merkleRootsAndProofsFromStoredNodesMatchTheWholeTree() throws {
        let store = try newStore()
        defer { directory.remove() }
        try Self.append(store, 1...700)
        let hasher = try LogHasher()
        let leaves = try store.records().map { try hasher.leafHash(RecordCodec.encode($0)).bytes }
        try store.read { reader throws in
            for size in [1, 255, 256, 257, 511, 512, 700] as [UInt64] {
                #expect(
                    try MerkleLog.root(size: size, reader: reader, hasher: hasher).bytes
                        == MerkleTree.root(leafHashes: Array(leaves.prefix(Int(size)))))
            }
            #expect(try MerkleLog.root(frontier: try reader.head().frontier, hasher: hasher).bytes == MerkleTree.root(leafHashes: leaves))
            for sequence in [1, 256, 257, 600, 700] as [UInt64] {
                #expect(
                    try MerkleLog.inclusionProof(of: sequence, size: 700, reader: reader, hasher: hasher)
                        == MerkleTree.inclusionProof(index: Int(sequence - 1), leafHashes: leaves))
            }
            #expect(
                try MerkleLog.consistencyProof(from: 300, to: 700, reader: reader, hasher: hasher)
                    == MerkleTree.consistencyProof(oldSize: 300, leafHashes: leaves))
        }
    }

    /// The stored nodes a range of leaves completes, listed beforehand (what `verify` reads for the
    /// thread that walks the tree), are exactly those the tree reports as it grows, in its order.
    @Test func theStoredNodesARangeOfLeavesCompletesAreListedBeforehand() throws {
        let hasher = try LogHasher()
        var frontier: [Digest32] = []
        var completedAt: [[(level: UInt8, index: UInt64)]] = [[]]  // by sequence
        for count in 0..<UInt64(4_200) {
            var completed: [(level: UInt8, index: UInt64)] = []
            let leaf = try #require(Digest32(Digest.sha256([UInt8(count & 0xff), UInt8(count >> 8)])))
            try MerkleLog.append(leaf, count: count, frontier: &frontier, hasher: hasher) { level, index, _ in
                completed.append((level, index))
            }
            completedAt.append(completed)
        }
        #expect(completedAt[4_096].map(\.level) == [8, 9, 10, 11, 12])
        let ranges: [ClosedRange<UInt64>] = [
            1...1, 1...255, 1...256, 256...256, 257...1_024, 1_000...2_048, 1_025...2_048, 2_049...4_199, 300...4_100, 0...300,
        ]
        for range in ranges {
            let expected = range.flatMap { completedAt[Int($0)] }
            let listed = MerkleWalk.completedNodes(range)
            #expect(listed.map(\.level) == expected.map(\.level) && listed.map(\.index) == expected.map(\.index), "\(range)")
        }
        // At the top of the sequence space: no overflow, no shift past 63 bits.
        #expect(MerkleWalk.completedNodes((UInt64.max - 300)...UInt64.max).map(\.level) == [8])
        #expect(MerkleWalk.completedNodes((UInt64(1) << 63)...(UInt64(1) << 63)).map(\.level) == Array(8...63))
    }

    /// A byte changed in a record far into the log, past the first batches `verify` hands between its
    /// two threads, is located to its own block of 256 records.
    @Test func aFlippedByteFarIntoTheLogIsLocatedToItsBlock() throws {
        let store = try newStore()
        defer { directory.remove() }
        try Self.append(store, 1...2_600, product: { "product-\($0)-marker" })
        let dataFile = directory.path("store/data.mdb")
        var data = try Data(contentsOf: dataFile)
        try Fixtures.flipEveryOccurrence(of: "product-1500-marker", in: &data)
        try data.write(to: dataFile)
        let report = try LedgerStore(opening: directory.path("store")).replay()
        #expect(report.chainFault?.sequence == 1_281)
        #expect(report.chainFault?.through == 1_536)
        #expect(report.chainFault?.reason.contains("bytes changed") == true)
    }

    @Test func theMapGrowsWhenItFills() throws {
        let store = try LedgerStore.create(at: directory.path("store"), configuration: [], keyFiles: nil, initialMapSize: 1 << 20)
        defer { directory.remove() }
        let before = try store.lmdbEngine.environment.mapSize
        let big = String(repeating: "x", count: 20_000)
        for batch in 0..<20 { try Self.append(store, (batch * 50)..<(batch * 50 + 50), product: { "\($0)" + big }) }
        #expect(try store.lmdbEngine.environment.mapSize > before)
        #expect(try store.head().sequence == 1_000)
        #expect(try store.replay().chainFault == nil)
    }

    /// A byte changed in place is located to the block of records whose stored Merkle node no
    /// longer matches them (format 2 keeps no hash per record).
    @Test func aFlippedByteIsLocatedToItsBlockOfRecords() throws {
        let store = try newStore()
        try Self.append(store, 1...300, product: { "product-\($0)-marker" })
        let dataFile = directory.path("store/data.mdb")
        var data = try Data(contentsOf: dataFile)
        // Flip the marker wherever LMDB keeps a copy of the page (old copies linger in free pages).
        try Fixtures.flipEveryOccurrence(of: "product-3-marker", in: &data)
        try data.write(to: dataFile)
        let reopened = try LedgerStore(opening: directory.path("store"))
        let report = try reopened.replay()
        #expect(report.chainFault?.sequence == 1)
        #expect(report.chainFault?.through == 256)
        #expect(report.chainFault?.reason.contains("bytes changed") == true)
        #expect(report.verifiedRecords == 0)
        directory.remove()
    }

    @Test func openingRefusesAMissingOrWorldReadableKey() throws {
        _ = try newStore()
        defer { directory.remove() }
        let key = directory.path("store/ledger.key")
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: key.path)
        #expect(throws: LedgerStoreError.keyReadableByOthers(path: key.path, mode: 0o644)) {
            try LedgerStore(opening: directory.path("store"))
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key.path)
        _ = try LedgerStore(opening: directory.path("store"))
        try FileManager.default.removeItem(at: key)
        #expect(throws: LedgerStoreError.missingKey(path: key.path)) { try LedgerStore(opening: directory.path("store")) }
        #expect(throws: LedgerStoreError.notInitialized(directory: directory.path("nothing").path)) {
            try LedgerStore(opening: directory.path("nothing"))
        }
    }

    @Test func theKeyFileIsCreatedWithMode0600() throws {
        _ = try newStore()
        defer { directory.remove() }
        let attributes = try FileManager.default.attributesOfItem(atPath: directory.path("store/ledger.key").path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
    }

    @Test func aStoreOfANewerFormatIsRefused() throws {
        let store = try newStore()
        defer { directory.remove() }
        try store.lmdbEngine.withWriteAccess { access in
            var batch = EngineBatch()
            batch.meta = [(.formatVersion, u32Bytes(99))]
            try access.apply(batch)
        }
        #expect(throws: LedgerStoreError.newerFormat(found: 99, supported: LMDBEngine.recentFormatVersion)) {
            try LedgerStore(opening: directory.path("store"))
        }
    }

    @Test func theIdentityVaultSealsUIDsAndForgetsThemOnErase() throws {
        let store = try newStore()
        defer { directory.remove() }
        let uid = "firebase-uid-SECRET-1234"
        let issued = try store.issuePseudonym(forUID: uid, position: 1)
        try store.write { _, writer in
            var batch = EngineBatch()
            batch.vaultInserts = [(issued.vaultKey, issued.account, issued.sealedUID)]
            try writer.apply(batch)
        }
        #expect(try store.read { try store.pseudonym(ofUID: uid, in: $0) } == issued.account)
        #expect(try store.read { try store.uid(of: issued.account, in: $0) } == uid)
        #expect(try !Fixtures.anyFile(in: directory.url, contains: uid))
        try store.write { _, writer in
            var batch = EngineBatch()
            batch.vaultErasures = [(issued.vaultKey, issued.account)]
            try writer.apply(batch)
        }
        #expect(try store.read { try store.pseudonym(ofUID: uid, in: $0) } == nil)
        #expect(try store.read { try store.uid(of: issued.account, in: $0) } == nil)
        #expect(try store.issuePseudonym(forUID: uid, position: 1).account != issued.account)
    }

    /// The first byte of every `identities` key, in key order.
    static func identityPrefixes(_ store: LedgerStore) throws -> [UInt8] {
        try store.lmdbEngine.withWriteAccess { access in
            let cursor = try access.txn.cursor(access.db.identities)
            defer { cursor.close() }
            var prefixes: [UInt8] = []
            var entry = try cursor.get(MDB_FIRST)
            while let (key, _) = entry {
                prefixes.append(key[0])
                entry = try cursor.get(MDB_NEXT)
            }
            return prefixes
        }
    }

    /// A UID sealed as builds up to session 27 sealed it, stored without a layout byte: unbound
    /// (no associated data), ``SealedUID/legacy``.
    static func legacySeal(_ store: LedgerStore, _ uid: String) throws -> [UInt8] {
        try SealedBox.seal(Array(uid.utf8), key: store.keys.sealKey)
    }

    /// Every bound seal ever written authenticates this exact associated data: the label, a zero byte,
    /// the pseudonym's 16 bytes (docs/storage-format.md). A change would make every stored UID unreadable.
    @Test func aBoundSealsAssociatedDataIsTheLabelAZeroByteAndThePseudonym() {
        let account = AccountID(Key128(high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10))
        #expect(SealedUID.associatedData(account) == Array("ownership-ledger/identity-seal/pseudonym/v1".utf8) + [0] + Array(1...16))
    }

    @Test func sealedUIDsGrowAtTheVaultsEndAndThoseOfEarlierStoresStillReadAndErase() throws {
        let store = try newStore()
        defer { directory.remove() }
        // An identity as binaries up to 2505f95 stored it: its sealed UID (unbound) under `p` ‖ pseudonym.
        var earlier = try store.issuePseudonym(forUID: "uid-earlier", position: 1)
        earlier.sealedUID = try Self.legacySeal(store, "uid-earlier")
        try store.lmdbEngine.withWriteAccess { access in
            try KeyBuffer(LMDBAccess.vaultPrefix, earlier.vaultKey).with { k in
                try earlier.account.key.withBytes { v in try access.txn.put(access.db.identities, k, v) }
            }
            try KeyBuffer(LMDBAccess.earlierSealedPrefix, earlier.account.key).with { k in
                try earlier.sealedUID.withUnsafeBytes { v in try access.txn.put(access.db.identities, k, v) }
            }
        }
        // 60 new identities in three write groups, issued in descending order, two per position.
        var issued: [String: (account: AccountID, vaultKey: Key128, sealedUID: [UInt8])] = ["uid-earlier": earlier]
        for group in 0..<3 {
            try store.write { _, writer in
                var batch = EngineBatch()
                for index in (0..<20).reversed() {
                    let uid = "uid-\(group)-\(index)"
                    let identity = try store.issuePseudonym(forUID: uid, position: UInt64(10 + group * 20 + index / 2))
                    issued[uid] = identity
                    batch.vaultInserts.append((identity.vaultKey, identity.account, identity.sealedUID))
                }
                try writer.apply(batch)
            }
        }
        for (uid, identity) in issued {
            #expect(try store.read { try store.pseudonym(ofUID: uid, in: $0) } == identity.account)
            #expect(try store.read { try store.uid(of: identity.account, in: $0) } == uid)
        }
        var visited: [AccountID: (vaultKey: Key128, uid: String)] = [:]
        try store.read { reader in
            try reader.forEachIdentity { vaultKey, account, sealed in
                visited[account] = (vaultKey, try store.uid(sealed: sealed, of: account))
                return true
            }
        }
        #expect(visited.count == issued.count)
        for (uid, identity) in issued {
            #expect(visited[identity.account]?.vaultKey == identity.vaultKey && visited[identity.account]?.uid == uid)
        }
        // The earlier sealed UID stays where it was; every new one (bound, under `w`) is after every vault key.
        #expect(
            try Self.identityPrefixes(store) == [LMDBAccess.earlierSealedPrefix] + Array(repeating: LMDBAccess.vaultPrefix, count: 61)
                + Array(repeating: LMDBAccess.boundSealedPrefix, count: 60))
        #expect(try store.replay().vaultDifferences == [], "a legacy sealed UID under `p` is as consistent as a bound one under `w`")
        #expect(try store.replay().legacySealedUIDs == 1)

        let erased = ["uid-earlier", "uid-1-7"]
        try store.write { _, writer in
            var batch = EngineBatch()
            batch.vaultErasures = erased.compactMap { issued[$0] }.map { ($0.vaultKey, $0.account) }
            try writer.apply(batch)
        }
        for uid in erased {
            let identity = try #require(issued[uid])
            #expect(try store.read { try store.pseudonym(ofUID: uid, in: $0) } == nil)
            #expect(try store.read { try store.uid(of: identity.account, in: $0) } == nil)
        }
        #expect(
            try Self.identityPrefixes(store) == Array(repeating: LMDBAccess.vaultPrefix, count: 59)
                + Array(repeating: LMDBAccess.boundSealedPrefix, count: 59))
        #expect(try store.read { try store.uid(of: try #require(issued["uid-2-0"]).account, in: $0) } == "uid-2-0")
        #expect(try store.replay().vaultDifferences == [], "an erasure takes the entry and its sealed UID together")
    }

    /// The review's H1 done to `data.mdb` itself: the values of two `u` entries swapped (and, in
    /// turn, a `u` entry deleted, a `v` entry deleted, a key of no known kind). `verify` names the
    /// pseudonyms involved, and a lookup of either UID refuses instead of answering for the other's account.
    @Test func verifyAndLookupsFindVaultEntriesChangedInDataMDB() throws {
        let store = try newStore()
        defer { directory.remove() }
        // alice's sealed UID under `p`, as earlier binaries stored it; bob's and carol's under `v`.
        let uids = ["uid-alice", "uid-bob", "uid-carol"]
        // Legacy (unbound) seals, as those builds wrote them.
        let issued = try uids.enumerated().map { index, uid in
            var identity = try store.issuePseudonym(forUID: uid, position: UInt64(index + 1))
            identity.sealedUID = try Self.legacySeal(store, uid)
            return identity
        }
        func put(_ prefix: UInt8, _ key: Key128, _ value: [UInt8]) throws {
            try store.lmdbEngine.withWriteAccess { access in
                _ = try KeyBuffer(prefix, key).with { k in try value.withUnsafeBytes { v in try access.txn.put(access.db.identities, k, v) } }
            }
        }
        func delete(_ prefix: UInt8, _ key: Key128) throws {
            try store.lmdbEngine.withWriteAccess { access in _ = try KeyBuffer(prefix, key).with { try access.txn.delete(access.db.identities, $0) } }
        }
        for (index, identity) in issued.enumerated() {
            try put(LMDBAccess.vaultPrefix, identity.vaultKey, identity.account.bytes)
            try put(index == 0 ? LMDBAccess.earlierSealedPrefix : LMDBAccess.sealedPrefix, identity.account.key, identity.sealedUID)
        }
        #expect(try store.replay().vaultDifferences == [])
        let (alice, bob) = (issued[0], issued[1])

        try put(LMDBAccess.vaultPrefix, alice.vaultKey, bob.account.bytes)
        try put(LMDBAccess.vaultPrefix, bob.vaultKey, alice.account.bytes)
        let swapped =
            "the vault entry pointing to it is not its UID's (the UID sealed under it has another vault key): entries swapped, copied or changed"
        let report = try store.replay()
        #expect(!report.isIntact)
        #expect(
            Set(report.vaultDifferences) == [
                "pseudonym \(alice.account): \(swapped)", "pseudonym \(bob.account): \(swapped)",
                "pseudonym \(alice.account): the vault entry of the UID sealed under it points to another pseudonym, \(bob.account)",
                "pseudonym \(bob.account): the vault entry of the UID sealed under it points to another pseudonym, \(alice.account)",
            ], "\(report.vaultDifferences)")
        for uid in uids.prefix(2) {
            #expect(throws: (any Error).self, "\(uid)") { try store.read { try store.pseudonym(ofUID: uid, in: $0) } }
        }
        #expect(try store.read { try store.pseudonym(ofUID: "uid-carol", in: $0) } == issued[2].account)
        try put(LMDBAccess.vaultPrefix, alice.vaultKey, alice.account.bytes)
        try put(LMDBAccess.vaultPrefix, bob.vaultKey, bob.account.bytes)
        #expect(try store.replay().vaultDifferences == [])

        try delete(LMDBAccess.vaultPrefix, alice.vaultKey)
        #expect(
            try store.replay().vaultDifferences == [
                "pseudonym \(alice.account): no vault entry points to it: the UID sealed under it has none (removed, or this sealed UID left behind)"
            ])
        try put(LMDBAccess.vaultPrefix, alice.vaultKey, alice.account.bytes)
        try delete(LMDBAccess.sealedPrefix, bob.account.key)
        #expect(
            try store.replay().vaultDifferences == ["pseudonym \(bob.account): a vault entry points to it, but no UID is sealed under it"])
        #expect(throws: (any Error).self) { try store.read { try store.pseudonym(ofUID: "uid-bob", in: $0) } }
        try put(LMDBAccess.sealedPrefix, bob.account.key, bob.sealedUID)
        // A second sealed UID under alice's pseudonym (`v` beside her `p`), which no lookup reads.
        try put(LMDBAccess.sealedPrefix, alice.account.key, bob.sealedUID)
        #expect(try store.replay().vaultDifferences.contains { $0.hasPrefix("pseudonym \(alice.account): ") })
        try delete(LMDBAccess.sealedPrefix, alice.account.key)
        #expect(try store.replay().vaultDifferences == [])

        try store.lmdbEngine.withWriteAccess { access in
            _ = try [UInt8]([0x71, 1, 2]).withUnsafeBytes { k in
                try [UInt8]([3]).withUnsafeBytes { v in try access.txn.put(access.db.identities, k, v) }
            }
        }
        #expect(
            try store.replay().vaultDifferences == [
                "the identity vault cannot be read: an identities entry of no known kind (a 3-byte key beginning 71)"
            ])
    }

    @Test func pseudonymsStartWithTheirPositionAndAreRandomAfterIt() throws {
        let store = try newStore()
        defer { directory.remove() }
        let positions: [UInt64] = [1, 255, 256, 70_000, 1 << 40, (1 << 48) - 1]
        let issued = try positions.map { try store.issuePseudonym(forUID: "uid-\($0)", position: $0).account }
        for (position, account) in zip(positions, issued) {
            let expected: [UInt8] = withUnsafeBytes(of: position.bigEndian) { Array($0.suffix(6)) }
            #expect(Array(account.bytes.prefix(6)) == expected)
        }
        #expect(issued == issued.sorted())
        let again = try (0..<8).map { _ in try store.issuePseudonym(forUID: "uid-1", position: 1).account }
        #expect(Set(again.map { Array($0.bytes.suffix(10)) }).count == again.count)
        // Issued from one pool (as a write group does): the same layout, every pseudonym and nonce fresh.
        let pool = RandomPool(blockSize: 3 * LedgerStore.randomBytesPerPseudonym)
        let pooled = try (0..<50).map { _ in try store.issuePseudonym(forUID: "uid-1", position: 1, random: pool) }
        for issued in pooled { #expect(Array(issued.account.bytes.prefix(6)) == [0, 0, 0, 0, 0, 1]) }
        #expect(Set(pooled.map { Array($0.account.bytes.suffix(10)) }).count == pooled.count)
        #expect(Set(pooled.map { Array($0.sealedUID.prefix(12)) }).count == pooled.count)
        for issued in pooled { #expect(try store.uid(sealed: issued.sealedUID, of: issued.account) == "uid-1") }
    }

    @Test func lineageKeysAreKeyedHashesOfPlatformEnvironmentAndId() throws {
        let store = try newStore()
        defer { directory.remove() }
        let keys = store.keys
        let a = try keys.lineage(environment: "Production", originalTransactionId: "1000")
        #expect(try a == keys.lineage(environment: "Production", originalTransactionId: "1000"))
        #expect(try a != keys.lineage(environment: "Sandbox", originalTransactionId: "1000"))
        #expect(try a != keys.lineage(environment: "Production", originalTransactionId: "1001"))
        let other = try LedgerStore.create(at: directory.path("other"), configuration: [])
        #expect(try a != other.keys.lineage(environment: "Production", originalTransactionId: "1000"))
    }

    /// The keys are stored (and format 1's event ids carried over by `upgrade`): the exact bytes each
    /// one hashes are pinned here, against HMAC-SHA256 computed from the secret independently.
    @Test func keysHashExactlyTheirDocumentedMessages() throws {
        let secret = [UInt8](repeating: 7, count: 32)
        let keys = try LedgerKeys(secret: secret)
        func expected(_ label: String, _ message: String) throws -> Key128 {
            let derived = try Digest.hmacSHA256(key: secret, message: Array(label.utf8))
            return try Digest.hmacSHA256(key: derived, message: Array(message.utf8)).withUnsafeBytes { Key128(loading: $0, at: 0) }
        }
        #expect(try keys.lineage(environment: "Production", originalTransactionId: "1000").key == expected("lineage", "apple|Production|1000"))
        #expect(try keys.transaction(environment: "Sandbox", transactionId: "42") == expected("transaction", "apple|Sandbox|42"))
        #expect(try keys.vaultKey(uid: "uid-é") == expected("identity-vault", "uid-é"))
        #expect(try keys.command("support|roster-change|ab") == expected("event-id", "support|roster-change|ab#0"))
        let described = try keys.command(describedBy: "transaction", "purchase", "uid-é", "Production", "42", "", "1700")
        #expect(try described == expected("event-id", "11:transaction8:purchase6:uid-é10:Production2:420:4:1700#0"))
        #expect(try described == keys.command("11:transaction8:purchase6:uid-é10:Production2:420:4:1700"))
    }
}

@Suite struct LMDBEnvironmentTests {
    /// Many small transactions in a tiny map: the map fills both while writing and while
    /// committing (LMDB frees a transaction whose commit fails; it must not be aborted again).
    @Test func smallTransactionsGrowATinyMapWithoutLosingAWrite() throws {
        let directory = TemporaryDirectory("lmdb-grow")
        defer { directory.remove() }
        let environment = try LMDBEnvironment(path: directory.url.path, databaseNames: ["a", "b"], initialMapSize: 32 << 10)
        let start = environment.mapSize
        for index in 0..<3_000 {
            try environment.write { txn in
                try txn.put("a", u64Bytes(UInt64(index)), [UInt8](repeating: UInt8(index & 0xFF), count: 200))
                try txn.put("b", Array("key-\(index)".utf8), u64Bytes(UInt64(index)))
            }
        }
        #expect(environment.mapSize > start * 8)
        let (entries, last) = try environment.read { txn in
            (try txn.statistics("a").entries, try txn.get("b", Array("key-2999".utf8)))
        }
        #expect(entries == 3_000)
        #expect(last == u64Bytes(2_999))
    }
}

@Suite struct ReadModelRepairTests {
    /// A persisted read model that no longer matches the log is reported by verify and rebuild,
    /// and rebuild replaces it with the replayed one.
    @Test func rebuildReportsAndRepairsADifferingReadModel() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let t = Fixtures.start
        _ = try ledger.submit(.transaction(.purchase, uid: "alice", try Fixtures.payload(Fixtures.transaction("1", at: t)), .trustedDecoded), at: t)
        let lineage = try ledger.lineage(originalTransactionId: "1")
        // Rewrite the lineage's persisted state as unbound, behind the ledger's back.
        try ledger.store.lmdbEngine.withWriteAccess { try $0.putReadModels([(ReadModel.lineageKey(lineage), [0])]) }
        let damaged = try ledger.store.replay()
        #expect(damaged.chainFault == nil)
        #expect(damaged.readModelDifferences == ["lineage \(lineage): persisted and replayed values differ"])
        #expect(!damaged.isIntact)
        let checked = try ledger.store.rebuildReadModels(repair: false)
        #expect(checked.readModelDifferences.count == 1)
        #expect(try ledger.store.replay().readModelDifferences.count == 1, "--check changes nothing")
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
        #expect(try ledger.binding(originalTransactionId: "1").uid == "alice")
    }
}

@Suite struct WrongKeyTests {
    @Test func openingWithAnotherStoresKeyIsRefused() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        _ = try LedgerStore.create(at: directory.path("a"), configuration: [])
        _ = try LedgerStore.create(at: directory.path("b"), configuration: [])
        let key = directory.path("a/ledger.key")
        try FileManager.default.removeItem(at: key)
        try FileManager.default.copyItem(at: directory.path("b/ledger.key"), to: key)
        #expect(throws: LedgerStoreError.wrongKey(path: key.path)) { try LedgerStore(opening: directory.path("a")) }
    }
}

@Suite struct ForeignStoreTests {
    /// Another program's LMDB store, or an emptied data.mdb, is refused and left unchanged by both
    /// `init` and opening.
    @Test func aForeignOrEmptyDataFileIsRefusedAndLeftUnchanged() throws {
        let directory = TemporaryDirectory("foreign")
        defer { directory.remove() }
        let foreign = directory.path("foreign")
        try FileManager.default.createDirectory(at: foreign, withIntermediateDirectories: true)
        do {
            let environment = try LMDBEnvironment(path: foreign.path, databaseNames: ["foo"], initialMapSize: 1 << 20)
            try environment.write { txn in try txn.put("foo", [1], [2]) }
        }
        let before = try Data(contentsOf: foreign.appendingPathComponent("data.mdb"))
        let store = foreign.path
        let opened = try LedgerBinary.run(["verify", "--store", store])
        #expect(opened.status == 3, "no key file, no ledger: \(opened.stderr)")
        // With a key file beside it, opening reaches the data file and still changes nothing.
        _ = try LedgerKeys.create(at: foreign.appendingPathComponent(LedgerKeys.fileName))
        let withKey = try LedgerBinary.run(["verify", "--store", store])
        #expect(withKey.status == 3)
        #expect(withKey.stderr.contains("no ledger metadata"), "\(withKey.stderr)")
        #expect(try Data(contentsOf: foreign.appendingPathComponent("data.mdb")) == before)
        try FileManager.default.removeItem(at: foreign.appendingPathComponent(LedgerKeys.fileName))
        let created = try LedgerBinary.run(["init", "--store", store, "--bundle-id", "a", "--environment", "Sandbox"])
        #expect(created.status == 3)
        #expect(created.stderr.contains("not a ledger"), "\(created.stderr)")
        #expect(try Data(contentsOf: foreign.appendingPathComponent("data.mdb")) == before)

        let emptied = directory.path("emptied")
        _ = try LedgerStore.create(at: emptied, configuration: [])
        try Data().write(to: emptied.appendingPathComponent("data.mdb"))
        let verify = try LedgerBinary.run(["verify", "--store", emptied.path])
        #expect(verify.status == 3)
        #expect(verify.stderr.contains("restore data.mdb"), "\(verify.stderr)")
        #expect(try Data(contentsOf: emptied.appendingPathComponent("data.mdb")).isEmpty)
    }
}
