import FirebaseAuth
import Foundation
import LedgerService
import LedgerTestSupport
import OwnershipLedger
import Testing

/// `ledger serve` on a real socket: every route and status, the account always the token's, and
/// the same answers `ledger submit` gives.
@Suite struct ServeTests {
    @Test func theAppPurchasesRestoresReadsItsEntitlementsAndDeletesItsAccount() throws {
        let served = try ServedLedger()
        let purchase = try ServedLedger.signedTransaction("3100")
        let granted = try served.transaction("purchase", as: "alice-uid", purchase)
        #expect(granted.status == 200, "\(granted.text)")
        #expect(granted.json["decision"] as? String == "granted")
        #expect((granted.json["entitlement"] as? [String: Any])?["active"] as? Bool == true)
        // The same signed transaction restored by another account: denied, with the message the app shows.
        let denied = try served.transaction("restore", as: "bob-uid", purchase)
        #expect(denied.status == 403)
        #expect(denied.json["code"] as? String == "permission-denied")
        #expect((denied.json["message"] as? String ?? "").contains("belongs to another MyRecipes account"))
        let family = try served.transaction("purchase", as: "bob-uid", try ServedLedger.signedTransaction("3200", ownership: "FAMILY_SHARED"))
        #expect(family.status == 403)
        #expect(family.json["code"] as? String == "family-sharing-unsupported")
        let renewalJWS = try ServedLedger.signedTransaction("3100", transactionId: "3101")
        let renewal = try served.transaction("renewal", as: "alice-uid", renewalJWS)
        #expect(renewal.status == 200 && renewal.json["decision"] as? String == "granted")
        // Retried: the first answer again, nothing appended.
        let retried = try served.transaction("renewal", as: "alice-uid", renewalJWS)
        #expect(retried.status == 200 && retried.json["duplicate"] as? Bool == true)
        let invalid = try served.transaction("purchase", as: "alice-uid", "not.a.jws")
        #expect(invalid.status == 400 && invalid.json["decision"] as? String == "invalid")
        let foreign = try served.transaction("purchase", as: "alice-uid", try ServedLedger.signedTransaction("3300", bundleId: "com.other.app"))
        #expect(foreign.status == 400 && foreign.json["code"] as? String == "invalid-app-identifier")

        // Each caller reads only its own entitlements.
        let alice = try served.client.get("/v1/entitlements", headers: try served.authorization("alice-uid"))
        #expect(alice.status == 200)
        #expect(alice.json["account"] as? String == "alice-uid" && alice.json["known"] as? Bool == true)
        #expect((alice.json["entitlements"] as? [[String: Any]])?.count == 1)
        let bob = try served.client.get("/v1/entitlements", headers: try served.authorization("bob-uid"))
        #expect(bob.json["account"] as? String == "bob-uid")
        #expect((bob.json["entitlements"] as? [[String: Any]])?.isEmpty == true, "bob sees nothing of alice's")
        // Known: his denied submissions are recorded, under an account that owns nothing (docs/service.md).
        #expect(bob.json["known"] as? Bool == true)

        // A token refreshed long after its user signed in still reads, but deletes nothing: the app
        // signs the user in again first (Firebase's requires-recent-login).
        let signedInAnHourAgo = [
            "Authorization": "Bearer " + (try ServedLedger.token("alice-uid") { $0["auth_time"] = Int64(Date().timeIntervalSince1970) - 3_600 })
        ]
        #expect(try served.client.get("/v1/entitlements", headers: signedInAnHourAgo).status == 200)
        let notRecent = try served.client.send("DELETE", "/v1/account", headers: signedInAnHourAgo)
        #expect(notRecent.status == 401 && notRecent.json["code"] as? String == "requires-recent-login", "\(notRecent.text)")
        #expect(notRecent.headers["www-authenticate"] == #"Bearer error="insufficient_user_authentication", max_age="300""#)
        let afterRefusal = try served.client.get("/v1/entitlements", headers: try served.authorization("alice-uid"))
        #expect((afterRefusal.json["entitlements"] as? [[String: Any]])?.first?["active"] as? Bool == true, "\(afterRefusal.text)")

        // Bob deleting his account changes nothing of alice's.
        #expect(try served.client.send("DELETE", "/v1/account", headers: try served.authorization("bob-uid")).status == 200)
        let stillAlice = try served.client.get("/v1/entitlements", headers: try served.authorization("alice-uid"))
        #expect((stillAlice.json["entitlements"] as? [[String: Any]])?.first?["active"] as? Bool == true)

        // Deleting the account: recorded, with the warning that Apple billing continues.
        let deleted = try served.client.send("DELETE", "/v1/account", headers: try served.authorization("alice-uid"))
        #expect(deleted.status == 200, "\(deleted.text)")
        #expect(deleted.json["decision"] as? String == "recorded" && deleted.json["appleBillingContinues"] as? Bool == true)
        #expect((deleted.json["message"] as? String ?? "").contains("does not cancel Apple billing"))
        let gone = try served.client.get("/v1/entitlements", headers: try served.authorization("alice-uid"))
        #expect(gone.json["known"] as? Bool == false)
        // The app retrying the restore after the deletion: denied (the lineage is a tombstone), and
        // recorded under a new account, known again and owning nothing of the deleted one's.
        let retriedAfterDeletion = try served.transaction("restore", as: "alice-uid", purchase)
        #expect(retriedAfterDeletion.status == 403, "\(retriedAfterDeletion.text)")
        let again = try served.client.get("/v1/entitlements", headers: try served.authorization("alice-uid"))
        #expect(again.json["known"] as? Bool == true && (again.json["entitlements"] as? [[String: Any]])?.isEmpty == true, "\(again.text)")
        let ledger = try served.ledger()
        #expect(try ledger.binding(originalTransactionId: "3100").state == "tombstoned")
        #expect(try ledger.binding(originalTransactionId: "3200").state == "unbound")
        #expect(try ledger.store.replay().isIntact)
        #expect(served.stop() == 0)
    }

