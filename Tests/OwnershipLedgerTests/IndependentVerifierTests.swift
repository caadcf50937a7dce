import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The independent verifier, `Tests/Independent/verify_bundle.py` (Python standard library, written
/// from the docs), and the checks `dispute verify` and `evidence verify` share with it. The operator
/// holds the signing key, so every forgery here is signed with the store's own key, as the operator
/// could: the independent verifier must refuse what the ledger's verifier refuses, and it must decode
/// record bytes exactly as the ledger does.
@Suite struct IndependentVerifierTests {
    static let script = LedgerBinary.packageRoot.appendingPathComponent("Tests/Independent/verify_bundle.py")
    static let disputeLabel = "ownership-ledger/dispute-bundle/v2\n"
    static let evidenceLabel = "ownership-ledger/evidence/v1\n"

    /// Runs the script with `arguments` and `input` on its standard input (files, not pipes: the
    /// decoding test's output is large).
    static func python(_ arguments: [String], input: Data = Data(), in directory: TemporaryDirectory) throws -> LedgerBinary.Result {
        let name = UUID().uuidString
        let (inFile, outFile, errFile) = (directory.path("\(name).in"), directory.path("\(name).out"), directory.path("\(name).err"))
        try input.write(to: inFile)
        try Data().write(to: outFile)
        try Data().write(to: errFile)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path] + arguments
        process.standardInput = try FileHandle(forReadingFrom: inFile)
        process.standardOutput = try FileHandle(forWritingTo: outFile)
        process.standardError = try FileHandle(forWritingTo: errFile)
        try process.run()
        process.waitUntilExit()
        return LedgerBinary.Result(
            status: process.terminationStatus, stdout: String(decoding: try Data(contentsOf: outFile), as: UTF8.self),
            stderr: String(decoding: try Data(contentsOf: errFile), as: UTF8.self))
    }

    /// A ledger that played the five release scenarios from signed data, its signing key (the
    /// operator's), and that key's public half in a file.
    struct Played {
        let staffed: StaffedLedger
        let key: Ed25519PrivateKey
        let publicKeyFile: String
        var ledger: Ledger { staffed.ledger }

        init(_ label: String, play: Bool = true) throws {
            staffed = try ReleaseEvidenceTests.staffedLedger(label)
            if play { try ReleaseEvidenceTests().play(staffed, signed: true) }
            key = try SigningKey.load(from: staffed.ledger.store.signingKeyURL)
            publicKeyFile = staffed.directory.path("signing.pub").path
            try Data(key.publicKey.pem.utf8).write(to: URL(fileURLWithPath: publicKeyFile))
        }

        /// Writes `data` into the ledger's directory and returns its path.
        func write(_ data: Data, _ name: String) throws -> String {
            let url = staffed.directory.path(name)
            try data.write(to: url)
            return url.path
        }

        /// The independent verifier's verdict on `data`.
        func independent(_ data: Data, _ name: String) throws -> LedgerBinary.Result {
            try IndependentVerifierTests.python([try write(data, name), publicKeyFile], in: staffed.directory)
        }
    }

    static func canonical(_ object: Any) throws -> Data {
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    static func object(_ data: Data) throws -> [String: Any] { try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any]) }

    /// A file as the ledger signs one (docs/forensics.md): `body` holds every field but the signature
    /// (any bytes of a JSON object: the forger need not write canonical JSON); the signature covers
    /// the label and `body`, and is put first.
    static func seal(_ body: Data, label: String, key: Ed25519PrivateKey) throws -> Data {
        let signature = Data(try key.sign(Array(label.utf8) + Array(body))).base64EncodedString()
        return Data("{\"bundleSignature\":\"\(signature)\",".utf8) + body.dropFirst() + Data("\n".utf8)
    }

    /// `file` with its signature made again over its (changed) fields.
    static func reseal(_ file: [String: Any], label: String, key: Ed25519PrivateKey) throws -> Data {
        try seal(try canonical(file.filter { $0.key != "bundleSignature" }), label: label, key: key)
    }

    // MARK: Genuine files

    @Test func genuineBundlesAndEvidencePassBothVerifiers() throws {
        let played = try Played("ledger-independent-genuine")
        defer { played.staffed.directory.remove() }
        let ids = ReleaseEvidenceTests.transactionIds
        var bundles = [
            try played.ledger.exportDispute(originalTransactionId: ids[0], requestingUID: ReleaseEvidenceTests.uids[0]),
            try played.ledger.exportDispute(originalTransactionId: ids[1]),  // a deletion and the renewal after it
            try played.ledger.exportDispute(originalTransactionId: ids[3]),  // Family Sharing
            try played.ledger.exportDispute(originalTransactionId: ids[4]),  // support recovery: the approval names only its case
            try played.ledger.exportDispute(originalTransactionId: ids[4], withholdPrivate: true),
        ]
        // The sealing above is the ledger's: a bundle sealed again unchanged is the same file.
        #expect(try Self.reseal(try Self.object(bundles[0]), label: Self.disputeLabel, key: played.key) == bundles[0])
        for (index, data) in bundles.enumerated() {
            let verified = try DisputeBundle.verify(data, publicKey: played.key.publicKey)
            let checked = try played.independent(data, "bundle-\(index).json")
            #expect(checked.status == 0 && checked.json["verified"] as? Bool == true, "bundle \(index): \(checked.stdout) \(checked.stderr)")
            #expect(checked.json["records"] as? Int == verified.records.count)
            #expect((checked.json["withheld"] as? [Int] ?? []) == verified.withheld.map { Int($0) })
        }
        let complete = try played.ledger.exportEvidence()
        #expect(complete.complete)
        let later = try played.ledger.store.head().recordedAt + 1
        let empty = try played.ledger.exportEvidence(since: later)
        for (index, evidence) in [complete, empty].enumerated() {
            let verified = try ReleaseEvidence.verify(evidence.data, publicKey: played.key.publicKey)
            let checked = try played.independent(evidence.data, "evidence-\(index).json")
            #expect(checked.status == 0 && checked.json["verified"] as? Bool == true, "evidence \(index): \(checked.stdout) \(checked.stderr)")
            #expect(checked.json["complete"] as? Bool == verified.complete)
            #expect(checked.json["missing"] as? [String] == verified.missing.map(\.rawValue))
        }

        // A store upgraded from format 1: its transfer plan keeps format 1's lineage key and label.
        let directory = played.staffed.directory
        try FormatOneFixture.copyStore(to: directory.path("old"))
        _ = try FormatOneUpgrade.upgrade(from: directory.path("old"), to: directory.path("upgraded"), clock: { 1_800_000_000_000 })
        let upgraded = try Ledger(opening: directory.path("upgraded"), clock: { 1_800_000_000_000 })
        let key = try upgraded.signer().publicKey
        try Data(key.pem.utf8).write(to: directory.path("upgraded.pub"))
        bundles = [try upgraded.exportDispute(originalTransactionId: FormatOneFixture.transferredLineage)]
        #expect(try DisputeBundle.verify(bundles[0], publicKey: key).records.count > 4)
        let checked = try Self.python([try played.write(bundles[0], "upgraded.json"), directory.path("upgraded.pub").path], in: directory)
        #expect(checked.status == 0 && checked.json["verified"] as? Bool == true, "\(checked.stdout) \(checked.stderr)")
    }

    // MARK: Forged dispute bundles (review 27, H3)

    /// What the operator, holding the signing key, can put in a bundle (each signed with that key).
    enum DisputeForgery: String, CaseIterable, CustomTestStringConvertible, Sendable {
        /// The decoded JSON of the denied restore says granted; its stored bytes still say denied.
        case decodedJSONSaysGranted
        /// The first two records swapped.
        case recordsReordered
        /// The first record twice.
        case recordRepeated
        /// A record of another lineage (with its valid proof), in sequence order.
        case recordOfAnotherLineage
        /// The top-level `lineage` key twice, another lineage's first (a parser keeping the last sees the genuine one).
        case duplicateKey

        var testDescription: String { rawValue }
    }

    @Test(arguments: DisputeForgery.allCases)
    func thePythonVerifierRefusesABundleTheLedgerRefuses(_ forgery: DisputeForgery) throws {
        let played = try Played("ledger-independent-\(forgery.rawValue)")
        defer { played.staffed.directory.remove() }
        let ids = ReleaseEvidenceTests.transactionIds
        // alice's purchase and restore, then bob's restore, denied permission-denied.
        var file = try Self.object(try played.ledger.exportDispute(originalTransactionId: ids[0]))
        var records = try #require(file["records"] as? [[String: Any]])
        #expect(records.count == 3)
        let forged: Data
        switch forgery {
        case .decodedJSONSaysGranted:
            let index = try #require(
                records.firstIndex { entry in
                    let events = (entry["record"] as? [String: Any])?["events"] as? [[String: Any]]
                    return events?.last?["decision"] as? String == "denied"
                })
            var record = try #require(records[index]["record"] as? [String: Any])
            var events = try #require(record["events"] as? [[String: Any]])
            events[events.count - 1]["decision"] = "granted"
            events[events.count - 1]["code"] = "ok"
            events[events.count - 1]["message"] = DecisionReason.refreshed.message
            record["events"] = events
            records[index]["record"] = record
            file["records"] = records
            forged = try Self.reseal(file, label: Self.disputeLabel, key: played.key)
        case .recordsReordered:
            records.swapAt(0, 1)
            file["records"] = records
            forged = try Self.reseal(file, label: Self.disputeLabel, key: played.key)
        case .recordRepeated:
            records.insert(records[0], at: 1)
            file["records"] = records
            forged = try Self.reseal(file, label: Self.disputeLabel, key: played.key)
        case .recordOfAnotherLineage:
            // carol's purchase, proven against the same checkpoint (nothing was appended between the exports).
            let other = try Self.object(try played.ledger.exportDispute(originalTransactionId: ids[1]))
            #expect(other["checkpoint"] as? String == file["checkpoint"] as? String)
            let foreign = try #require((other["records"] as? [[String: Any]])?.first)
            let seq = try #require(foreign["seq"] as? Int)
            records.insert(foreign, at: records.firstIndex { ($0["seq"] as? Int ?? 0) > seq } ?? records.count)
            file["records"] = records
            forged = try Self.reseal(file, label: Self.disputeLabel, key: played.key)
        case .duplicateKey:
            let other = try #require(try Self.object(try played.ledger.exportDispute(originalTransactionId: ids[1]))["lineage"] as? String)
            let text = String(decoding: try Self.canonical(file.filter { $0.key != "bundleSignature" }), as: UTF8.self)
            let genuine = "\"lineage\":\"\(try #require(file["lineage"] as? String))\""
            let range = try #require(text.range(of: genuine))  // the top-level key: it sorts before "records"
            let body = text.replacingCharacters(in: range, with: "\"lineage\":\"\(other)\"," + genuine)
            forged = try Self.seal(Data(body.utf8), label: Self.disputeLabel, key: played.key)
        }
        // The ledger's verifier refuses it, and so does the independent one.
        #expect(throws: DisputeBundle.Failure.self) { try DisputeBundle.verify(forged, publicKey: played.key.publicKey) }
        let checked = try played.independent(forged, "forged.json")
        #expect(checked.status == 1, "\(forgery): \(checked.stdout) \(checked.stderr)")
        #expect(checked.json["verified"] as? Bool == false)
    }

    // MARK: Forged evidence

    @Test func thePythonVerifierRefusesEvidenceItsRecordsDoNotShow() throws {
        let played = try Played("ledger-independent-evidence")
        defer { played.staffed.directory.remove() }
        let evidence = try played.ledger.exportEvidence()
        #expect(evidence.complete)
        let file = try Self.object(evidence.data)
        let scenarios = try #require(file["scenarios"] as? [[String: Any]])
        func forge(_ change: (inout [[String: Any]]) -> Void) throws -> Data {
            var changed = scenarios
            change(&changed)
            var forged = file
            forged["scenarios"] = changed
            return try Self.reseal(forged, label: Self.evidenceLabel, key: played.key)
        }
        func forgeDecodedJSON() throws -> Data {
            var forged = file
            var records = try #require(file["records"] as? [[String: Any]])
            var record = try #require(records[0]["record"] as? [String: Any])
            var events = try #require(record["events"] as? [[String: Any]])
            events[events.count - 1]["message"] = "Granted."
            record["events"] = events
            records[0]["record"] = record
            forged["records"] = records
            return try Self.reseal(forged, label: Self.evidenceLabel, key: played.key)
        }
        let forgeries = [
            // Device A / Device B claimed from the account switch's records (a binding and a denied restore).
            "claimed from other records": try forge { $0[0]["seqs"] = $0[1]["seqs"] },
            // The explanation of a found scenario is not the one its records give.
            "explanation rewritten": try forge {
                $0[3]["explanation"] = "a purchase with inAppOwnershipType FAMILY_SHARED was granted (seq 1)"
            },
            "title rewritten": try forge { $0[4]["title"] = "support approved it" },
            // A record's decoded JSON that its bytes do not say (the message of its decision).
            "decoded JSON rewritten": try forgeDecodedJSON(),
        ]
        for (name, forged) in forgeries.sorted(by: { $0.key < $1.key }) {
            #expect(throws: ReleaseEvidence.Failure.self, "\(name)") { try ReleaseEvidence.verify(forged, publicKey: played.key.publicKey) }
            let checked = try played.independent(forged, "forged.json")
            #expect(checked.status == 1 && checked.json["verified"] as? Bool == false, "\(name): \(checked.stdout) \(checked.stderr)")
        }
    }

    // MARK: The checkpoint's origin (review 27, L1)

    @Test func disputeAndEvidenceVerifyRefuseACheckpointWhoseOriginIsNotTheTrustedKeys() throws {
        let played = try Played("ledger-independent-origin")
        defer { played.staffed.directory.remove() }
        let bundle = try played.ledger.exportDispute(originalTransactionId: ReleaseEvidenceTests.transactionIds[0])
        let evidence = try played.ledger.exportEvidence().data
        for (command, data, label) in [("dispute", bundle, Self.disputeLabel), ("evidence", evidence, Self.evidenceLabel)] {
            let genuine = try LedgerBinary.run([command, "verify", try played.write(data, "\(command).json"), "--public-key", played.publicKeyFile])
            #expect(genuine.status == 0 && genuine.json["verified"] as? Bool == true, "\(command): \(genuine.stdout)")
            // The same checkpoint signed by the right key under another log's name.
            var file = try Self.object(data)
            let parsed = try Checkpoint.parse(try #require(file["checkpoint"] as? String)).checkpoint
            let renamed = try Checkpoint(origin: "some-other-log", size: parsed.size, rootHash: parsed.rootHash, extensions: parsed.extensions)
            file["checkpoint"] = try renamed.signed(by: played.key, keyName: "some-other-log")
            let forged = try played.write(try Self.reseal(file, label: label, key: played.key), "\(command)-origin.json")
            let refused = try LedgerBinary.run([command, "verify", forged, "--public-key", played.publicKeyFile])
            #expect(refused.status == 1, "\(command): \(refused.stdout) \(refused.stderr)")
            #expect(refused.json["verified"] as? Bool == false, "\(command): \(refused.stdout)")
            #expect((refused.json["error"] as? String)?.contains("some-other-log") == true, "\(command): \(refused.stdout)")
            let independent = try Self.python([forged, played.publicKeyFile], in: played.staffed.directory)
            #expect(independent.status == 1, "\(command): \(independent.stdout)")
        }
    }

    // MARK: Missing scenarios (review 27, L6)

    @Test func evidenceVerifyChecksAndEchoesTheTextsOfMissingScenarios() throws {
        // A roster and no scenario: all five are missing.
        let played = try Played("ledger-independent-missing", play: false)
        defer { played.staffed.directory.remove() }
        let data = try played.ledger.exportEvidence().data
        let file = try Self.object(data)
        let claims = try #require(file["scenarios"] as? [[String: Any]])
        #expect(claims.count == 5 && claims.allSatisfy { $0["found"] as? Bool == false })
        let result = try LedgerBinary.run(["evidence", "verify", try played.write(data, "evidence.json"), "--public-key", played.publicKeyFile])
        #expect(result.status == 1 && result.json["verified"] as? Bool == true && result.json["complete"] as? Bool == false, "\(result.stdout)")
        // Each scenario as in the file, word for word (the environment included).
        let printed = try #require(result.json["scenarios"] as? [[String: Any]])
        #expect(printed.count == claims.count)
        for (shown, claim) in zip(printed, claims) {
            #expect(shown["explanation"] as? String == claim["explanation"] as? String, "\(shown)")
            #expect(shown["title"] as? String == claim["title"] as? String, "\(shown)")
            #expect((shown["explanation"] as? String)?.hasSuffix("from verified signed Sandbox data") == true)
        }
        #expect(try played.independent(data, "evidence.json").status == 0)

        // Texts the operator rewrote and signed again are refused by both verifiers.
        for (field, text) in [("explanation", "missing: nothing needed, the release may ship"), ("title", "optional")] {
            var changed = claims
            changed[2][field] = text
            var forged = file
            forged["scenarios"] = changed
            let path = try played.write(try Self.reseal(forged, label: Self.evidenceLabel, key: played.key), "forged-\(field).json")
            let refused = try LedgerBinary.run(["evidence", "verify", path, "--public-key", played.publicKeyFile])
            #expect(refused.status == 1 && refused.json["verified"] as? Bool == false, "\(field): \(refused.stdout)")
            #expect((refused.json["error"] as? String)?.contains("deletion-with-active-billing") == true, "\(refused.stdout)")
            let independent = try Self.python([path, played.publicKeyFile], in: played.staffed.directory)
            #expect(independent.status == 1 && independent.json["verified"] as? Bool == false, "\(field): \(independent.stdout)")
        }
    }

    // MARK: Decoding

    /// Records of every kind of event, every decision reason, notification type and subtype,
    /// environment, ownership and provenance, coded and written out, with strings that need escaping
    /// and times outside the usual years.
    static func syntheticRecords() -> [Record] {
        func key(_ byte: UInt8) -> Key128 { Key128([UInt8](repeating: byte, count: 16)) ?? .zero }
        let digest = Digest32([UInt8](repeating: 9, count: 32)) ?? .zero
        let (lineage, other) = (LineageKey(key(0xA1)), LineageKey(key(0xA2)))
        let (alice, bob) = (AccountID(key(0x0A)), AccountID(key(0x0B)))
        let product = "com.myrecipes.premium.monthly"
        let odd = "p \"q\" \\ / é 😀 \u{1}\u{7f}\n\t\u{2028}"
        func facts(
            _ product: String = product, purchase: Timestamp = 1_000, expires: Timestamp? = 2_000, revocation: Timestamp? = nil,
            ownership: Ownership = .purchased, environment: String = "Sandbox", provenance: Provenance = .verifiedJWS
        ) -> TransactionFacts {
            TransactionFacts(
                transactionKey: key(0x7E), productId: product, purchaseDate: purchase, expiresDate: expires, revocationDate: revocation,
                ownership: ownership, environment: environment, signedDate: purchase + 5, provenance: provenance)
        }
        let purchase: [LedgerEvent] = [
            .transactionSubmitted(TransactionSubmitted(kind: .purchase, account: alice, lineage: lineage, transaction: facts())),
            .lineageBound(lineage: lineage, account: alice),
            .entitlementGranted(EntitlementGranted(lineage: lineage, account: alice, productId: product, expiresAt: 2_000)),
        ]
        var histories: [[LedgerEvent]] = []
        for reason in DecisionReason.allCases {
            for (l, a) in [(nil, nil), (lineage, nil), (nil, alice), (lineage, alice), (other, bob)] as [(LineageKey?, AccountID?)] {
                histories.append([.decisionIssued(DecisionIssued(reason: reason, lineage: l, account: a))])
                histories.append(purchase + [.decisionIssued(DecisionIssued(reason: reason, lineage: l, account: a))])
            }
        }
        for type in EventCodec.notificationTypes + ["NEW_TYPE", odd] {
            histories.append([
                .notificationReceived(
                    NotificationReceived(notificationType: type, subtype: nil, signedDate: 3, lineage: lineage, transaction: facts()))
            ])
        }
        for subtype in EventCodec.notificationSubtypes + ["NEW_SUBTYPE"] {
            histories.append([
                .notificationReceived(
                    NotificationReceived(notificationType: "DID_RENEW", subtype: subtype, signedDate: -3, lineage: nil, transaction: nil))
            ])
        }
        for environment in EventCodec.environments + ["Staging", odd] {
            for ownership in [Ownership.purchased, .familyShared, .other("FUTURE")] {
                for provenance in [Provenance.verifiedJWS, .trustedDecoded, .legacyReceipt] {
                    let t = facts(odd, expires: nil, revocation: 44, ownership: ownership, environment: environment, provenance: provenance)
                    histories.append([
                        .transactionSubmitted(TransactionSubmitted(kind: .reconciliation, account: nil, lineage: other, transaction: t))
                    ])
                }
            }
        }
        for kind in SubmissionKind.allCases where kind != .reconciliation {
            histories.append([.transactionSubmitted(TransactionSubmitted(kind: kind, account: bob, lineage: lineage, transaction: facts()))])
        }
        // Grants: no expiry, the transaction's (referenced), another (written out), another product, other keys.
        for grant in [
            EntitlementGranted(lineage: lineage, account: alice, productId: product, expiresAt: nil),
            EntitlementGranted(lineage: lineage, account: alice, productId: product, expiresAt: 2_000),
            EntitlementGranted(lineage: lineage, account: alice, productId: product, expiresAt: 9_000),
            EntitlementGranted(lineage: other, account: bob, productId: odd, expiresAt: -9_000),
        ] {
            histories.append(Array(purchase.prefix(1)) + [.entitlementGranted(grant)])
            histories.append([.entitlementGranted(grant)])
        }
        let enrolled = StaffEnrolled(
            staff: "ops-ana", roles: [.operator_, .approver], publicKey: [UInt8](repeating: 5, count: 32), ownAccount: bob, enrolledBy: "admin",
            signature: [UInt8](repeating: 6, count: 64))
        let cosigned = StaffEnrolled(
            staff: odd, roles: StaffRoles(rawValue: 0xFF), publicKey: [8], ownAccount: nil, enrolledBy: nil, signature: [], signedAfter: 300,
            coSignedBy: "admin-2", coSignature: [10, 11])
        let removed = StaffRemoved(staff: "ops-ana", removedBy: "admin", signature: [1, 2, 3], signedAfter: 1 << 40)
        let plan = TransferPlan(
            caseId: "CASE-1", lineage: lineage, source: .tombstoned(alice), target: bob, lineageVersion: 9, targetAuthentication: "reauth",
            ownershipEvidence: odd, reason: "lost phone")
        var formatOnePlan = plan
        formatOnePlan.source = .bound(alice)
        formatOnePlan.formatOneLineageSuffix = key(0x5F)
        histories += [
            [.accountDeletionRequested(account: alice), .entitlementEnded(lineage: lineage, account: alice, reason: .accountDeleted)],
            [
                .entitlementEnded(lineage: lineage, account: alice, reason: .expired),
                .entitlementEnded(lineage: other, account: bob, reason: .transferred),
            ],
            [.entitlementRevoked(lineage: lineage, account: alice, revokedAt: -77), .entitlementReinstated(lineage: lineage, account: alice)],
            [.lineageTombstoned(lineage: lineage, formerAccount: alice), .accountDeleted(account: alice), .accountDeleted(account: bob)],
            [.staffEnrolled(enrolled)], [.staffEnrolled(cosigned)], [.staffRemoved(removed)],
            [.staffRemoved(StaffRemoved(staff: "x", removedBy: "y", signature: [], signedAfter: 0, coSignedBy: "z", coSignature: [2]))],
            [.rosterChangeProposed(.enroll(enrolled))], [.rosterChangeProposed(.remove(removed))],
            [.rosterChangeProposed(.enroll(cosigned))],  // co-signed inside a proposal: refused by both
            [.transferRequested(TransferRequested(plan: plan, planDigest: digest, requestedBy: "ops-ana", signature: [4]))],
            [.transferRequested(TransferRequested(plan: formatOnePlan, planDigest: digest, requestedBy: "ops-ana", signature: []))],
            [.transferApproved(TransferApproved(caseId: "CASE-1", planDigest: digest, approvedBy: "ops-ben", signature: [5]))],
            [
                .entitlementEnded(lineage: lineage, account: alice, reason: .transferred),
                .transferApplied(
                    TransferApplied(caseId: "CASE-1", planDigest: digest, lineage: lineage, source: .bound(alice), target: bob, appliedBy: "a")),
            ],
            [
                .transferApplied(
                    TransferApplied(
                        caseId: "CASE-2", planDigest: digest, lineage: other, source: .tombstoned(bob), target: alice, appliedBy: "a",
                        signature: [UInt8](repeating: 3, count: 64)))
            ],
            [.transferRefused(TransferRefused(caseId: "CASE-1", step: "apply", staff: "ops-ana", reason: odd))],
            [.transferRefused(TransferRefused(caseId: "CASE-1", step: "request", staff: "ops-ana", reason: "no", lineage: lineage))],
            [.storeUpgraded(StoreUpgraded(fromFormat: 1, records: .max, headHash: digest, merkleRoot: digest, copiedRecords: 1 << 62))],
        ]
        // Business times around the epoch, before year 0 and after 9999, and past what is written as a date.
        let times: [(recordedAt: Timestamp, at: Timestamp)] = [
            (1_700_000_000_123, 1_700_000_000_000), (0, -1), (1, -62_200_000_000_000), (281_474_976_710_655, 281_474_976_710_000),
            (5, 4_000_000_000_000_000), (5, -4_000_000_000_000_000),
        ]
        var records: [Record] = []
        for (index, events) in histories.enumerated() {
            let time = times[index % times.count]
            records.append(
                Record(
                    sequence: UInt64(index + 1), recordedAt: time.recordedAt, at: time.at, command: key(UInt8(index % 256)),
                    attempt: index % 7 == 0 ? .max : UInt32(index % 3), events: events))
        }
        return records
    }

    @Test func thePythonDecodingIsTheLedgersOnEveryKindOfRecordAndOnDamagedBytes() throws {
        let played = try Played("ledger-independent-decoding")
        defer { played.staffed.directory.remove() }
        var samples: [(sequence: UInt64, bytes: [UInt8])] = []
        // Real records: the played ledger's and those of the upgraded format-1 fixture.
        let directory = played.staffed.directory
        try FormatOneFixture.copyStore(to: directory.path("old"))
        _ = try FormatOneUpgrade.upgrade(from: directory.path("old"), to: directory.path("upgraded"), clock: { 1_800_000_000_000 })
        let upgraded = try Ledger(opening: directory.path("upgraded"), clock: { 1_800_000_000_000 })
        for record in try played.ledger.store.records() + upgraded.store.records() + Self.syntheticRecords() {
            samples.append((record.sequence, RecordCodec.encode(record)))
        }
        // Damaged copies: a byte changed, cut short, one byte more.
        var random = SeededGenerator(state: 27)
        for sample in samples {
            for _ in 0..<4 {
                var bytes = sample.bytes
                let position = Int(random.next() % UInt64(bytes.count))
                switch random.next() % 4 {
                case 0: bytes[position] ^= UInt8(1 << (random.next() % 8))
                case 1: bytes[position] = UInt8(truncatingIfNeeded: random.next())
                case 2: bytes.removeSubrange(position...)
                default: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: position)
                }
                samples.append((sample.sequence, bytes))
            }
        }
        let input = samples.map { "\($0.sequence) \(Data($0.bytes).base64EncodedString())\n" }.joined()
        let result = try Self.python(["--decode"], input: Data(input.utf8), in: directory)
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        try #require(lines.count == samples.count, "\(lines.count) lines for \(samples.count) records: \(result.stderr)")
        var (decoded, refused, differences) = (0, 0, [String]())
        for (sample, line) in zip(samples, lines) {
            guard let record = try? RecordCodec.decode(sample.bytes, sequence: sample.sequence) else {
                refused += 1
                if !line.hasPrefix("error: ") {
                    differences.append("the ledger refuses \(Data(sample.bytes).base64EncodedString()); Python: \(line)")
                }
                continue
            }
            decoded += 1
            let expected = String(decoding: try Self.canonical(RecordJSON.render(record)), as: UTF8.self)
            if line != expected { differences.append("\(Data(sample.bytes).base64EncodedString()):\n  ledger \(expected)\n  Python \(line)") }
        }
        #expect(decoded > 600 && refused > 300, "\(decoded) decoded, \(refused) refused")
        #expect(differences.isEmpty, "\(differences.count) differences, the first: \(differences.prefix(3).joined(separator: "\n"))")
    }
}
