import AppleSignedData
import Foundation
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import AppStoreServerAPI

/// The client's parts: the token, the key file, the base URL, response parsing, and how each kind of
/// answer is handled.
@Suite struct APIClientTests {
    final class Clock: @unchecked Sendable {
        private let lock = NSLock()
        private var ms: Int64
        init(_ ms: Int64) { self.ms = ms }
        func advance(seconds: Int64) { lock.withLock { ms += seconds * 1000 } }
        var now: Int64 { lock.withLock { ms } }
    }

    static func decode(_ segment: Substring) -> [String: Any] {
        Base64URL.decode(segment).flatMap { (try? JSONSerialization.jsonObject(with: Data($0))) as? [String: Any] } ?? [:]
    }

    @Test func theTokenCarriesApplesHeaderAndClaimsAndIsReusedUntilAMinuteBeforeItExpires() throws {
        let key = try ES256PrivateKeyFromFile("testSigningKey.p8")
        let credentials = try AppStoreConnectCredentials(issuerId: "57246542-96fe-1a63-e053-0824d011072a", keyId: "2X9R4HXF34", privateKey: key)
        let clock = Clock(1_764_547_200_000)
        let tokens = BearerTokens(credentials: credentials, bundleId: "com.myrecipes.app", clock: { clock.now })
        let token = try tokens.token()
        let parts = token.split(separator: ".")
        try #require(parts.count == 3)
        let header = Self.decode(parts[0])
        let claims = Self.decode(parts[1])
        #expect(header as NSDictionary == ["alg": "ES256", "kid": "2X9R4HXF34", "typ": "JWT"] as NSDictionary)
        #expect(
            claims as NSDictionary
                == [
                    "iss": "57246542-96fe-1a63-e053-0824d011072a", "iat": 1_764_547_200, "exp": 1_764_547_200 + 1200,
                    "aud": "appstoreconnect-v1", "bid": "com.myrecipes.app",
                ] as NSDictionary)
        let signature = try #require(Base64URL.decode(parts[2]))
        #expect(try key.publicKey.isValidSignature(signature, for: Array("\(parts[0]).\(parts[1])".utf8)))
        clock.advance(seconds: 1200 - 61)
        #expect(try tokens.token() == token, "reused while more than a minute is left")
        clock.advance(seconds: 2)
        let renewed = try tokens.token()
        #expect(renewed != token)
        #expect(Self.decode(renewed.split(separator: ".")[1])["iat"] as? Int == 1_764_547_200 + 1141)
    }

    @Test func theKeyFileMustBeAnOwnerOnlyP256Key() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        #expect(throws: Never.self) { try AppStoreConnectCredentials.privateKey(file: try f.keyFile()) }
        #expect(throws: Never.self) { try AppStoreConnectCredentials.privateKey(file: try f.keyFile(mode: 0o400, name: "ro.p8")) }
        func refusal(_ path: String) -> String {
            do {
                _ = try AppStoreConnectCredentials.privateKey(file: path)
                return "accepted"
            } catch {
                return error.kind == .configuration ? error.message : "wrong kind \(error.kind)"
            }
        }
        let open = try f.keyFile(mode: 0o644, name: "open.p8")
        #expect(
            refusal(open) == "the private key file \(open) has mode 644: group or others may read it; mode 0600 is required (run `chmod 600 \(open)`)"
        )
        #expect(refusal(try f.keyFile(mode: 0o640, name: "group.p8")).contains("mode 640"))
        #expect(refusal(f.directory.path("missing.p8").path).contains("cannot be read: No such file or directory"))
        #expect(refusal(f.directory.url.path).contains("is not a regular file"))
        let garbage = try f.keyFile(name: "garbage.p8", contents: Data("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".utf8))
        #expect(refusal(garbage).hasPrefix("\(garbage) is not an App Store Connect in-app purchase key (a PKCS#8 EC P-256 .p8 file)"))
        let ed25519 = try f.keyFile(name: "ed.p8", contents: Data(try Ed25519PrivateKey.generate().pem.utf8))
        #expect(refusal(ed25519).hasSuffix("the key is ED25519, not an EC P-256 key"))
        let huge = try f.keyFile(name: "huge.p8", contents: Data(count: AppStoreConnectCredentials.maximumKeyFileBytes + 1))
        #expect(refusal(huge).contains("larger than 65536 bytes"))
        #expect(throws: AppStoreAPIError.self) { try AppStoreConnectCredentials(issuerId: "", keyId: "K", privateKey: f.key) }
        #expect(throws: AppStoreAPIError.self) { try AppStoreConnectCredentials(issuerId: "I", keyId: "two words", privateKey: f.key) }
    }

    @Test func tokensTravelOnlyOverHTTPSOrToALoopbackAddress() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let credentials = try AppStoreConnectCredentials(issuerId: "I", keyId: "K", privateKey: f.key)
        for text in ["http://api.example.com", "ftp://127.0.0.1", "http://10.0.0.1:8080", "https://api.example.com/?x=1", "file:///tmp"] {
            let url = try #require(URL(string: text))
            #expect(throws: AppStoreAPIError.self, "\(text)") {
                try AppStoreServerAPIClient(baseURL: url, credentials: credentials, bundleId: "b", clock: { 0 })
            }
        }
        for text in ["https://api.storekit.itunes.apple.com", "http://127.0.0.1:8080", "http://localhost:1", "https://proxy.example.com/apple"] {
            let url = try #require(URL(string: text))
            #expect(throws: Never.self, "\(text)") {
                try AppStoreServerAPIClient(baseURL: url, credentials: credentials, bundleId: "b", clock: { 0 })
            }
        }
        #expect(AppStoreServerAPIClient.baseURL(for: .production)?.absoluteString == "https://api.storekit.itunes.apple.com")
        #expect(AppStoreServerAPIClient.baseURL(for: .sandbox)?.absoluteString == "https://api.storekit-sandbox.itunes.apple.com")
        #expect(AppStoreServerAPIClient.baseURL(for: .xcode) == nil)
        #expect(AppStoreServerAPIClient.percentEncoded("a+b/c=d e~-._") == "a%2Bb%2Fc%3Dd%20e~-._")
    }

    @Test func responseBodiesAreParsedStrictly() throws {
        func page(_ json: String) throws -> NotificationHistoryResponse { try NotificationHistoryResponse(jsonData: Data(json.utf8)) }
        let good = try page(
            #"{"hasMore":true,"paginationToken":"t1","notificationHistory":[{"signedPayload":"a.b.c","sendAttempts":[]},{"signedPayload":"d.e.f"}]}"#)
        #expect(good == NotificationHistoryResponse(signedPayloads: ["a.b.c", "d.e.f"], hasMore: true, paginationToken: "t1"))
        #expect(try page(#"{"notificationHistory":[],"hasMore":false}"#).signedPayloads.isEmpty)
        #expect(try page("{}") == NotificationHistoryResponse(signedPayloads: [], hasMore: false, paginationToken: nil))
        for bad in [
            #"{"hasMore":true,"notificationHistory":[]}"#, #"{"hasMore":"yes"}"#, #"{"notificationHistory":{}}"#,
            #"{"notificationHistory":[{"sendAttempts":[]}]}"#, #"{"notificationHistory":[{"signedPayload":7}]}"#,
            #"{"notificationHistory":[7]}"#, "[]", "", "{", #"{"hasMore":1}"#,
        ] {
            #expect(throws: VerificationError.self, "\(bad)") { try page(bad) }
        }
        #expect(
            APIErrorResponse(jsonData: Data(#"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#.utf8))
                == APIErrorResponse(jsonData: Data(#"{"errorMessage":"Transaction id not found.","errorCode":4040010}"#.utf8)))
        #expect(APIErrorResponse(jsonData: Data(#"{"errorCode":4040010}"#.utf8))?.errorCode == 4_040_010)
        for bad in ["", "{}", #"{"errorCode":"4040010"}"#, #"{"errorCode":true}"#, "[1]", "<html>"] {
            #expect(APIErrorResponse(jsonData: Data(bad.utf8)) == nil, "\(bad)")
        }
        let now: Int64 = 1_445_412_480_000  // Wed, 21 Oct 2015 07:28:00 GMT
        #expect(RetryAfter.seconds("120", now: now) == 120)
        #expect(RetryAfter.seconds(" 0 ", now: now) == 0)
        #expect(RetryAfter.seconds("Wed, 21 Oct 2015 07:30:00 GMT", now: now) == 120)
        #expect(RetryAfter.seconds("Wed, 21 Oct 2015 07:00:00 GMT", now: now) == 0, "a date in the past")
        #expect(RetryAfter.seconds("Sun, 06 Nov 1994 08:49:37 GMT", now: 784_111_737_000) == 40)
        for bad in [
            "", "-1", "1.5", "soon", "9999999999", "Wed, 21 Oct 2015 07:30:00 PST", "Wed, 31 Feb 2015 07:30:00 GMT",
            "Wed, 21 Oct 2015 24:30:00 GMT", "Wed,  21 Oct 2015 07:30:00 GMT", "Xyz, 21 Oct 2015 07:30:00 GMT", "Wednesday, 21-Oct-15 07:28:00 GMT",
        ] {
            #expect(RetryAfter.seconds(bad, now: now) == nil, "\(bad)")
        }
    }

    @Test func eachKindOfAnswerIsHandledAsDocumented() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let client = try f.client()
        func failure(_ body: () throws -> Void) -> AppStoreAPIError? {
            do {
                try body()
                return nil
            } catch {
                return error as? AppStoreAPIError
            }
        }
        // A retryable 404 ("original transaction id not found, try again") is retried; then the history comes.
        f.server.setHistory("2000000000000005", [])
        f.server.fault(
            request: 1, .status(404, body: #"{"errorCode":4040006,"errorMessage":"Original transaction id not found. Please try again."}"#))
        #expect(try client.transactionHistory(transactionId: "2000000000000005", revision: nil).items.isEmpty)
        #expect(f.sleeps.list == [0.5])
        // A 400 is not retried and carries Apple's code and message.
        f.server.fault(
            request: 3,
            .status(400, body: #"{"errorCode":4000012,"errorMessage":"Invalid request. The start date is earlier than the allowed start date."}"#))
        let badRequest = failure { _ = try client.notificationHistory(startDate: 1, endDate: 2, paginationToken: nil) }
        #expect(badRequest?.kind == .rejected && badRequest?.status == 400 && badRequest?.errorCode == 4_000_012)
        #expect(badRequest?.description.contains("The start date is earlier than the allowed start date.") == true)
        // A redirect is never followed: the token stays with this server.
        f.server.fault(request: 4, .status(302, headers: [("Location", "http://127.0.0.1:1/elsewhere")]))
        #expect(failure { _ = try client.notificationHistory(startDate: 1, endDate: 2, paginationToken: nil) }?.kind == .rejected)
        // A 200 whose body is not the documented shape.
        f.server.fault(request: 5, .status(200, body: #"{"notificationHistory":"nope"}"#))
        let malformed = failure { _ = try client.notificationHistory(startDate: 1, endDate: 2, paginationToken: nil) }
        #expect(malformed?.kind == .rejected && malformed?.description.contains("not a notification history") == true)
        #expect(f.server.requests.count == 5)
        #expect(f.sleeps.list == [0.5])
        // The id must be digits: nothing is sent otherwise.
        #expect(failure { _ = try client.transactionHistory(transactionId: "../notifications", revision: nil) }?.kind == .configuration)
        #expect(f.server.requests.count == 5)
    }

    @Test func aRetryPolicyThatGivesUpCancelsTheRequest() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        f.server.fault(request: 1, .status(503))
        let credentials = try AppStoreConnectCredentials(issuerId: f.server.expected.issuerId, keyId: f.server.expected.keyId, privateKey: f.key)
        let client = try AppStoreServerAPIClient(
            baseURL: f.server.baseURL, credentials: credentials, bundleId: Fixtures.bundleId, retry: .init(sleep: { _ in false }),
            clock: LedgerTime.now)
        #expect {
            try client.notificationHistory(startDate: 1, endDate: 2, paginationToken: nil)
        } throws: { error in
            (error as? AppStoreAPIError)?.kind == .cancelled && "\(error)".contains("stopped while waiting to retry after 503")
        }
        #expect(f.server.requests.count == 1)
    }

    @Test func networkErrorsAreRetriedThenNamed() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let base = f.server.baseURL
        f.server.shutdown()  // nothing listens on that port any more
        let credentials = try AppStoreConnectCredentials(issuerId: "I", keyId: "K", privateKey: f.key)
        let sleeps = Collected<Double>()
        let client = try AppStoreServerAPIClient(
            baseURL: base, credentials: credentials, bundleId: "b",
            retry: .init(
                maximumAttempts: 3, initialDelay: 0.25,
                sleep: { seconds in
                    sleeps.add(seconds)
                    return true
                }),
            clock: LedgerTime.now)
        #expect {
            try client.transactionHistory(transactionId: "1", revision: nil)
        } throws: { error in
            guard let error = error as? AppStoreAPIError else { return false }
            return error.kind == .unavailable && error.status == nil
                && error.description.hasPrefix("GET /inApps/v2/history/{transactionId}: network error")
                && error.description.contains("gave up after 3 attempts")
        }
        #expect(sleeps.list == [0.25, 0.5])
    }
}