    @Test func aBodyNamingAnAccountOrAnythingElseTheRouteDoesNotDefineIsRefused() throws {
        let served = try ServedLedger()
        let jws = try ServedLedger.signedTransaction("4100")
        let headers = try served.authorization("alice-uid")
        let bodies: [([String: Any], String)] = [
            (["type": "purchase", "signedTransaction": jws, "account": "mallory"], "account"),
            (["type": "purchase", "signedTransaction": jws, "uid": "mallory"], "uid"),
            (["type": "purchase", "signedTransaction": jws, "userId": "mallory"], "userId"),
            (["type": "purchase", "signedTransaction": jws, "deviceId": "D-1"], "deviceId"),
            (["type": "purchase", "signedTransaction": jws, "at": 0], "at"),
            (["type": "delete-account"], "delete-account"),
            (["type": "notification", "signedPayload": jws], "signedPayload"),
            (["signedTransaction": jws], "type"),
        ]
        for (body, named) in bodies {
            let answer = try served.client.post("/v1/transactions", Fixtures.line(body), headers: headers)
            #expect(answer.status == 400, "\(body.keys.sorted())")
            #expect(answer.json["decision"] as? String == "invalid")
            #expect((answer.json["message"] as? String ?? "").contains(named), "\(answer.text)")
        }
        for body in ["", "[]", "{", "\u{FF}"] {
            #expect(try served.client.post("/v1/transactions", body, headers: headers).status == 400)
        }
        let ledger = try served.ledger()
        #expect(try ledger.store.head().sequence == 0, "a refused body appended something")
        #expect(try ledger.binding(originalTransactionId: "4100").state == "unbound")
        #expect(try ledger.account(uid: "mallory").known == false)
    }

