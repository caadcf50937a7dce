import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

@Suite struct ForensicsTests {
    let directory = TemporaryDirectory("ledger-forensics")
    var store: String { directory.path("store").path }
    /// Business times start now: records made through the binary are recorded by the real clock, and
    /// every point-in-time tool cuts on that (`recordedAt`), so the tests cut between submissions.
    let t = LedgerTime.now() / 1000 * 1000
    let day = Fixtures.day
    let hour: Int64 = 3_600_000

    func ledger(_ arguments: [String], stdin: String = "") throws -> LedgerBinary.Result {
        try LedgerBinary.run(arguments + ["--store", store], stdin: stdin)
    }

    func initStore() throws {
        let result = try ledger(["init", "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    @discardableResult
    func submit(_ lines: [[String: Any]]) throws -> [[String: Any]] {
        let result = try ledger(["submit", "--trust-decoded"], stdin: lines.map(Fixtures.line).joined(separator: "\n") + "\n")
        #expect(result.status == 0, "\(result.stderr)")
        return result.lines.map(Fixtures.object)
    }

    func iso(_ ms: Int64) -> String { LedgerTime.format(ms) }

    /// The ledger clock now, once every record so far is recorded before it (a cut between records).
    func cut() -> Int64 {
        usleep(3_000)
        defer { usleep(3_000) }
        return LedgerTime.now()
    }

    /// Purchase by alice (t), denied restore by bob (t+1d), carol buys 2001, alice deleted (t+2d),
    /// denied restore by bob on the tombstone (t+3d): records 1 to 5, each submitted alone. Returns
    /// the ledger-clock times before record 1 and after each record.
    @discardableResult
    func disputedHistory() throws -> [Int64] {
        try initStore()
        var cuts = [cut()]
        var decisions: [[String: Any]] = []
        for line in [
            ["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1001", at: t), "at": t],
            ["type": "restore", "account": "bob", "transaction": Fixtures.transaction("1001", at: t + day), "at": t + day],
            ["type": "purchase", "account": "carol", "transaction": Fixtures.transaction("2001", at: t), "at": t + day],
            ["type": "delete-account", "account": "alice", "at": t + 2 * day],
            ["type": "restore", "account": "bob", "transaction": Fixtures.transaction("1001", at: t + 3 * day), "at": t + 3 * day],
        ] as [[String: Any]] {
            decisions += try submit([line])
            cuts.append(cut())
        }
        #expect(decisions.map { $0["decision"] as? String } == ["granted", "denied", "granted", "recorded", "denied"])
        #expect(decisions.map { $0["seq"] as? Int } == [1, 2, 3, 4, 5])
        return cuts
    }

    // MARK: Replay

    @Test func timelineShowsEachDecisionAndTheStateAfterIt() throws {
        defer { directory.remove() }
        let cuts = try disputedHistory()
        let replay = try ledger(["replay", "--original-transaction-id", "1001"])
        #expect(replay.status == 0, "\(replay.stderr)")
        let steps = replay.lines.map(Fixtures.object)
        #expect(steps.map { $0["seq"] as? Int } == [1, 2, 4, 5])
        #expect(steps.map { $0["seqs"] as? [Int] ?? [] } == [[1], [2], [4], [5]])
        #expect(
            steps.map { $0["event"] as? String } == [
                "transaction-submitted", "transaction-submitted", "account-deletion-requested", "transaction-submitted",
            ])
        #expect(steps.map { $0["decision"] as? String } == ["granted", "denied", "recorded", "denied"])
        #expect(steps.map { $0["code"] as? String } == ["ok", "permission-denied", "ok", "permission-denied"])
        #expect(steps.map { $0["binding"] as? String } == ["bound", "bound", "tombstoned", "tombstoned"])
        #expect(steps.map { $0["entitled"] as? Bool } == [true, true, false, false])
        #expect(steps.map { $0["at"] as? String } == [iso(t), iso(t + day), iso(t + 2 * day), iso(t + 3 * day)])
        // `time` is when the ledger recorded each step: between the cuts around it.
        for (step, (before, after)) in zip(steps, [(cuts[0], cuts[1]), (cuts[1], cuts[2]), (cuts[3], cuts[4]), (cuts[4], cuts[5])]) {
            let time = LedgerTime.parse(step["time"] as? String ?? "") ?? 0
            #expect(before < time && time < after)
        }
        // The denied restore moved nothing: the owner before and after it is the same pseudonym.
        let owner = steps[0]["account"] as? String
        #expect(owner != nil && steps[1]["account"] as? String == owner)
        #expect(steps[2]["formerAccount"] as? String == owner)
        #expect((steps[1]["why"] as? String)?.contains("since seq 1") == true)
        #expect((steps[2]["why"] as? String)?.contains("tombstone (seq 4)") == true)
        #expect((steps[3]["why"] as? String)?.contains("tombstone at seq 4") == true)
        #expect(steps[2]["effects"] as? [String] == ["entitlement-ended@4", "lineage-tombstoned@4", "account-deleted@4"])
        #expect((steps[2]["entitlement"] as? [String: Any])?["ended"] as? String == "account-deleted")
        // Carol's purchase (record 3) is another lineage and does not appear.
        #expect(!steps.contains { ($0["seqs"] as? [Int] ?? []).contains(3) })

        let untilSeq = try ledger(["replay", "--original-transaction-id", "1001", "--until", "2"])
        #expect(untilSeq.lines.map { Fixtures.object($0)["seq"] as? Int } == [1, 2])
        let untilTime = try ledger(["replay", "--original-transaction-id", "1001", "--until", iso(cuts[4])])
        #expect(untilTime.lines.map { Fixtures.object($0)["seq"] as? Int } == [1, 2, 4])
        let before = try ledger(["replay", "--original-transaction-id", "1001", "--until", iso(cuts[0])])
        #expect(before.status == 0 && before.lines.isEmpty)
        let text = try ledger(["replay", "--original-transaction-id", "1001", "--text"])
        #expect(text.lines.count == 5)
        #expect(text.lines.first?.hasPrefix("SEQ") == true)
        #expect(text.lines[2].hasPrefix("2 ") && text.lines[2].contains("denied"))
        let bad = try ledger(["replay", "--original-transaction-id", "1001", "--until", "yesterday"])
        #expect(bad.status == 2)
        for signed in ["+2", " 2", "-2"] {
            let refused = try ledger(["replay", "--original-transaction-id", "1001", "--until", signed])
            #expect(refused.status == 2 && refused.stderr.contains("is neither a sequence number"), "\(signed): \(refused.stderr)")
        }
    }

    /// `binding --at`, `account --at` and `explain --at` before and after each record: all cut on
    /// when the ledger recorded it.
    @Test func atBeforeAndAfterEachStep() throws {
        defer { directory.remove() }
        let cuts = try disputedHistory()
        func binding(_ at: Int64) throws -> [String: Any] {
            try ledger(["binding", "--original-transaction-id", "1001", "--at", iso(at)]).json
        }
        func active(_ uid: String, _ at: Int64) throws -> [Bool] {
            let entitlements = try ledger(["account", "--uid", uid, "--at", iso(at)]).json["entitlements"] as? [[String: Any]] ?? []
            return entitlements.map { $0["active"] as? Bool ?? false }
        }
        // Before the purchase / after it.
        #expect(try binding(cuts[0])["state"] as? String == "unbound")
        #expect(try binding(cuts[1])["state"] as? String == "bound")
        // Alice's UID was erased with her account, so the past owner shows as a pseudonym only.
        #expect(try binding(cuts[1])["account"] is NSNull)
        #expect(try (binding(cuts[1])["entitlement"] as? [String: Any])?["active"] as? Bool == true)
        #expect(try active("alice", cuts[1]) == [])
        // Before / after the denied restore: nothing moved.
        #expect(try binding(cuts[2])["state"] as? String == "bound")
        #expect(try active("bob", cuts[1]) == [])
        #expect(try active("bob", cuts[2]) == [])
        // Carol (a live account) before / after her purchase.
        #expect(try active("carol", cuts[2]) == [])
        #expect(try active("carol", cuts[3]) == [true])
        // Before / after the deletion.
        #expect(try binding(cuts[3])["state"] as? String == "bound")
        #expect(try binding(cuts[4])["state"] as? String == "tombstoned")
        #expect(try binding(cuts[4])["account"] is NSNull)
        // After the denied restore on the tombstone.
        #expect(try binding(cuts[5])["state"] as? String == "tombstoned")
        #expect(try active("bob", cuts[5]) == [])

        // explain --at tracks the same steps for bob.
        func verdict(_ uid: String, _ otid: String, _ at: Int64) throws -> String? {
            try ledger(["explain", "--uid", uid, "--original-transaction-id", otid, "--at", iso(at)]).json["verdict"] as? String
        }
        #expect(try (0...5).map { try verdict("bob", "1001", cuts[$0]) } == ["never-seen", "denied", "denied", "denied", "tombstoned", "tombstoned"])
    }

    @Test func explainEntitledDeniedTombstonedExpiredAndNeverSeen() throws {
        defer { directory.remove() }
        let cuts = try disputedHistory()
        func explain(_ uid: String, _ otid: String, _ at: Int64) throws -> [String: Any] {
            let result = try ledger(["explain", "--uid", uid, "--original-transaction-id", otid, "--at", iso(at)])
            #expect(result.status == 0, "\(result.stderr)")
            return result.json
        }
        let entitled = try explain("carol", "2001", cuts[3])
        #expect(entitled["verdict"] as? String == "entitled")
        #expect(entitled["entitled"] as? Bool == true)
        #expect(entitled["citedSequences"] as? [Int] == [3])
        #expect((entitled["explanation"] as? String)?.contains("seq 3") == true)

        let denied = try explain("bob", "1001", cuts[3])
        #expect(denied["verdict"] as? String == "denied")
        #expect(denied["entitled"] as? Bool == false)
        #expect(denied["citedSequences"] as? [Int] == [1, 2])
        #expect((denied["explanation"] as? String)?.contains("denied at seq 2") == true)

        let tombstoned = try explain("bob", "1001", cuts[5])
        #expect(tombstoned["verdict"] as? String == "tombstoned")
        #expect(tombstoned["citedSequences"] as? [Int] == [2, 4, 5])
        // The deleted account's UID is gone from the vault: the explanation says so.
        let deleted = try explain("alice", "1001", cuts[5])
        #expect(deleted["verdict"] as? String == "tombstoned")
        #expect((deleted["explanation"] as? String)?.contains("No live account has this UID") == true)

        let expired = try explain("carol", "2001", t + 40 * day)
        #expect(expired["verdict"] as? String == "expired")
        #expect(expired["entitled"] as? Bool == false)
        let never = try explain("carol", "9999", cuts[5])
        #expect(never["verdict"] as? String == "never-seen")
    }

    @Test func explainRevokedAndNotBoundThroughTheLibrary() throws {
        let t = Fixtures.start
        let clock = ManualClock(t)
        let (ledger, directory) = try Fixtures.ledger(clock: clock.function)
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        _ = submit.respond(
            to: Fixtures.line(["type": "purchase", "account": "dave", "transaction": Fixtures.transaction("4001", at: t), "at": t]))
        clock.now = t + day
        _ = submit.respond(
            to: Fixtures.line([
                "type": "notification",
                "notification": Fixtures.notification(
                    "REFUND", uuid: "r1", transaction: Fixtures.transaction("4001", at: t, revokedAt: t + day), at: t + day),
                "at": t + day,
            ]))
        _ = submit.respond(
            to: Fixtures.line([
                "type": "purchase", "account": "erin", "transaction": Fixtures.transaction("5001", at: t, ownership: "FAMILY_SHARED"), "at": t,
            ]))
        let before = try ledger.explain(uid: "dave", originalTransactionId: "4001", at: t + hour)
        #expect(before.verdict == .entitled)
        let revoked = try ledger.explain(uid: "dave", originalTransactionId: "4001", at: t + 2 * day)
        #expect(revoked.verdict == .revoked)
        #expect(revoked.cited == [1, 2])
        let family = try ledger.explain(uid: "erin", originalTransactionId: "5001", at: t + 2 * day)
        #expect(family.verdict == .notBound)
        #expect(family.text.contains("Family Sharing"))
    }

    // MARK: Checkpoints

    @Test func checkpointVerifiesAndARewriteBeforeItFailsNamingTheFirstBadRecord() throws {
        defer { directory.remove() }
        try initStore()
        try submit(
            (0..<6).map { i in
                var transaction = Fixtures.transaction("70\(i)", at: t)
                transaction["productId"] = "product-marker-\(i)"
                return ["type": "purchase", "account": "user\(i)", "transaction": transaction, "at": t]
            })
        let checkpointFile = directory.path("checkpoint.txt").path
        let made = try ledger(["checkpoint", "--out", checkpointFile])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(made.json["size"] as? Int == 6)
        let text = try String(contentsOfFile: checkpointFile, encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines[0].hasPrefix("ownership-ledger/") && lines[0].count == "ownership-ledger/".count + 8)
        #expect(lines[1] == "6")
        #expect(lines[3].hasPrefix("projection state v\(StateProjection.version) "))
        #expect(lines[5].hasPrefix("\u{2014} \(lines[0]) "))

        let fresh = try ledger(["verify", "--checkpoint", checkpointFile])
        #expect(fresh.status == 0, "\(fresh.stdout)")
        let freshReport = fresh.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(freshReport["verified"] as? Bool == true)
        #expect(freshReport["signatureVerified"] as? Bool == true)

        // The log grows: the checkpoint still verifies, through a consistency proof.
        try submit([["type": "purchase", "account": "late", "transaction": Fixtures.transaction("799", at: t + day), "at": t + day]])
        let grown = try ledger(["verify", "--checkpoint", checkpointFile])
        #expect(grown.status == 0, "\(grown.stdout)")
        let grownReport = grown.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(grownReport["logSize"] as? Int == 7)
        #expect(grownReport["consistent"] as? Bool == true)
        #expect((grownReport["consistencyProof"] as? [String])?.isEmpty == false)
        #expect((grownReport["projections"] as? [[String: Any]])?.first?["status"] as? String == "matches")

        // A checkpoint whose text was edited fails its signature.
        let forged = directory.path("forged.txt").path
        try text.replacingOccurrences(of: "\n6\n", with: "\n5\n").write(toFile: forged, atomically: true, encoding: .utf8)
        let forgedResult = try ledger(["verify", "--checkpoint", forged])
        #expect(forgedResult.status == 1)
        #expect((forgedResult.json["checkpoint"] as? [String: Any])?["signatureVerified"] as? Bool == false)

        // Rewrite record 3 (the third purchase) under LMDB's feet. With no hash per record, the change
        // is located to the smallest subtree of the head's frontier holding it: records 1 to 4 of 7.
        let dataFile = directory.path("store/data.mdb")
        var data = try Data(contentsOf: dataFile)
        try Fixtures.flipEveryOccurrence(of: "product-marker-2", in: &data)
        try data.write(to: dataFile)
        let tampered = try ledger(["verify", "--checkpoint", checkpointFile])
        #expect(tampered.status == 1)
        #expect(tampered.json["firstBadSeq"] as? Int == 1, "\(tampered.stdout)")
        #expect(tampered.json["chainFault"] as? String == "records 1 to 4: the records' bytes changed: they no longer match the head's hash chain")
        let report = tampered.json["checkpoint"] as? [String: Any] ?? [:]
        #expect(report["verified"] as? Bool == false)
        #expect(report["rootMatches"] as? Bool == false)
        #expect(report["firstBadSeq"] as? Int == 1)
        #expect((report["problems"] as? [String])?.first?.contains("first bad records 1 to 4") == true, "\(report)")
    }

    @Test func aRewriteThatRecomputesTheChainIsStillCaught() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        for i in 0..<3 {
            _ = submit.respond(
                to: Fixtures.line(["type": "purchase", "account": "u\(i)", "transaction": Fixtures.transaction("80\(i)", at: t), "at": t]))
        }
        let (text, _) = try ledger.makeCheckpoint()
        // A rewritten history of the same length whose chain is internally consistent: a different log.
        let (other, otherDirectory) = try Fixtures.ledger()
        defer { otherDirectory.remove() }
        let otherSubmit = SubmitProtocol(ledger: other, trustDecoded: true)
        for i in 0..<3 {
            _ = otherSubmit.respond(
                to: Fixtures.line(["type": "purchase", "account": "u\(i)", "transaction": Fixtures.transaction("90\(i)", at: t), "at": t]))
        }
        let report = try other.verifyCheckpoint(text, publicKey: try ledger.signer().publicKey)
        #expect(report.signatureVerified)
        #expect(!report.verified)
        #expect(report.recomputedRoot != report.rootHash)
        #expect(report.firstBadSeq == nil)
        #expect(report.problems.contains { $0.contains("cannot be located") })
    }

