import AppleSignedData
import Foundation
import LedgerTestSupport
import Testing

/// Apple-shaped JWS signed here with the test PKI's private keys, submitted through `ledger submit`
/// (without --trust-decoded) to a ledger initialised to trust the test root.
@Suite struct SignedSubmissionTests {
    let directory = TemporaryDirectory("ledger-signed")
    var store: String { directory.path("store").path }
    static let certs = LedgerBinary.packageRoot.appendingPathComponent("Tests/AppleSignedDataTests/Vectors/certs")
    let t = Fixtures.start
    let day = Fixtures.day

    static func file(_ name: String) throws -> Data { try Data(contentsOf: certs.appendingPathComponent(name)) }

    func sign(_ payload: [String: Any]) throws -> String {
        let chain = try ["testLeaf.der", "testIntermediate.der", "testCA.der"].map { [UInt8](try Self.file($0)) }
        let key = String(decoding: try Self.file("testLeaf.key.pem"), as: UTF8.self)
        return try TestJWSSigner.sign(payload: payload, chain: chain, privateKeyPEM: key)
    }

    func renewalInfo(_ otid: String, at: Int64) -> [String: Any] {
        [
            "originalTransactionId": otid, "autoRenewProductId": "com.myrecipes.premium.monthly",
            "productId": "com.myrecipes.premium.monthly", "autoRenewStatus": 1, "environment": "Sandbox", "signedDate": at,
        ]
    }