    @Test func everyTokenRefusalIs401AndNeitherReadsNorChangesAnything() throws {
        let served = try ServedLedger()
        let jws = try ServedLedger.signedTransaction("5100")
        #expect(try served.transaction("purchase", as: "alice-uid", jws).status == 200)
        let keys = ServedLedger.firebaseKeys
        let key1 = try String(contentsOf: keys.appendingPathComponent("token-signer-1.key.pem"), encoding: .utf8)
        let key2 = try String(contentsOf: keys.appendingPathComponent("token-signer-2.key.pem"), encoding: .utf8)
        let certificate = Array(try String(contentsOf: keys.appendingPathComponent("token-signer-1.cert.pem"), encoding: .utf8).utf8)
        let now = Int64(Date().timeIntervalSince1970)
        let claims = TestTokenSigner.claims(projectId: ServedLedger.projectId, uid: "alice-uid", now: now)
        let refused: [(String, String)] = [
            ("unsupported-algorithm", try TestTokenSigner.sign(claims: claims, keyId: "test-key-1", algorithm: .none)),
            ("unsupported-algorithm", try TestTokenSigner.sign(claims: claims, keyId: "test-key-1", algorithm: .hs256(key: certificate))),
            ("unsupported-algorithm", try TestTokenSigner.sign(claims: claims, keyId: "test-key-1", algorithm: .rs512(privateKeyPEM: key1))),
            ("unknown-key", try TestTokenSigner.sign(claims: claims, keyId: "test-key-7", algorithm: .rs256(privateKeyPEM: key1))),
            ("wrong-audience", try ServedLedger.token("alice-uid") { $0["aud"] = "other-project" }),
            ("wrong-issuer", try ServedLedger.token("alice-uid") { $0["iss"] = "https://securetoken.google.com/other-project" }),
            ("token-expired", try ServedLedger.token("alice-uid") { $0["exp"] = now - 400 }),
            ("issued-in-future", try ServedLedger.token("alice-uid") { $0["iat"] = now + 400 }),
            ("invalid-subject", try ServedLedger.token("") { _ in }),
            ("invalid-signature", try TestTokenSigner.sign(claims: claims, keyId: "test-key-1", algorithm: .rs256(privateKeyPEM: key2))),
            ("malformed-token", "eyJhbGciOiJSUzI1NiJ9.e30"),
        ]
        let purchase = Fixtures.line(["type": "purchase", "signedTransaction": try ServedLedger.signedTransaction("5200")])
        let head = try served.ledger().store.head().sequence
        for (code, token) in refused {
            let headers = ["Authorization": "Bearer \(token)"]
            for answer in [
                try served.client.post("/v1/transactions", purchase, headers: headers),
                try served.client.get("/v1/entitlements", headers: headers),
                try served.client.send("DELETE", "/v1/account", headers: headers),
            ] {
                #expect(answer.status == 401, "\(code): \(answer.text)")
                #expect(answer.json["code"] as? String == code)
                #expect(answer.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
                #expect(answer.json["entitlements"] == nil)
            }
        }
        for headers in [[:], ["Authorization": "Basic YWxpY2U6c2VjcmV0"], ["Authorization": "Bearer"]] {
            let answer = try served.client.get("/v1/entitlements", headers: headers)
            #expect(answer.status == 401 && answer.json["code"] as? String == "missing-token")
        }
        let ledger = try served.ledger()
        #expect(try ledger.store.head().sequence == head, "a refused token changed the store")
        #expect(try ledger.binding(originalTransactionId: "5100").uid == "alice-uid")
        // The log names no token, UID or transaction.
        let log = served.log
        #expect(!log.contains("alice-uid") && !log.contains("5100") && !log.contains("eyJ"))
        #expect(log.contains("\"code\":\"token-expired\""))
    }

