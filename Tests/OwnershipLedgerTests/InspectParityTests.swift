import AppleSignedData
import Foundation
import LedgerTestSupport
import Testing

/// `ledger inspect-jws` and `ledger submit` give one verdict (same checks, same code, same message)
/// on every JWS vector of the tests and every attack case, through the binary.
@Suite struct InspectParityTests {
    let directory = TemporaryDirectory("ledger-parity")
    var store: String { directory.path("store").path }
    let t = Fixtures.start
    static let certs = LedgerBinary.packageRoot.appendingPathComponent("Tests/AppleSignedDataTests/Vectors")

    static func file(_ name: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: certs.appendingPathComponent("certs/\(name)"))) }
    static var chain: [[UInt8]] { (try? ["testLeaf.der", "testIntermediate.der", "testCA.der"].map(file)) ?? [] }
    static var key: String { String(decoding: (try? file("testLeaf.key.pem")) ?? [], as: UTF8.self) }

    func sign(_ payload: [String: Any], header: [String: Any]? = nil) throws -> String {
        try TestJWSSigner.sign(payload: payload, chain: Self.chain, privateKeyPEM: Self.key, header: header)
    }

    /// Signs these exact payload bytes (for what a dictionary cannot say: repeated keys, fractions).
    func sign(raw payload: String) throws -> String {
        try TestJWSSigner.sign(payload: Data(payload.utf8), chain: Self.chain, privateKeyPEM: Self.key)
    }

    func initStore(bundleId: String = Fixtures.bundleId) throws {
        let root = Self.certs.appendingPathComponent("certs/testCA.der").path
        let result = try LedgerBinary.run([
            "init", "--store", store, "--bundle-id", bundleId, "--environment", "Sandbox", "--root-certificate", root,
        ])
        #expect(result.status == 0, "\(result.stderr)")
    }

    /// inspect-jws's JSON for `jws`, and submit's answer to the line inspect-jws says it checked.
    func verdicts(_ cases: [(name: String, jws: String)], trustDecoded: Bool = false) throws -> [(String, [String: Any], [String: Any])] {
        var inspected: [[String: Any]] = []
        var lines: [String] = []
        for (index, testCase) in cases.enumerated() {
            let path = directory.path("case-\(index).jws")
            try Data(testCase.jws.utf8).write(to: path)
            let result = try LedgerBinary.run(["inspect-jws", path.path, "--at", String(t), "--store", store])
            let json = Fixtures.object(result.lines.first ?? "")
            #expect(result.status == ((json["valid"] as? Bool) == true ? 0 : 1), "\(testCase.name): \(result.stdout) \(result.stderr)")
            inspected.append(json)
            let field = json["checkedAs"] as? String ?? "signedTransaction"
            var line: [String: Any] = ["type": field == "signedPayload" ? "notification" : "purchase", field: testCase.jws, "at": t]
            if field == "signedTransaction" { line["account"] = "parity-\(index)" }
            lines.append(Fixtures.line(line))
        }
        let submitted = try LedgerBinary.run(["submit", "--store", store], stdin: lines.joined(separator: "\n") + "\n")
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let answers = submitted.lines.map(Fixtures.object)
        try #require(answers.count == cases.count)
        return zip(cases, zip(inspected, answers)).map { ($0.name, $1.0, $1.1) }
    }

    func transaction(_ changes: [String: Any] = [:], removing: [String] = []) -> [String: Any] {
        var payload = Fixtures.transaction("1001", at: t)
        payload["type"] = "Auto-Renewable Subscription"
        payload.merge(changes) { $1 }
        for key in removing { payload[key] = nil }
        return payload
    }

    @Test func inspectJWSAndSubmitGiveOneVerdictOnEveryVectorAndAttack() throws {
        defer { directory.remove() }
        try initStore()
        let vectors = try FileManager.default.contentsOfDirectory(atPath: Self.certs.appendingPathComponent("jws").path).sorted()
        var cases: [(name: String, jws: String)] = try vectors.map { name in
            (name, String(decoding: try Data(contentsOf: Self.certs.appendingPathComponent("jws/\(name)")), as: UTF8.self))
        }
        let good = try sign(transaction())
        let parts = good.split(separator: ".").map(String.init)
        let x5c = Self.chain.map { Data($0).base64EncodedString() }
        let foreignNested = try sign(Fixtures.transaction("1001", at: t, environment: "Production", bundleId: "com.evil.app"))
        let expectations: [(String, String, String?)] = [
            // name, JWS, the code both must give (nil: accepted by both)
            ("valid transaction", good, nil),
            ("family shared (valid JWS, denied by the decider)", try sign(transaction(["inAppOwnershipType": "FAMILY_SHARED"])), nil),
            (
                "valid notification",
                try sign([
                    "notificationType": "DID_RENEW", "notificationUUID": "parity-1", "signedDate": t,
                    "data": ["environment": "Sandbox", "bundleId": Fixtures.bundleId, "signedTransactionInfo": good],
                ]), nil
            ),
            (
                "another app, kind not guessable", try sign(["bundleId": "com.evil.app", "environment": "Sandbox", "signedDate": t]),
                "invalid-app-identifier"
            ),
            ("another app's transaction", try sign(transaction(["bundleId": "com.evil.app"])), "invalid-app-identifier"),
            (
                "notification nesting another app's transaction from another environment",
                try sign([
                    "notificationType": "DID_RENEW", "notificationUUID": "parity-2", "signedDate": t,
                    "data": ["environment": "Sandbox", "bundleId": Fixtures.bundleId, "signedTransactionInfo": foreignNested],
                ]), "invalid-app-identifier"
            ),
            ("expiresDate as a string", try sign(transaction(["expiresDate": "1790000000000"])), "invalid-payload"),
            ("purchaseDate as a string", try sign(transaction(["purchaseDate": String(t)])), "invalid-payload"),
            ("quantity as a string", try sign(transaction(["quantity": "1"])), "invalid-payload"),
            ("no signedDate", try sign(transaction(removing: ["signedDate"])), "invalid-payload"),
            (
                "fractional expiresDate",
                try sign(
                    raw:
                        #"{"originalTransactionId":"1001","transactionId":"1001","productId":"p","bundleId":"\#(Fixtures.bundleId)","purchaseDate":\#(t),"expiresDate":\#(t + 86_400_000).5,"inAppOwnershipType":"PURCHASED","environment":"Sandbox","signedDate":\#(t)}"#
                ), "invalid-payload"
            ),
            (
                "a repeated key in the payload",
                try sign(raw: #"{"bundleId":"\#(Fixtures.bundleId)","bundleId":"com.evil.app","environment":"Sandbox","signedDate":\#(t)}"#),
                "invalid-jws-format"
            ),
            (
                "x5c entry with an extra ==", try sign(transaction(), header: ["alg": "ES256", "x5c": [x5c[0] + "==", x5c[1], x5c[2]]]),
                "invalid-certificate"
            ),
            ("expired at signedDate", try sign(transaction(["signedDate": 2_280_946_846_000])), "invalid-chain"),
            ("surrounded by spaces", " \(good) ", "invalid-jws-format"),
            (
                "tampered payload",
                [parts[0], try sign(transaction(["productId": "com.evil.lifetime"])).split(separator: ".").map(String.init)[1], parts[2]].joined(
                    separator: "."), "verification-failed"
            ),
            ("alg none", try sign(transaction(), header: ["alg": "none", "x5c": x5c]), "invalid-jws-format"),
            ("crit header", try sign(transaction(), header: ["alg": "ES256", "crit": ["b64"], "b64": false, "x5c": x5c]), "invalid-jws-format"),
            ("a consumable", try sign(transaction(["type": "Consumable"])), "invalid-payload"),
            ("unknown ownership type", try sign(transaction(["inAppOwnershipType": "BORROWED"])), "invalid-payload"),
            (
                "renewal info alone", try sign(["originalTransactionId": "1001", "autoRenewStatus": 1, "environment": "Sandbox", "signedDate": t]),
                "invalid-app-identifier"
            ),
            ("Production data", try sign(transaction(["environment": "Production"])), "invalid-environment"),
        ]
        cases += expectations.map { ($0.0, $0.1) }
        let results = try verdicts(cases)
        for (name, inspected, answer) in results {
            let accepted = answer["decision"] as? String != "invalid"
            #expect((inspected["valid"] as? Bool) == accepted, "\(name): inspect \(inspected) submit \(answer)")
            if !accepted {
                #expect(inspected["code"] as? String == answer["code"] as? String, "\(name)")
                #expect(inspected["message"] as? String == answer["message"] as? String, "\(name)")
            }
        }
        for ((name, _, code), (_, inspected, _)) in zip(expectations, results.suffix(expectations.count)) {
            #expect(inspected["code"] as? String == code, "\(name): \(inspected)")
        }
        #expect(results.prefix(vectors.count).allSatisfy { $0.1["valid"] as? Bool == false }, "no upstream vector is for this ledger's app")
    }

    @Test func identityStringsAreComparedByteForByte() throws {
        defer { directory.remove() }
        try initStore(bundleId: "com.Kitchen.app")
        // KELVIN SIGN (U+212A) is canonically equivalent to K: Swift String equality says equal.
        let kelvin = "com.\u{212A}itchen.app"
        #expect(kelvin == "com.Kitchen.app")
        let results = try verdicts([
            ("KELVIN bundle id", try sign(transaction(["bundleId": kelvin]))),
            ("exact bundle id", try sign(transaction(["bundleId": "com.Kitchen.app"]))),
        ])
        #expect(results.map { $0.2["code"] as? String } == ["invalid-app-identifier", "ok"])
        #expect(results.map { $0.1["valid"] as? Bool } == [false, true])
        let trusted = try LedgerBinary.run(
            ["submit", "--trust-decoded", "--store", store],
            stdin: Fixtures.line(["type": "purchase", "account": "k", "transaction": transaction(["bundleId": kelvin]), "at": t]) + "\n")
        #expect(Fixtures.object(trusted.lines.first ?? "")["code"] as? String == "invalid-app-identifier")
    }

    @Test func storeKitTestingDataIsDecidedWithItsFractionalMillisecondsFloored() throws {
        defer { directory.remove() }
        // Xcode signs times such as 1697679936049.7297; a ledger for local testing floors them (docs/verification.md).
        let created = try LedgerBinary.run([
            "init", "--store", store, "--bundle-id", "com.example.naturelab.backyardbirds.example", "--environment", "Xcode",
            "--allow-local-testing",
        ])
        #expect(created.status == 0, "\(created.stderr)")
        let jws = String(decoding: try Data(contentsOf: Self.certs.appendingPathComponent("jws/xcode-signed-transaction.jws")), as: UTF8.self)
        let at: Int64 = 1_697_679_937_000
        let inspected = try LedgerBinary.run([
            "inspect-jws", Self.certs.appendingPathComponent("jws/xcode-signed-transaction.jws").path, "--at", String(at), "--store", store,
        ])
        #expect(inspected.status == 0, "\(inspected.stdout) \(inspected.stderr)")
        #expect(inspected.json["valid"] as? Bool == true)
        #expect(inspected.json["signatureVerified"] as? Bool == false)
        let line = Fixtures.line(["type": "purchase", "account": "uid-xcode-tester-7f3a9c", "signedTransaction": jws, "at": at])
        let submitted = try LedgerBinary.run(["submit", "--store", store], stdin: line + "\n")
        #expect(submitted.json["decision"] as? String == "granted", "\(submitted.stdout) \(submitted.stderr)")
        // expiresDate 1700358336049.7297 in the signed payload.
        let entitlement = submitted.json["entitlement"] as? [String: Any]
        #expect(entitlement?["expiresAt"] as? String == "2023-11-19T01:45:36.049Z", "\(submitted.stdout)")
    }
}