    func initLedger(trustTestRoot: Bool = true) throws {
        var arguments = ["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]
        if trustTestRoot { arguments += ["--root-certificate", Self.certs.appendingPathComponent("testCA.der").path] }
        let result = try LedgerBinary.run(arguments)
        #expect(result.status == 0, "\(result.stderr)")
    }

    func submit(_ lines: [[String: Any]]) throws -> [[String: Any]] {
        let input = lines.map(Fixtures.line).joined(separator: "\n") + "\n"
        let result = try LedgerBinary.run(["submit", "--store", store], stdin: input)
        #expect(result.status == 0, "\(result.stderr)")
        return result.lines.map(Fixtures.object)
    }

    @Test func signedPurchaseRenewalRestoreFamilyNotificationAndReconciliationEndToEnd() throws {
        defer { directory.remove() }
        try initLedger()
        let purchase = try sign(Fixtures.transaction("1001", at: t))
        let renewal = try sign(Fixtures.transaction("1001", transactionId: "1002", at: t + 30 * day))
        let family = try sign(Fixtures.transaction("2001", at: t, ownership: "FAMILY_SHARED"))
        let nested: [String: Any] = [
            "notificationType": "DID_RENEW", "notificationUUID": "8d2f-signed-1", "signedDate": t + 60 * day, "version": "2.0",
            "data": [
                "environment": "Sandbox", "bundleId": Fixtures.bundleId, "status": 1,
                "signedTransactionInfo": try sign(Fixtures.transaction("1001", transactionId: "1003", at: t + 60 * day)),
                "signedRenewalInfo": try sign(renewalInfo("1001", at: t + 60 * day)),
            ],
        ]
        let familyNotification: [String: Any] = [
            "notificationType": "SUBSCRIBED", "notificationUUID": "8d2f-signed-2", "signedDate": t,
            "data": ["environment": "Sandbox", "bundleId": Fixtures.bundleId, "signedTransactionInfo": family],
        ]
        let reconciliation: [String: Any] = [
            "environment": "Sandbox", "bundleId": Fixtures.bundleId,
            "data": [
                [
                    "subscriptionGroupIdentifier": "21000001",
                    "lastTransactions": [
                        [
                            "originalTransactionId": "1001", "status": 1,
                            "signedTransactionInfo": try sign(Fixtures.transaction("1001", transactionId: "1004", at: t + 90 * day)),
                            "signedRenewalInfo": try sign(renewalInfo("1001", at: t + 90 * day)),
                        ],
                        [
                            "originalTransactionId": "3001", "status": 1,
                            "signedTransactionInfo": try sign(Fixtures.transaction("3001", at: t + 90 * day)),
                        ],
                        [
                            "originalTransactionId": "1001", "status": 1,
                            "signedTransactionInfo": try sign(
                                Fixtures.transaction("1001", transactionId: "1005", at: t + 91 * day, ownership: "FAMILY_SHARED")),
                        ],
                    ],
                ]
            ],
        ]
        let responses = try submit([
            ["type": "purchase", "account": "alice", "signedTransaction": purchase, "at": t],
            ["type": "renewal", "account": "alice", "signedTransaction": renewal, "at": t + 30 * day],
            ["type": "restore", "account": "bob", "signedTransaction": renewal, "at": t + 31 * day],
            ["type": "purchase", "account": "erin", "signedTransaction": family, "at": t],
            ["type": "notification", "signedPayload": try sign(nested), "at": t + 60 * day],
            ["type": "notification", "signedPayload": try sign(familyNotification), "at": t],
            ["type": "reconciliation", "response": reconciliation, "at": t + 90 * day],
        ])
        #expect(responses.map { $0["decision"] as? String } == ["granted", "granted", "denied", "denied", "granted", "denied", "recorded"])
        #expect(
            responses.map { $0["code"] as? String } == [
                "ok", "ok", "permission-denied", "family-sharing-unsupported", "ok", "family-sharing-unsupported", "mixed",
            ])
        let results = responses[6]["results"] as? [[String: Any]] ?? []
        #expect(
            results.map { $0["code"] as? String } == ["ok", "not-bound", "family-sharing-unsupported"],
            "reconciliation refreshes the bound lineage, never binds, and rejects Family Sharing")
        let alice = try LedgerBinary.run(["account", "--store", store, "--uid", "alice", "--at", String(t + 100 * day)])
        let entitlement = (alice.json["entitlements"] as? [[String: Any]])?.first
        #expect(entitlement?["active"] as? Bool == true)
        #expect(try LedgerBinary.run(["binding", "--store", store, "--original-transaction-id", "3001"]).json["state"] as? String == "unbound")
        #expect(try LedgerBinary.run(["verify", "--store", store]).status == 0)
    }

    @Test func tamperedOrForeignSignedDataIsInvalidAndAppendsNothing() throws {
        defer { directory.remove() }
        try initLedger()
        let good = try sign(Fixtures.transaction("1001", at: t))
        let parts = good.split(separator: ".").map(String.init)
        let otherPayload = try sign(Fixtures.transaction("9999", at: t)).split(separator: ".").map(String.init)[1]
        let tampered = [parts[0], otherPayload, parts[2]].joined(separator: ".")
        let foreign = try sign(Fixtures.transaction("1001", at: t, bundleId: "com.other.app"))
        let production = try sign(Fixtures.transaction("1001", at: t, environment: "Production"))
        let responses = try submit([
            ["type": "purchase", "account": "a", "signedTransaction": tampered],
            ["type": "purchase", "account": "a", "signedTransaction": "a.b"],
            ["type": "purchase", "account": "a", "signedTransaction": foreign],
            ["type": "purchase", "account": "a", "signedTransaction": production],
            ["type": "notification", "signedPayload": tampered],
        ])
        #expect(responses.map { $0["decision"] as? String } == Array(repeating: "invalid", count: 5))
        #expect(
            responses.map { $0["code"] as? String } == [
                "verification-failed", "invalid-jws-format", "invalid-app-identifier", "invalid-environment", "verification-failed",
            ])
        #expect(try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int == 0)
    }

    @Test func aLedgerTrustingAppleRootRejectsTheTestChain() throws {
        defer { directory.remove() }
        try initLedger(trustTestRoot: false)
        let responses = try submit([["type": "purchase", "account": "a", "signedTransaction": try sign(Fixtures.transaction("1", at: t))]])
        #expect(responses.first?["code"] as? String == "invalid-chain")
        let jwsFile = directory.path("t.jws")
        try Data(try sign(Fixtures.transaction("1", at: t)).utf8).write(to: jwsFile)
        let inspect = try LedgerBinary.run(["inspect-jws", jwsFile.path, "--store", store])
        #expect(inspect.status == 1)
        #expect(inspect.json["valid"] as? Bool == false)
    }

    @Test func inspectJWSPrintsTheVerifiedPayload() throws {
        defer { directory.remove() }
        try initLedger()
        let jwsFile = directory.path("t.jws")
        try Data(try sign(Fixtures.transaction("1001", at: t)).utf8).write(to: jwsFile)
        let inspect = try LedgerBinary.run(["inspect-jws", jwsFile.path, "--store", store])
        #expect(inspect.status == 0, "\(inspect.stdout)")
        #expect(inspect.json["valid"] as? Bool == true)
        #expect(inspect.json["kind"] as? String == "transaction")
        #expect((inspect.json["payload"] as? [String: Any])?["originalTransactionId"] as? String == "1001")
    }

    @Test func legacyReceiptsAreAcceptedOnlyWhenTrustedAndRejectFamilySharing() throws {
        defer { directory.remove() }
        try initLedger()
        func receipt(_ ownership: String, otid: String) -> [String: Any] {
            [
                "status": 0, "environment": "Sandbox", "receipt": ["bundle_id": Fixtures.bundleId],
                "latest_receipt_info": [
                    [
                        "original_transaction_id": otid, "transaction_id": otid, "product_id": "com.myrecipes.premium.monthly",
                        "purchase_date_ms": String(t), "expires_date_ms": String(t + 30 * day), "in_app_ownership_type": ownership,
                    ]
                ],
            ]
        }
        let strict = try LedgerBinary.run(
            ["submit", "--store", store],
            stdin: Fixtures.line(["type": "restore", "account": "a", "receipt": receipt("PURCHASED", otid: "1")]) + "\n")
        #expect(Fixtures.object(strict.lines.first ?? "")["decision"] as? String == "invalid")
        let trusted = try LedgerBinary.run(
            ["submit", "--trust-decoded", "--store", store],
            stdin: [
                Fixtures.line(["type": "restore", "account": "a", "receipt": receipt("PURCHASED", otid: "1"), "at": t]),
                Fixtures.line(["type": "restore", "account": "b", "receipt": receipt("FAMILY_SHARED", otid: "2"), "at": t]),
            ].joined(separator: "\n"))
        let decisions = trusted.lines.map(Fixtures.object)
        #expect(decisions.map { $0["decision"] as? String } == ["granted", "denied"])
        #expect(decisions.last?["code"] as? String == "family-sharing-unsupported")
    }
}