    @Test func appleNotificationsAre200OnceDurable400WhenNotANotification() throws {
        let served = try ServedLedger()
        #expect(try served.transaction("purchase", as: "carol-uid", try ServedLedger.signedTransaction("6100")).status == 200)
        let renewal = try ServedLedger.signedTransaction("6100", transactionId: "6101")
        let body = Fixtures.line(["signedPayload": try ServedLedger.signedNotification("DID_RENEW", uuid: "6b1c-01", transaction: renewal)])
        let first = try served.client.post("/v1/apple/notifications", body)
        #expect(first.status == 200, "\(first.text)")
        #expect(first.json["decision"] as? String == "granted")
        let again = try served.client.post("/v1/apple/notifications", body)
        #expect(again.status == 200 && again.json["duplicate"] as? Bool == true, "Apple's retry is a duplicate")
        let unbound = Fixtures.line([
            "signedPayload": try ServedLedger.signedNotification(
                "SUBSCRIBED", uuid: "6b1c-02", transaction: try ServedLedger.signedTransaction("6900"))
        ])
        let ignored = try served.client.post("/v1/apple/notifications", unbound)
        #expect(ignored.status == 200 && ignored.json["decision"] as? String == "ignored")
        let foreign = try ServedLedger.signedNotification("DID_RENEW", uuid: "6b1c-03", transaction: renewal, bundleId: "com.other.app")
        let refused: [(String, String)] = [
            ("not JSON", "signedPayload=abc"),
            ("no signedPayload", #"{"payload":"x"}"#),
            ("an extra field", Fixtures.line(["signedPayload": "x.y.z", "account": "carol-uid"])),
            ("not a JWS", #"{"signedPayload":"abc"}"#),
            (
                "tampered",
                Fixtures.line(["signedPayload": Self.tamper(try ServedLedger.signedNotification("REFUND", uuid: "6b1c-04", transaction: renewal))])
            ),
            ("another app", Fixtures.line(["signedPayload": foreign])),
        ]
        for (name, body) in refused {
            let answer = try served.client.post("/v1/apple/notifications", body)
            #expect(answer.status == 400, "\(name): \(answer.text)")
        }
        #expect(try served.ledger().account(uid: "carol-uid").entitlements.first?.active == true, "the tampered REFUND changed nothing")
        #expect(served.stop(SIGINT) == 0)
    }

    static func tamper(_ jws: String) -> String {
        var parts = jws.split(separator: ".").map(String.init)
        parts[2] = String(parts[2].reversed())
        return parts.joined(separator: ".")
    }

    @Test func submitBatchesAnswerExactlyAsLedgerSubmitDoesForServiceTokensOnly() throws {
        let served = try ServedLedger()
        let at = ServedLedger.anHourAgo
        let lines = [
            Fixtures.line([
                "id": 1, "type": "purchase", "account": "dave-uid", "signedTransaction": try ServedLedger.signedTransaction("7100"), "at": at,
            ]),
            Fixtures.line([
                "id": 2, "type": "restore", "account": "erin-uid", "signedTransaction": try ServedLedger.signedTransaction("7100"), "at": at,
            ]),
            Fixtures.line(["id": 3, "type": "purchase", "account": "erin-uid", "transaction": Fixtures.transaction("7200", at: at), "at": at]),
            "not json",
            "",
            Fixtures.line(["id": 4, "type": "delete-account", "account": "dave-uid", "at": at + 1]),
        ]
        let body = lines.joined(separator: "\n") + "\n"
        let headers = ["Authorization": "Bearer \(ServedLedger.serviceToken)"]
        let answer = try served.client.post("/v1/submit", body, headers: headers)
        #expect(answer.status == 200)
        #expect(answer.headers["content-type"] == "application/x-ndjson")
        let answers = answer.text.split(separator: "\n").map { Fixtures.object(String($0)) }
        #expect(answers.map { $0["decision"] as? String } == ["granted", "denied", "invalid", "invalid", "recorded"])
        #expect(answers[2]["code"] as? String == "verification-failed", "decoded facts are never accepted over the network")
        // The same input through `ledger submit` on a store with the same history: the same bytes.
        let directory = TemporaryDirectory("serve-compare")
        defer { directory.remove() }
        let store = directory.path("store").path
        _ = try LedgerBinary.run([
            "init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--root-certificate",
            ServedLedger.appleCertificates.appendingPathComponent("testCA.der").path,
        ])
        #expect(try LedgerBinary.run(["submit", "--store", store], stdin: body).stdout == answer.text)

        for wrong in [[:], ["Authorization": "Bearer " + String(ServedLedger.serviceToken.dropLast()) + "x"], try served.authorization("dave-uid")] {
            let refused = try served.client.post("/v1/submit", body, headers: wrong)
            #expect(refused.status == 401, "\(refused.text)")
        }
        #expect(try served.client.post("/v1/submit", "", headers: headers).text.isEmpty)
        let tooMany = String(repeating: #"{"type":"purchase"}"# + "\n", count: 1_001)
        #expect(try served.client.post("/v1/submit", tooMany, headers: headers).status == 413)
    }

    @Test func submitNeedsAServiceTokenFileOnlyItsOwnerCanRead() throws {
        let served = try ServedLedger(serviceTokens: false)
        let disabled = try served.client.post("/v1/submit", "", headers: ["Authorization": "Bearer \(ServedLedger.serviceToken)"])
        #expect(disabled.status == 401 && disabled.json["code"] as? String == "service-tokens-not-configured")
        let directory = TemporaryDirectory("serve-no-tokens")
        defer { directory.remove() }
        // A token file readable by others, an empty one and a weak token stop the server from starting.
        let file = directory.path("tokens")
        for (contents, mode, message) in [
            (ServedLedger.serviceToken, 0o644, "readable by others"), ("\n\n", 0o600, "holds no token"), ("short", 0o600, "shorter than 32"),
        ] {
            try Data(contents.utf8).write(to: file)
            chmod(file.path, mode_t(mode))
            let result = try LedgerBinary.run([
                "serve", "--store", served.store, "--listen", "127.0.0.1:0", "--firebase-project-id", "p", "--firebase-certificates",
                ServedLedger.firebaseKeys.appendingPathComponent("certificates.json").path, "--service-token-file", file.path,
            ])
            #expect(result.status == 2)
            #expect(result.stderr.contains(message), "\(result.stderr)")
        }
    }

    @Test func healthReadinessMetricsAndUnknownRoutes() throws {
        let served = try ServedLedger()
        #expect(try served.client.get("/healthz").status == 200)
        #expect(try served.client.get("/readyz").json["status"] as? String == "ready")
        #expect(
            try served.transaction("purchase", as: "uid-metrics-fay-7f3a9c", try ServedLedger.signedTransaction("2000000000008100")).status == 200)
        _ = try served.client.get("/v1/entitlements", headers: ["Authorization": "Bearer nope"])
        _ = try served.client.post("/v1/apple/notifications", #"{"signedPayload":"a.b.c"}"#)
        let missing = try served.client.get("/v1/nothing-here")
        #expect(missing.status == 404 && missing.json["code"] as? String == "not-found")
        let wrongMethod = try served.client.get("/v1/transactions")
        #expect(wrongMethod.status == 405 && wrongMethod.headers["allow"] == "POST")
        let metrics = try served.client.get("/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.headers["content-type"]?.hasPrefix("text/plain") == true)
        for expected in [
            #"ledger_http_requests_total{route="POST /v1/transactions",status="200"} 1"#,
            #"ledger_http_requests_total{route="other",status="404"} 1"#,
            #"ledger_decisions_total{decision="granted",code="ok"} 1"#,
            #"ledger_commit_group_size_count 1"#, "ledger_commit_seconds_bucket", "ledger_commit_queue_depth 0",
            #"ledger_token_failures_total{code="malformed-token"} 1"#, #"ledger_jws_failures_total{code="invalid-jws-format"} 1"#,
            #"ledger_firebase_key_refreshes_total{result="ok"} 1"#,
        ] {
            #expect(metrics.text.contains(expected), "\(expected)")
        }
        // Identifiers long enough that no figure matches them by chance ("8100" did: a sum 0.0081003).
        #expect(!metrics.text.contains("uid-metrics-fay-7f3a9c") && !metrics.text.contains("2000000000008100"))
        // Every log line is one JSON object with route, status and duration.
        for line in served.log.split(separator: "\n") {
            let object = Fixtures.object(String(line))
            #expect(object["route"] != nil || object["event"] != nil, "\(line)")
        }
    }

    @Test func servesTLSWithItsCertificate() throws {
        let tls = LedgerBinary.packageRoot.appendingPathComponent("Tests/HTTPServerTests/TLS")
        let served = try ServedLedger([
            "--tls-certificate", tls.appendingPathComponent("localhost.cert.pem").path, "--tls-key",
            tls.appendingPathComponent("localhost.key.pem").path,
        ])
        let result = try Curl.run([
            "--silent", "--cacert", tls.appendingPathComponent("localhost.cert.pem").path, "https://localhost:\(served.port)/readyz",
        ])
        #expect(result.status == 0 && Fixtures.object(result.stdout)["status"] as? String == "ready", "\(result.stderr)")
    }

    @Test func badOptionsAreUsageErrors() throws {
        let served = try ServedLedger()
        let certificates = ServedLedger.firebaseKeys.appendingPathComponent("certificates.json").path
        let base = ["serve", "--store", served.store, "--firebase-project-id", "p"]
        let cases: [([String], String)] = [
            (["serve", "--store", served.store, "--listen", "127.0.0.1:0"], "--firebase-project-id is required"),
            (base + ["--firebase-certificates", certificates], "--listen is required"),
            (base + ["--listen", "127.0.0.1", "--firebase-certificates", certificates], "is not HOST:PORT"),
            (base + ["--listen", "::1:80", "--firebase-certificates", certificates], "in brackets"),
            (base + ["--listen", "127.0.0.1:0", "--firebase-certificates", "/nonexistent.json"], "--firebase-certificates"),
            (base + ["--listen", "127.0.0.1:\(served.port)", "--firebase-certificates", certificates], "cannot listen"),
            (base + ["--listen", "127.0.0.1:0", "--firebase-certificates", certificates, "--tls-key", "k.pem"], "go together"),
            (base + ["--listen", "127.0.0.1:0", "--firebase-certificates", certificates, "--header-timeout", "0"], "--header-timeout 0"),
            (base + ["--listen", "127.0.0.1:0", "--firebase-certificates", certificates, "--delete-sign-in-age", "0"], "--delete-sign-in-age 0"),
            (
                base + ["--listen", "127.0.0.1:0", "--firebase-certificates", certificates, "--max-connections-per-ip", "-1"],
                "--max-connections-per-ip -1 is not a non-negative integer"
            ),
        ]
        for (arguments, message) in cases {
            let result = try LedgerBinary.run(arguments)
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
        // An address it cannot listen on is named with the port asked for, never libmicrohttpd's port 0.
        let taken = try LedgerBinary.run(base + ["--listen", "127.0.0.1:\(served.port)", "--firebase-certificates", certificates])
        #expect(taken.stderr.contains("cannot listen on 127.0.0.1 port \(served.port): "), "\(taken.stderr)")
        #expect(!taken.stderr.contains("port 0"), "\(taken.stderr)")
    }
}

/// `ledger bench serve` keeps working: a tiny run of each route answers every request 200.
@Suite struct ServeBenchmarkTests {
    @Test(arguments: [
        ["--route", "transactions", "--requests", "40"], ["--route", "transactions", "--requests", "40", "--purchases-per-account", "4"],
        ["--route", "submit", "--requests", "4", "--batch", "10"],
    ])
    func benchServeRunsEndToEnd(_ route: [String]) throws {
        let directory = TemporaryDirectory("bench-serve")
        defer { directory.remove() }
        let result = try LedgerBinary.run(
            ["bench", "serve", "--clients", "4", "--fixtures", ServedLedger.root.path, "--dir", directory.path("bench").path] + route)
        #expect(result.status == 0, "\(result.stderr)")
        let figures = result.json
        #expect(OutputSchemas.shared.problems(result.stdout, against: "bench.schema.json") == [])
        #expect(figures["decisions"] as? Int == 40)
        #expect(figures["statuses"] as? [String: Int] == ["200": Int(route[3]) ?? 0])
        #expect(figures["serverExitStatus"] as? Int == 0)
        #expect((figures["commits"] as? Int ?? 0) >= 1)
        #expect(figures["serverCPUMsPerDecision"] as? Double != nil && figures["clientCPUMsPerDecision"] as? Double != nil)
    }

    /// Outside the repository root (no `Tests/` there) and with a `--fixtures` lacking the keys, `bench
    /// serve` and `bench sign` say what they need, exit 2 and create nothing.
    @Test func benchOutsideTheRepositoryNamesTheTestKeysItNeeds() throws {
        let elsewhere = TemporaryDirectory("bench-elsewhere")
        defer { elsewhere.remove() }
        try Data("{}\n".utf8).write(to: elsewhere.path("in.jsonl"))
        let cases: [([String], String)] = [
            (["bench", "serve", "--requests", "1"], "./Tests (no --fixtures given) has no AppleSignedDataTests/Vectors/certs/testLeaf.der"),
            (["bench", "serve", "--requests", "1", "--fixtures", elsewhere.url.path], "--fixtures \(elsewhere.url.path) has no"),
            (["bench", "sign", "--in", "in.jsonl", "--out", "out.jsonl"], "./Tests (no --fixtures given) has no"),
        ]
        for (arguments, message) in cases {
            let result = try LedgerBinary.run(arguments, currentDirectory: elsewhere.url)
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(result.stderr)")
            #expect(result.stderr.contains("run it from the repository root, or give --fixtures"), "\(result.stderr)")
            #expect(!result.stderr.contains("NSCocoaErrorDomain"), "\(result.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere.url.path) == ["in.jsonl"])
    }

    @Test func benchServeRefusesAServerThatIsNotAnExecutable() throws {
        let result = try LedgerBinary.run(["bench", "serve", "--server", "/nonexistent/ledger", "--requests", "1"])
        #expect(result.status == 2 && result.stderr.contains("--server /nonexistent/ledger is not an executable file"), "\(result.stderr)")
    }
}

/// What the service reads itself before the protocol.
@Suite struct RequestBodiesTests {
    @Test func bearerTokensAreReadInTheirOneForm() {
        #expect(RequestBodies.bearerToken("Bearer abc.def") == "abc.def")
        #expect(RequestBodies.bearerToken("bearer abc") == "abc")
        #expect(RequestBodies.bearerToken("  BEARER   abc  ") == "abc")
        for refused in [nil, "", "Bearer", "Bearer ", "Bearerabc", "Basic abc", "Bearer a b", "Bear abc", "Bearer\tabc", "Xearer abc"] {
            #expect(RequestBodies.bearerToken(refused) == nil, "\(refused ?? "nil")")
        }
    }

    @Test func notificationBodiesHoldOnlyASignedPayloadReadStrictly() throws {
        let line = try RequestBodies.notificationLine(Array(#"{"signedPayload":"a.b.c"}"#.utf8))
        #expect(String(decoding: line, as: UTF8.self) == #"{"signedPayload":"a.b.c","type":"notification"}"#)
        for body in [#"{"signedPayload":"a","signedPayload":"b"}"#, #"{"signedPayload":1}"#, #"{"signedPayload":"a","x":1}"#, "[]", ""] {
            #expect(throws: BodyError.self, "\(body)") { try RequestBodies.notificationLine(Array(body.utf8)) }
        }
    }

    @Test func batchesSplitAsLedgerSubmitReadsThem() throws {
        let lines = try RequestBodies.ndjsonLines(Array("a\r\n\n \t\nb\n\(String(repeating: "x", count: (1 << 20) + 1))\nc".utf8))
        #expect(
            lines == [
                .bytes(Array("a".utf8)[...]), .bytes(Array("b".utf8)[...]), .unreadable("line is longer than 1048576 bytes"),
                .bytes(Array("c".utf8)[...]),
            ])
        #expect(throws: BodyError.self) { try RequestBodies.ndjsonLines(Array(String(repeating: "{}\n", count: 1_001).utf8)) }
    }
}
