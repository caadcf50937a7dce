import Foundation
import LedgerCore
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerStore

/// `verify --checkpoint` of a store upgraded from format 1 (`Tests/Fixtures/format1`): what a
/// format-1 checkpoint proves about it (the format-1 log only, unless the format-1 store is given to
/// check the copied records against), and that the new store's own checkpoints are judged by their
/// own size and root.
@Suite struct UpgradedCheckpointTests {
    let directory = TemporaryDirectory("ledger-upgraded-checkpoint")
    var formatOneCheckpoint: String { FormatOneFixture.directory.appendingPathComponent("checkpoint.txt").path }
    var publicKey: String { FormatOneFixture.directory.appendingPathComponent("signing.pub").path }

    /// The fixture copied to `old` and upgraded into `new`.
    func upgraded() throws -> (old: URL, new: URL) {
        let old = directory.path("old")
        let new = directory.path("new")
        try FormatOneFixture.copyStore(to: old)
        _ = try FormatOneUpgrade.upgrade(from: old, to: new, clock: { 1_800_000_000_000 })
        return (old, new)
    }

    /// The pseudonyms of bob (whose restore of alice's subscription was denied) and erin.
    func bobAndErin(_ store: URL) throws -> (bob: [UInt8], erin: [UInt8]) {
        let ledger = try Ledger(opening: store)
        return try ledger.store.read { reader in
            let bob = try #require(try ledger.store.pseudonym(ofUID: "bob", in: reader))
            let erin = try #require(try ledger.store.pseudonym(ofUID: "erin", in: reader))
            return (bob.bytes, erin.bytes)
        }
    }

    func verify(_ store: URL, checkpoint: String, formatOneStore: URL? = nil) throws -> LedgerBinary.Result {
        try LedgerBinary.run(
            ["verify", "--store", store.path, "--checkpoint", checkpoint, "--public-key", publicKey]
                + (formatOneStore.map { ["--format-one-store", $0.path] } ?? []))
    }

    /// A format-1 checkpoint proves the format-1 log, which record 1 names; on its own it says nothing
    /// about the records the upgrade copied, so it is not reported as verified. With the format-1
    /// store, each copied record is checked against the re-encoding of its format-1 records.
    @Test func aFormatOneCheckpointCoversTheCopiedRecordsOnlyWithTheFormatOneStore() throws {
        defer { directory.remove() }
        let (old, new) = try upgraded()

        let alone = try verify(new, checkpoint: formatOneCheckpoint)
        #expect(alone.status == 1, "\(alone.stdout)")
        let report = alone.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(report["formatOneOrigin"] as? Bool == true)
        #expect(report["formatOneCopies"] as? String == "not-checked", "\(report)")
        #expect(report["verified"] as? Bool == false && report["consistent"] as? Bool == false)
        #expect(report["signatureVerified"] as? Bool == true)
        let problems = report["problems"] as? [String] ?? []
        #expect(problems.count == 1 && problems[0].contains("records 2 to 23 are not covered"), "\(problems)")
        #expect(problems.first?.contains("--format-one-store") == true)
        #expect(alone.json["intact"] as? Bool == false)

        let checked = try verify(new, checkpoint: formatOneCheckpoint, formatOneStore: old)
        #expect(checked.status == 0, "\(checked.stdout) \(checked.stderr)")
        let full = checked.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(full["formatOneOrigin"] as? Bool == true && full["formatOneCopies"] as? String == "match", "\(full)")
        #expect(full["verified"] as? Bool == true && full["consistent"] as? Bool == true)
        #expect(checked.json["intact"] as? Bool == true)

        // What is not the format-1 store: exit 3, naming it.
        for (given, why) in [
            (directory.path("missing"), "it holds no ledger"), (new, "it is in use"), (directory.path("other"), "is a format-3 store"),
        ] {
            if given.lastPathComponent == "other" {
                #expect(
                    try LedgerBinary.run(["init", "--store", given.path, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]).status == 0)
            }
            let refused = try verify(new, checkpoint: formatOneCheckpoint, formatOneStore: given)
            #expect(refused.status == 3, "\(refused.stdout)")
            #expect(refused.stderr.contains("the format-1 store \(given.path) cannot be used: ") && refused.stderr.contains(why), "\(refused.stderr)")
        }