extension SignedSubmissionTests {
    @Test func inspectJWSAppliesTheSameIdentityChecksAsSubmit() throws {
        defer { directory.remove() }
        try initLedger()
        let jwsFile = directory.path("foreign.jws")
        try Data(try sign(Fixtures.transaction("1001", at: t, bundleId: "com.attacker.app")).utf8).write(to: jwsFile)
        let inspect = try LedgerBinary.run(["inspect-jws", jwsFile.path, "--store", store])
        #expect(inspect.status == 1)
        #expect(inspect.json["valid"] as? Bool == false)
        #expect(inspect.json["code"] as? String == "invalid-app-identifier")
        #expect(inspect.json["checkedAs"] as? String == "signedTransaction")
    }

    @Test func aCritHeaderIsRefused() throws {
        defer { directory.remove() }
        try initLedger()
        let chain = try ["testLeaf.der", "testIntermediate.der", "testCA.der"].map { [UInt8](try Self.file($0)) }
        let key = String(decoding: try Self.file("testLeaf.key.pem"), as: UTF8.self)
        let header: [String: Any] = [
            "alg": "ES256", "crit": ["b64"], "b64": false, "x5c": chain.map { Data($0).base64EncodedString() },
        ]
        let jws = try TestJWSSigner.sign(payload: Fixtures.transaction("1001", at: t), chain: chain, privateKeyPEM: key, header: header)
        let answers = try submit([["type": "purchase", "account": "a", "signedTransaction": jws]])
        #expect(answers.first?["code"] as? String == "invalid-jws-format")
        #expect((answers.first?["message"] as? String)?.contains("crit") == true)
    }
}

extension SignedSubmissionTests {
    @Test func benchSignTurnsATrustedWorkloadIntoSignedLinesDecidedTheSame() throws {
        defer { directory.remove() }
        try initLedger()
        let trusted = [
            ["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1001", at: t), "at": t],
            [
                "type": "notification",
                "notification": Fixtures.notification(
                    "DID_RENEW", uuid: "bench-1", transaction: Fixtures.transaction("1001", transactionId: "1002", at: t + day), at: t + day),
                "at": t + day,
            ],
            ["type": "restore", "account": "bob", "transaction": Fixtures.transaction("1001", at: t), "at": t + 2 * day],
            ["type": "delete-account", "account": "alice", "at": t + 3 * day],
        ]
        let input = directory.path("trusted.jsonl")
        let output = directory.path("signed.jsonl")
        try Data((trusted.map(Fixtures.line).joined(separator: "\n") + "\n").utf8).write(to: input)
        let signing = try LedgerBinary.run(
            ["bench", "sign", "--in", input.path, "--out", output.path, "--fixtures", LedgerBinary.packageRoot.appendingPathComponent("Tests").path])
        #expect(signing.status == 0, "\(signing.stderr)")
        #expect(signing.json["lines"] as? Int == 4)
        #expect(signing.json["signatures"] as? Int == 4)
        #expect(OutputSchemas.shared.problems(signing.stdout, against: "bench.schema.json") == [])
        let signed = String(decoding: try Data(contentsOf: output), as: UTF8.self)
        let lines = signed.split(separator: "\n").map { Fixtures.object(String($0)) }
        #expect(lines.map { $0.keys.sorted() }[0] == ["account", "at", "signedTransaction", "type"])
        #expect(lines[1]["signedPayload"] is String && lines[1]["notification"] == nil)
        let answers = try LedgerBinary.run(["submit", "--store", store], stdin: signed).lines.map(Fixtures.object)
        #expect(answers.map { $0["decision"] as? String } == ["granted", "granted", "denied", "recorded"])
    }
}