    @Test func aReducerChangeThatRewritesThePastIsDetected() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        _ = submit.respond(to: Fixtures.line(["type": "purchase", "account": "a", "transaction": Fixtures.transaction("1", at: t), "at": t]))
        _ = submit.respond(to: Fixtures.line(["type": "delete-account", "account": "a", "at": t + day]))
        let (text, _) = try ledger.makeCheckpoint()
        #expect(try ledger.verifyCheckpoint(text).verified)
        // A reducer that forgets tombstones (same version number) rewrites the past.
        let changed: Forensics.Reducer = { state, event in
            if case .lineageTombstoned = event { return }
            StateProjection.evolve(&state, event)
        }
        let report = try ledger.verifyCheckpoint(text, reducer: changed)
        #expect(!report.verified)
        #expect(report.projections.map(\.status) == ["differs"])
        #expect(report.problems.contains { $0.contains("projection state v\(StateProjection.version)") })
    }

    @Test func projectionStateHashesAreIdenticalAcrossTwoRebuilds() throws {
        defer { directory.remove() }
        try disputedHistory()
        let first = try ledger(["checkpoint"])
        let rebuild = try ledger(["rebuild"])
        #expect(rebuild.status == 0)
        let second = try ledger(["checkpoint"])
        #expect(first.status == 0 && second.status == 0)
        let stateLine = { (result: LedgerBinary.Result) in result.lines.first { $0.hasPrefix("projection state v") } }
        #expect(stateLine(first) != nil)
        #expect(stateLine(first) == stateLine(second))
        // The same hash from a replay of the records through the library, and from the persisted read models.
        let opened = try Ledger(opening: directory.path("store"))
        let a = try Forensics.stateHash(StateProjection.fold(records: try opened.store.records()))
        #expect(try Forensics.stateHash(entries: try opened.persistedReadModels()) == a)
        #expect(stateLine(first) == Forensics.stateLine(version: StateProjection.version, hash: a))
    }

    // MARK: Signing key

    @Test func signingKeyIsCreatedByInitAndNeverSilentlyReplaced() throws {
        defer { directory.remove() }
        try initStore()
        let keyFile = directory.path("store/ledger-signing.key").path
        let attributes = try FileManager.default.attributesOfItem(atPath: keyFile)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(try String(contentsOfFile: keyFile, encoding: .utf8).hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let exported = directory.path("pub.pem").path
        let made = try ledger(["checkpoint", "--public-key-out", exported])
        #expect(made.status == 0)
        let printed = try ledger(["signing-key"])
        #expect(printed.stdout == (try String(contentsOfFile: exported, encoding: .utf8)))
        #expect(printed.stdout.hasPrefix("-----BEGIN PUBLIC KEY-----"))
        // The store recorded the key at init: a missing file is refused, never silently replaced
        // (a store made before signing keys existed, with none recorded, gets one: StoreLifecycleTests).
        let saved = try Data(contentsOf: URL(fileURLWithPath: keyFile))
        try FileManager.default.removeItem(atPath: keyFile)
        let missing = try ledger(["checkpoint"])
        #expect(missing.status == 3)
        #expect(missing.stderr.contains("is missing: restore it from your backup"), "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: keyFile))
        #expect(FileManager.default.createFile(atPath: keyFile, contents: saved, attributes: [.posixPermissions: 0o600]))
        let again = try ledger(["checkpoint"])
        #expect(again.status == 0, "\(again.stderr)")
        chmod(keyFile, 0o644)
        let refused = try ledger(["checkpoint"])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("chmod 600"))
    }

    // MARK: Dispute bundles

    @Test func disputeBundleVerifiesOfflineAndFailsAfterAnyByteChange() throws {
        defer { directory.remove() }
        try disputedHistory()
        let bundleFile = directory.path("bundle.json").path
        let keyFile = directory.path("ledger.pub").path
        #expect(try ledger(["signing-key", "--out", keyFile]).status == 0)
        let exported = try ledger(["dispute", "export", "--original-transaction-id", "1001", "--out", bundleFile, "--uid", "bob"])
        #expect(exported.status == 0, "\(exported.stderr)")
        #expect(exported.json["records"] as? Int == 4)
        let data = try Data(contentsOf: URL(fileURLWithPath: bundleFile))
        let unknown = try ledger(["dispute", "export", "--original-transaction-id", "1001", "--environment", "Production", "--out", bundleFile])
        #expect(unknown.status == 2)
        #expect(try Data(contentsOf: URL(fileURLWithPath: bundleFile)) == data)
        // Pseudonyms only, apart from the requesting account's own UID; no other lineage's records.
        let text = String(decoding: data, as: UTF8.self)
        #expect(!text.contains("alice") && !text.contains("carol"))
        #expect(text.contains("\"uid\":\"bob\""))

        // Offline: the store is gone.
        try FileManager.default.removeItem(at: directory.path("store"))
        let verified = try LedgerBinary.run(["dispute", "verify", bundleFile, "--public-key", keyFile])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(verified.json["verified"] as? Bool == true)
        #expect(verified.json["records"] as? Int == 4)
        let steps = verified.lines.dropLast().map(Fixtures.object)
        #expect(steps.map { $0["decision"] as? String } == ["granted", "denied", "recorded", "denied"])
        #expect(steps.map { $0["binding"] as? String } == ["bound", "bound", "tombstoned", "tombstoned"])
        let requesting = verified.json["requestingAccount"] as? String ?? "?"
        #expect((steps[1]["what"] as? String)?.contains("restore by account …\(requesting.suffix(8))") == true)

        let key = try Ed25519PublicKey(pem: try String(contentsOfFile: keyFile, encoding: .utf8))
        #expect(throws: Never.self) { try DisputeBundle.verify(data, publicKey: key) }
        // Any changed byte fails: a few hundred positions spread over the file, each flipped two ways.
        var generator = SystemRandomNumberGenerator()
        var positions = Set((0..<300).map { _ in Int.random(in: 0..<data.count, using: &generator) })
        positions.formUnion([0, data.count - 1, data.count / 2])
        var accepted: [Int] = []
        for position in positions.sorted() {
            for mask: UInt8 in [0x01, 0x20] {
                var changed = data
                changed[position] ^= mask
                if (try? DisputeBundle.verify(changed, publicKey: key)) != nil { accepted.append(position) }
            }
        }
        #expect(accepted.isEmpty, "bundles changed at \(accepted) still verified")
        // Truncated, extended, or checked with another key: fails too.
        #expect(throws: DisputeBundle.Failure.self) { try DisputeBundle.verify(data.dropLast(2), publicKey: key) }
        #expect(throws: DisputeBundle.Failure.self) { try DisputeBundle.verify(data + Data(" ".utf8), publicKey: key) }
        let stranger = try Ed25519PrivateKey.generate().publicKey
        #expect(throws: DisputeBundle.Failure.self) { try DisputeBundle.verify(data, publicKey: stranger) }

        // Through the binary: a changed byte is exit 1 with a reason.
        var changed = data
        changed[data.count / 3] ^= 0x01
        let changedFile = directory.path("changed.json")
        try changed.write(to: changedFile)
        let rejected = try LedgerBinary.run(["dispute", "verify", changedFile.path, "--public-key", keyFile])
        #expect(rejected.status == 1)
        #expect(rejected.json["verified"] as? Bool == false)
        #expect((rejected.json["error"] as? String)?.isEmpty == false)
    }

    @Test func aBundleWhoseRecordsAreReSignedWithAnotherKeyIsRejected() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        _ = submit.respond(to: Fixtures.line(["type": "purchase", "account": "a", "transaction": Fixtures.transaction("1", at: t), "at": t]))
        let data = try ledger.exportDispute(originalTransactionId: "1")
        let key = try ledger.signer().publicKey
        let verified = try DisputeBundle.verify(data, publicKey: key)
        #expect(verified.records.map(\.sequence) == [1])
        #expect(verified.timeline.count == 1)
        #expect(verified.subject["originalTransactionId"] == "1")
        // Swapping in another key everywhere does not help a forger without the ledger's private key.
        let stranger = try Ed25519PrivateKey.generate().publicKey
        var object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        object["publicKey"] = stranger.pem
        let swapped = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) + Data("\n".utf8)
        #expect(throws: DisputeBundle.Failure.self) { try DisputeBundle.verify(swapped, publicKey: stranger) }
    }

    // MARK: Transfers

    @Test func transferShowsInTheTimelineAndExplain() throws {
        let t = Fixtures.start
        let clock = ManualClock(t)
        let (ledger, directory) = try Fixtures.ledger(clock: clock.function)
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        _ = submit.respond(
            to: Fixtures.line(["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1001", at: t), "at": t]))
        let admin = try Ed25519PrivateKey.generate()
        let second = try Ed25519PrivateKey.generate()
        let op = try Ed25519PrivateKey.generate()
        let approver = try Ed25519PrivateKey.generate()
        try ledger.enrollFirstAdministrator("root", publicKey: admin.publicKey, at: t)
        _ = try ledger.enrollStaff(
            "sam", roles: .administrator, publicKey: second.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: admin, at: t)
        for (staff, roles, key) in [("olivia", StaffRoles.operator_, op), ("amir", .approver, approver)] {
            let proposal = try ledger.enrollStaff(
                staff, roles: roles, publicKey: key.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: admin, at: t)
            _ = try ledger.coSignRosterChange(digest: try #require(proposal.changeDigest), administrator: "sam", key: second, at: t)
        }
        func input(_ caseId: String) -> TransferRequestInput {
            TransferRequestInput(
                caseId: caseId, reason: "lost account", originalTransactionId: "1001", targetUID: "alice2",
                targetAuthentication: "firebase-reauth", ownershipEvidence: "apple-order-lookup")
        }
        // amir is no operator: the refused request is recorded on the lineage.
        clock.now = t + day - hour
        #expect(try !ledger.requestTransfer(input("case-0"), operator: "amir", key: approver, at: t + day - hour).accepted)
        clock.now = t + day
        _ = try ledger.requestTransfer(input("case-1"), operator: "olivia", key: op, at: t + day)
        clock.now = t + day + hour
        _ = try ledger.approveReviewed(caseId: "case-1", approver: "amir", key: approver, at: t + day + hour)
        clock.now = t + 2 * day
        let applied = try ledger.applyTransfer(caseId: "case-1", staff: "olivia", key: op, at: t + 2 * day)
        #expect(applied.accepted, "\(applied.refusalReason ?? "")")
        // Applying again, after the case was applied, is refused: the refusal shows where disputes look.
        clock.now = t + 2 * day + hour
        #expect(try !ledger.applyTransfer(caseId: "case-1", staff: "amir", key: approver, at: t + 2 * day + hour).accepted)
        clock.now = t + 3 * day
        _ = submit.respond(
            to: Fixtures.line([
                "type": "restore", "account": "alice2", "transaction": Fixtures.transaction("1001", at: t + 3 * day), "at": t + 3 * day,
            ]))

        let steps = try ledger.replayLineage(originalTransactionId: "1001")
        #expect(
            steps.map(\.event) == [
                "transaction-submitted", "transfer-refused", "transfer-requested", "transfer-approved", "transfer-applied", "transfer-refused",
                "transaction-submitted",
            ])
        #expect(steps.map(\.entitledAfter) == [true, true, true, true, false, false, true])
        #expect(steps[1].what.contains("case-0: request by amir refused"))
        #expect(steps[1].why.contains("operator-enrolled"))
        #expect(steps[3].what.contains("approved by amir"))
        #expect(steps[4].effects.contains { $0.hasPrefix("entitlement-ended@") })
        #expect(steps[4].why.contains("grants nothing"))
        #expect(steps[5].why.contains("already applied"))
        #expect(steps[6].decision == .refreshed)

        let old = try ledger.explain(uid: "alice", originalTransactionId: "1001", at: t + 2 * day + hour)
        #expect(old.verdict == .transferred)
        #expect(old.cited == [steps[4].sequences.last ?? 0])
        let moved = try ledger.explain(uid: "alice2", originalTransactionId: "1001", at: t + 2 * day + hour)
        #expect(moved.verdict == .transferred)
        let restored = try ledger.explain(uid: "alice2", originalTransactionId: "1001", at: t + 3 * day + hour)
        #expect(restored.verdict == .entitled)

        // The bundle of a transferred lineage verifies too.
        let data = try ledger.exportDispute(originalTransactionId: "1001")
        let verified = try DisputeBundle.verify(data, publicKey: try ledger.signer().publicKey)
        #expect(verified.timeline.map(\.event) == steps.map(\.event))
        #expect(verified.withheld.isEmpty)
        #expect(String(decoding: data, as: UTF8.self).contains("lost account"))
        // For the customer: the plan's private reason and evidence stay out, the record is still proven.
        let redacted = try ledger.exportDispute(originalTransactionId: "1001", withholdPrivate: true)
        #expect(!String(decoding: redacted, as: UTF8.self).contains("lost account"))
        #expect(!String(decoding: redacted, as: UTF8.self).contains("apple-order-lookup"))
        let proven = try DisputeBundle.verify(redacted, publicKey: try ledger.signer().publicKey)
        #expect(proven.withheld == [steps[1].firstSequence, steps[2].firstSequence, steps[5].firstSequence])
        #expect(proven.timeline.map(\.event) == ["transaction-submitted", "transfer-approved", "transfer-applied", "transaction-submitted"])
        var tampered = redacted
        if let range = tampered.range(of: Data("\"leafHash\":\"".utf8)) { tampered[range.upperBound + 2] ^= 0x01 }
        #expect(throws: DisputeBundle.Failure.self) { try DisputeBundle.verify(tampered, publicKey: try ledger.signer().publicKey) }
    }

    @Test(arguments: ["replay", "explain", "checkpoint", "signing-key", "dispute"])
    func forensicCommandsHaveHelp(command: String) throws {
        let help = try LedgerBinary.run([command, "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("Usage: ledger \(command)"))
    }
}