        // The same through the library.
        let text = String(decoding: try FormatOneFixture.file("checkpoint.txt"), as: UTF8.self)
        let ledger = try Ledger(opening: new)
        let bare = try ledger.verifyCheckpoint(text)
        #expect(!bare.verified && bare.formatOneOrigin && bare.formatOneCopies == .notChecked && !bare.consistent)
        let covered = try ledger.verifyCheckpoint(text, formatOneStore: old)
        #expect(covered.verified && covered.formatOneOrigin && covered.formatOneCopies == .match && covered.consistent, "\(covered.problems)")
    }

    /// H2: a record the upgrade copied is rewritten (bob's denied restore becomes erin's) and the
    /// chain, head and Merkle nodes recomputed. The format-1 checkpoint does not vouch for it, and the
    /// format-1 store names the record.
    @Test func aCopiedRecordRewrittenAfterTheUpgradeIsNotVerified() throws {
        defer { directory.remove() }
        let (old, new) = try upgraded()
        let (bob, erin) = try bobAndErin(new)
        let forged = directory.path("forged")
        var rewritten: [UInt64] = []
        try Self.forge(new, to: forged) { sequence, bytes in
            guard let found = bytes.firstRange(of: bob) else { return bytes }
            rewritten.append(sequence)
            var changed = bytes
            changed.replaceSubrange(found, with: erin)
            return changed
        }
        #expect(rewritten.count == 1 && rewritten[0] > 1, "\(rewritten)")
        let plain = try LedgerBinary.run(["verify", "--store", forged.path])
        #expect(plain.status == 0, "the forged store is internally consistent: \(plain.stdout)")

        let alone = try verify(forged, checkpoint: formatOneCheckpoint)
        #expect(alone.status == 1, "\(alone.stdout)")
        let report = alone.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(report["verified"] as? Bool == false, "\(report)")
        #expect(report["formatOneCopies"] as? String == "not-checked")
        #expect(alone.json["intact"] as? Bool == false)

        let checked = try verify(forged, checkpoint: formatOneCheckpoint, formatOneStore: old)
        #expect(checked.status == 1, "\(checked.stdout)")
        let full = checked.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(full["verified"] as? Bool == false && full["formatOneCopies"] as? String == "differ", "\(full)")
        #expect(full["firstBadSeq"] as? Int == Int(rewritten[0]))
        #expect(checked.json["firstBadSeq"] as? Int == Int(rewritten[0]))
        let problems = full["problems"] as? [String] ?? []
        #expect(problems.contains { $0.contains("record \(rewritten[0]) is not the re-encoding of format-1 records 11 to 12") }, "\(problems)")

        let text = String(decoding: try FormatOneFixture.file("checkpoint.txt"), as: UTF8.self)
        let library = try Ledger(opening: forged).verifyCheckpoint(text, formatOneStore: old)
        #expect(!library.verified && library.formatOneCopies == .differ && library.firstBadSeq == rewritten[0] && !library.consistent)
    }

    /// M1: the new store's own checkpoints (fresh, and inside a dispute bundle and an evidence file
    /// exported from it) are smaller than the format-1 log, and verify by their own size and root.
    @Test func checkpointsOfTheUpgradedStoreVerifyThoughSmallerThanTheFormatOneLog() throws {
        defer { directory.remove() }
        let (_, new) = try upgraded()
        let fresh = directory.path("fresh.txt").path
        let made = try LedgerBinary.run(["checkpoint", "--store", new.path, "--out", fresh])
        #expect(made.status == 0 && made.json["size"] as? Int == 23, "\(made.stdout) \(made.stderr)")

        let bundle = directory.path("bundle.json").path
        let exported = try LedgerBinary.run([
            "dispute", "export", "--store", new.path, "--original-transaction-id", FormatOneFixture.transferredLineage, "--out", bundle,
        ])
        #expect(exported.status == 0, "\(exported.stderr)")
        let evidence = directory.path("evidence.json").path
        let gathered = try LedgerBinary.run(["evidence", "--store", new.path, "--out", evidence])
        #expect(gathered.status == 1, "incomplete (trusted-decoded facts never count), written anyway: \(gathered.stderr)")
        var checkpoints = [fresh]
        for (name, file) in [("bundle", bundle), ("evidence", evidence)] {
            let object = Fixtures.object(String(decoding: try Data(contentsOf: URL(fileURLWithPath: file)), as: UTF8.self))
            let text = try #require(object["checkpoint"] as? String)
            let path = directory.path("\(name)-checkpoint.txt").path
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            checkpoints.append(path)
        }
        for checkpoint in checkpoints {
            let result = try verify(new, checkpoint: checkpoint)
            #expect(result.status == 0, "\(checkpoint): \(result.stdout)")
            let report = result.json["checkpoint"] as? [String: Any] ?? [:]
            #expect(report["verified"] as? Bool == true && report["rootMatches"] as? Bool == true, "\(checkpoint): \(report)")
            #expect(report["formatOneOrigin"] as? Bool == false && report["formatOneCopies"] == nil)
            #expect((report["projections"] as? [[String: Any]])?.first?["status"] as? String == "matches")
            #expect(result.json["intact"] as? Bool == true)
        }
    }

    /// L2: the format-1 log was rewritten (bob's records become erin's, the format-1 chain recomputed)
    /// before the upgrade, which checks only that chain. The format-1 checkpoint then disagrees with
    /// the root record 1 names, which the report says instead of "records were removed".
    @Test func aFormatOneLogRewrittenBeforeTheUpgradeIsNamed() throws {
        defer { directory.remove() }
        let (genuineOld, genuineNew) = try upgraded()
        let (bob, erin) = try bobAndErin(genuineNew)
        let old = directory.path("old-rewritten")
        let new = directory.path("new-rewritten")
        try FormatOneFixture.copyStore(to: old)
        #expect(try Self.rewriteFormatOne(old, replacing: bob, with: erin) == [11, 12])
        let upgrade = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", new.path])
        #expect(upgrade.status == 0, "nothing anchors a format-1 log but its checkpoints: \(upgrade.stderr)")

        let alone = try verify(new, checkpoint: formatOneCheckpoint)
        #expect(alone.status == 1, "\(alone.stdout)")
        let report = alone.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(report["verified"] as? Bool == false && report["formatOneOrigin"] as? Bool == false)
        let problems = report["problems"] as? [String] ?? []
        #expect(!problems.contains { $0.contains("records were removed") }, "\(problems)")
        #expect(
            problems.contains { $0.contains("record 1 names") && $0.contains("the format-1 log was rewritten before the upgrade") },
            "\(problems)")

        // The rewritten format-1 store does not hash to the checkpoint's root either; the genuine one
        // is not the log record 1 names.
        let withOld = try verify(new, checkpoint: formatOneCheckpoint, formatOneStore: old)
        #expect(withOld.status == 1, "\(withOld.stdout)")
        let oldProblems = (withOld.json["checkpoint"] as? [String: Any])?["problems"] as? [String] ?? []
        #expect(oldProblems.contains { $0.contains("the format-1 store's first 54 records do not hash to the checkpoint's root") }, "\(oldProblems)")
        let withGenuine = try verify(new, checkpoint: formatOneCheckpoint, formatOneStore: genuineOld)
        #expect(withGenuine.status == 1, "\(withGenuine.stdout)")
        let genuine = withGenuine.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(genuine["formatOneOrigin"] as? Bool == false && genuine["formatOneCopies"] as? String == "differ", "\(genuine)")
        #expect(genuine["firstBadSeq"] as? Int == 1)
        #expect((genuine["problems"] as? [String] ?? []).contains { $0.contains("record 1 names a format-1 log") }, "\(genuine)")
    }

    /// A format-1 checkpoint signed before the format-1 log reached its final size: only the format-1
    /// store can check it.
    @Test func anEarlierFormatOneCheckpointIsCheckedAgainstTheFormatOneStore() throws {
        defer { directory.remove() }
        let (old, new) = try upgraded()
        let stored = try Self.formatOneRecords(old)
        let size = 30
        let root = try MerkleTree.root(leafHashes: stored.prefix(size).map(MerkleTree.leafHash))
        let ledger = try Ledger(opening: new)
        let key = try ledger.signer()
        let origin = try Forensics.origin(for: key.publicKey)
        let text = try Checkpoint(origin: origin, size: UInt64(size), rootHash: root).signed(by: key, keyName: origin)
        let file = directory.path("earlier.txt").path
        try text.write(toFile: file, atomically: true, encoding: .utf8)

        let alone = try verify(new, checkpoint: file)
        #expect(alone.status == 1, "\(alone.stdout)")
        let problems = (alone.json["checkpoint"] as? [String: Any])?["problems"] as? [String] ?? []
        #expect(problems.contains { $0.contains("upgraded from a format-1 log of 54 records") && $0.contains("--format-one-store") }, "\(problems)")

        let checked = try verify(new, checkpoint: file, formatOneStore: old)
        #expect(checked.status == 0, "\(checked.stdout)")
        let report = checked.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(report["formatOneOrigin"] as? Bool == true && report["formatOneCopies"] as? String == "match", "\(report)")
    }

    /// A format-1 store whose own chain is broken (a byte changed in place) is reported, not compared.
    @Test func aFormatOneStoreWhoseChainIsBrokenIsReported() throws {
        defer { directory.remove() }
        let (old, new) = try upgraded()
        let dataFile = old.appendingPathComponent("data.mdb")
        var bytes = try Data(contentsOf: dataFile)
        let found = try #require(bytes.range(of: Data("com.myrecipes.premium.monthly".utf8)))
        bytes[found.lowerBound + 14] = UInt8(ascii: "P")
        try bytes.write(to: dataFile)
        let result = try verify(new, checkpoint: formatOneCheckpoint, formatOneStore: old)
        #expect(result.status == 1, "\(result.stdout)")
        let report = result.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(report["formatOneOrigin"] as? Bool == true && report["formatOneCopies"] as? String == "differ", "\(report)")
        let problems = report["problems"] as? [String] ?? []
        #expect(problems.count == 1 && problems[0].hasPrefix("the format-1 store: format-1 record "), "\(problems)")
        #expect(problems.first?.contains("the old chain does not verify") == true)
    }

    // MARK: Tampering helpers

    /// A copy of the store in `source` in `target` whose records are `transform`ed, with the chain,
    /// head and Merkle nodes recomputed, the identity vault copied, and the read models and indexes
    /// rebuilt: what an operator with write access to the store can make.
    static func forge(_ source: URL, to target: URL, _ transform: (UInt64, [UInt8]) -> [UInt8]) throws {
        let (records, configuration, identities) = try {
            let ledger = try Ledger(opening: source)
            return try ledger.store.read { reader in
                var records: [[UInt8]] = []
                try reader.forEachRecord(from: 1, through: .max) { _, bytes in
                    records.append(Array(bytes))
                    return true
                }
                var identities: [(vaultKey: Key128, account: AccountID, sealedUID: [UInt8])] = []
                try reader.forEachIdentity { key, account, sealed in
                    identities.append((key, account, sealed))
                    return true
                }
                return (records, try reader.meta(.configuration) ?? [], identities)
            }
        }()
        let keys = LedgerStore.KeyFiles(
            ledgerKey: try Data(contentsOf: source.appendingPathComponent("ledger.key")),
            signingKey: try Data(contentsOf: source.appendingPathComponent("ledger-signing.key")))
        let store = try LedgerStore.create(at: target, configuration: configuration, keyFiles: keys)
        try store.write { _, writer in
            var appender = try LogAppender(head: LogHead())
            for (offset, bytes) in records.enumerated() { try appender.append(stored: transform(UInt64(offset + 1), bytes)) }
            var batch = appender.batch
            batch.vaultInserts = identities
            try writer.apply(batch)
        }
        _ = try store.replay(repair: true)
    }

    /// The stored bytes of a format-1 store's log records, in order.
    static func formatOneRecords(_ store: URL) throws -> [[UInt8]] {
        let environment = try LMDBEnvironment(path: store.path, databaseNames: FormatOneSource.databases, mode: .readOnly(required: "meta"))
        var records: [[UInt8]] = []
        try environment.read { txn in
            try txn.scan("log", from: []) { _, value in
                records.append(value)
                return true
            }
        }
        return records
    }

    /// Replaces `old` by `new` (as many bytes) in every format-1 record that holds it, then recomputes
    /// every record's previous hash and hash and the head hash, as a rewriter with write access can.
    /// Returns the rewritten sequence numbers.
    static func rewriteFormatOne(_ store: URL, replacing old: [UInt8], with new: [UInt8]) throws -> [UInt64] {
        let previousHashOffset = 1 + 8 + 8 + 32 + 2
        let environment = try LMDBEnvironment(path: store.path, databaseNames: FormatOneSource.databases, mode: .open(required: "meta"))
        return try environment.write { txn in
            var records: [([UInt8], [UInt8])] = []
            try txn.scan("log", from: []) { key, value in
                records.append((key, value))
                return true
            }
            var rewritten: [UInt64] = []
            var previous = [UInt8](repeating: 0, count: 32)
            for (index, (key, value)) in records.enumerated() {
                var bytes = value
                if let found = bytes.dropLast(32).firstRange(of: old) {
                    bytes.replaceSubrange(found, with: new)
                    rewritten.append(UInt64(index + 1))
                }
                bytes.replaceSubrange(previousHashOffset..<previousHashOffset + 32, with: previous)
                let hash = try Digest.sha256(previous, Array(bytes.dropLast(32)))
                bytes.replaceSubrange(bytes.count - 32..<bytes.count, with: hash)
                try txn.put("log", key, bytes)
                previous = hash
            }
            try txn.put("meta", Array("head-hash".utf8), previous)
            return rewritten
        }
    }
}
